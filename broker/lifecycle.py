"""The broker's standing with the controllers (Kafka's BrokerLifecycleManager).

- Registration: a new incarnation id per process start; the broker epoch comes back.
- Heartbeats every `broker.heartbeat.interval.ms` carrying the metadata offset every
  publisher has applied; the answers say whether we are fenced and, in a controlled
  shutdown, when we may go.
- Fenced on request until the broker can serve (`ready_to_unfence`), and on request
  again at the end of a controlled shutdown, so a restart can register at once.
- Refused connections to a leader (a follower's fetcher) are reported to the controller
  (`report_refused`): a certain sign the leader's process is gone, which lets the
  controller fence it before its session expires (kraft/cluster_control.py).
It is itself a metadata publisher, registered last: it learns the applied offset from
the loader, and tells the controller at once when that reaches our registration.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable

from broker.controller_channel import (
    BACKOFF_MAX_S,
    BACKOFF_MIN_S,
    ControllerChannel,
    ControllerError,
    ControllerUnavailable,
)
from broker.metadata_publisher import LoaderManifest
from broker.shutdownable import ShutdownableTask
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors
from metadata_log.controller_api import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    BrokerUnreachableRequest,
)
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.records import Endpoint

log = logging.getLogger("broker.lifecycle")
REPORT_EVERY_MS = 500  # refusals of one leader reported at most this often
REPORT_TIMEOUT_S = 2.0  # a report is only useful while it is fresh


class BrokerLifecycleManager:
    def __init__(
        self,
        channel: ControllerChannel,
        listeners: list[Endpoint],
        *,
        rack: str | None = None,
        heartbeat_interval_ms: int = 2000,
        incarnation_id: str | None = None,
        clock: Clock = SYSTEM_CLOCK,
        previous_broker_epoch: Callable[[], int] = lambda: -1,
    ) -> None:
        self._channel = channel
        # KIP-966: the epoch our clean-shutdown marker named (-1: the last shutdown was
        # unclean), read once the logs are open, sent when registering.
        self._previous_broker_epoch = previous_broker_epoch
        self.broker_id = channel.broker_id
        self.incarnation_id = incarnation_id or uuid.uuid4().hex  # new per process start
        self._listeners = listeners
        self._rack = rack
        self._heartbeat_s = heartbeat_interval_ms / 1000
        # One heartbeat try waits at most this long before the next controller is tried.
        # Without it, a heartbeat to an active controller that was paused (SIGSTOP: the
        # kernel still accepts the connection) waited request.timeout.ms (30 s) while the
        # new active controller, hearing from nobody, fenced every broker after its
        # session timeout (the fault campaign, seed 2279696855). Kafka's brokers follow
        # the Raft leader instead; two intervals is well inside any session timeout.
        self._attempt_timeout_s = max(1.0, 2 * self._heartbeat_s)
        self._clock = clock
        self.metadata_offset = -1  # what every publisher has applied
        self.broker_epoch = -1
        self.fenced = True
        self.should_shut_down = False
        self._want_shutdown = False
        # Fenced on request until the broker can serve (its listener is up): only then
        # may the controller unfence us and make us a leader (Kafka's setReadyToUnfence).
        self._want_fence = True
        self._state_changed = asyncio.Event()  # any heartbeat answer or applied update
        self._heartbeat_now = asyncio.Event()
        self._loop = ShutdownableTask("broker-heartbeats", self._run)
        self._image = MetadataImage()  # the last applied: the epochs of other brokers
        self._reported_ms: dict[int, int] = {}  # broker id -> when we last reported it
        self._reports: set[asyncio.Task[None]] = set()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        for task in list(self._reports):
            task.cancel()

    # -- what the broker waits for -----------------------------------------------------------

    @property
    def is_caught_up(self) -> bool:
        return self.broker_epoch >= 0 and self.metadata_offset >= self.broker_epoch

    async def wait_until_caught_up(self, timeout_s: float) -> None:
        """Registered, and the metadata log applied up to our registration."""
        await self._wait_for(lambda: self.is_caught_up, timeout_s, "caught up with metadata")

    def ready_to_unfence(self) -> None:
        self._want_fence = False
        self._heartbeat_now.set()

    async def wait_until_unfenced(self, timeout_s: float) -> None:
        await self._wait_for(
            lambda: self.is_caught_up and not self.fenced, timeout_s, "unfenced by the controller"
        )

    async def controlled_shutdown(self, timeout_s: float) -> bool:
        """Ask to shut down (the controller moves our leaderships away) and wait until it
        says we may. Then ask to be fenced, so a restart can register at once instead of
        waiting out the session. Returns False at the deadline."""
        self._want_shutdown = True
        self._heartbeat_now.set()
        try:
            await self._wait_for(lambda: self.should_shut_down, timeout_s, "controlled shutdown")
        except TimeoutError:
            return False
        self._want_shutdown, self._want_fence = False, True
        with contextlib.suppress(ControllerError, ControllerUnavailable):
            await self._heartbeat(timeout_s=min(2.0, timeout_s))
        return True

    async def _wait_for(self, cond: Callable[[], bool], timeout_s: float, what: str) -> None:
        """Wait until `cond()` holds, re-checked on every heartbeat answer and update.
        `timeout_s` may be infinite."""
        deadline_ms = self._clock.monotonic_ms() + timeout_s * 1000
        while not cond():
            remaining = (deadline_ms - self._clock.monotonic_ms()) / 1000
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting to be {what}")
            self._state_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if remaining == float("inf") else remaining):
                    await self._state_changed.wait()

    def _changed(self) -> None:
        self._state_changed.set()

    # -- MetadataPublisher ---------------------------------------------------------------------

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        self.metadata_offset = image.offset
        self._image = image
        if self.fenced and self.is_caught_up:
            self._heartbeat_now.set()  # tell the controller at once: it unfences us
        self._changed()

    # -- what followers see ----------------------------------------------------------------------

    def report_refused(self, broker_id: int) -> None:
        """A connection to `broker_id` was refused: tell the controller, at most once per
        REPORT_EVERY_MS per broker (fetchers retry quickly), without waiting for it."""
        now = self._clock.monotonic_ms()
        if self.broker_epoch < 0 or now - self._reported_ms.get(broker_id, -REPORT_EVERY_MS) < (
            REPORT_EVERY_MS
        ):
            return
        self._reported_ms[broker_id] = now
        reg = self._image.brokers.get(broker_id)
        req = BrokerUnreachableRequest(
            broker_id, reg.broker_epoch if reg is not None else -1, self.broker_id, "refused"
        )

        async def report() -> None:
            with contextlib.suppress(ControllerError, ControllerUnavailable):
                await self._channel.broker_unreachable(req, timeout_s=REPORT_TIMEOUT_S)

        task = asyncio.create_task(report(), name=f"report-refused-{broker_id}")
        self._reports.add(task)
        task.add_done_callback(self._reports.discard)

    # -- registration and heartbeats -------------------------------------------------------------

    async def _run(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._loop.stopping:
            try:
                if self.broker_epoch < 0:
                    await self._register()
                await self._heartbeat()
                backoff = BACKOFF_MIN_S
                # In a controlled shutdown the controller answers "go" on a later
                # heartbeat, once our leaderships have moved: ask often.
                interval = min(self._heartbeat_s, 0.2) if self._want_shutdown else self._heartbeat_s
            except (ControllerError, ControllerUnavailable) as exc:
                log.info("heartbeat failed broker=%d: %s", self.broker_id, exc)
                interval, backoff = backoff, min(BACKOFF_MAX_S, backoff * 2)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("heartbeat loop error broker=%d", self.broker_id)
                interval = self._heartbeat_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._heartbeat_now.wait(), interval)
            self._heartbeat_now.clear()

    async def _register(self) -> None:
        req = BrokerRegistrationRequest(
            self.broker_id,
            self.incarnation_id,
            list(self._listeners),
            self._rack,
            previous_broker_epoch=self._previous_broker_epoch(),
        )
        resp = await self._channel.post(
            "/v1/brokers/register",
            req,
            BrokerRegistrationResponse,
            attempt_timeout_s=self._attempt_timeout_s,
        )
        if resp.error_code == Errors.DUPLICATE_BROKER_REGISTRATION:
            # Our previous incarnation still holds a live session (it was killed, not
            # stopped): it ends within broker.session.timeout.ms.
            raise ControllerError(resp.error_code, resp.error_message or "duplicate registration")
        if resp.error_code != Errors.NONE:
            raise ControllerError(resp.error_code, resp.error_message or "registration refused")
        self.broker_epoch = resp.broker_epoch
        self.fenced = True
        self._channel.set_broker_epoch(self.broker_epoch)
        log.info(
            "registered broker=%d epoch=%d incarnation=%s",
            self.broker_id,
            self.broker_epoch,
            self.incarnation_id,
        )
        self._changed()

    async def _heartbeat(self, timeout_s: float | None = None) -> None:
        req = BrokerHeartbeatRequest(
            self.broker_id,
            self.broker_epoch,
            self.metadata_offset,
            want_fence=self._want_fence,
            want_shutdown=self._want_shutdown,
        )
        resp = await self._channel.post(
            "/v1/brokers/heartbeat",
            req,
            BrokerHeartbeatResponse,
            timeout_s=timeout_s,
            attempt_timeout_s=self._attempt_timeout_s,
        )
        if resp.error_code in (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED):
            log.warning(
                "registration lost broker=%d epoch=%d error=%d; registering again",
                self.broker_id,
                self.broker_epoch,
                resp.error_code,
            )
            self.broker_epoch = -1
            self._channel.set_broker_epoch(-1)
            self.fenced = True
            self._heartbeat_now.set()
            self._changed()
            return
        if resp.error_code != Errors.NONE:
            raise ControllerError(resp.error_code, resp.error_message or "heartbeat refused")
        if resp.is_fenced != self.fenced:
            log.info(
                "broker=%d is now %s", self.broker_id, "fenced" if resp.is_fenced else "unfenced"
            )
        self.fenced = resp.is_fenced
        self.should_shut_down = resp.should_shut_down
        self._changed()
