"""The broker's link to the controller quorum, over the controllers' HTTP API.

- Registration: a new incarnation id per process start; the broker epoch comes back.
- Heartbeats every `broker.heartbeat.interval.ms` carrying the metadata offset we have
  applied; the answers say whether we are fenced and, in a controlled shutdown, when we
  may go.
- The metadata log: long-polled from any controller (they all serve committed records),
  starting from a snapshot at first start or when our offset fell off the retained tail
  (410). Every batch of records becomes one `MetadataDelta`, handed to `on_update` in
  order; the next fetch waits for it, so updates never overlap.
- Writes (admin, AlterPartition, producer ids) go to the active controller: followers
  answer 307 with its address, or 503 while there is none; we retry across controllers
  until a deadline.
Controller failover needs nothing from us but these retries and rotations.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp
import msgspec

from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ErrorResponse,
    Errors,
    LogResponse,
)
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.records import Endpoint
from metadata_log.snapshot import SnapshotError, decode_snapshot, snapshot_records

log = logging.getLogger("broker.controller_channel")

R = TypeVar("R")
LONG_POLL_WAIT_MS = 5_000
MAX_RECORDS = 5_000
# The active controller writes a NoOpRecord every 5 s when idle: a controller that has
# sent us nothing for this long is probably cut off from the quorum. Try another.
STALE_AFTER_S = 15.0
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.05, 1.0


class ControllerError(Exception):
    """A controller refused a request (4xx with a Kafka error code)."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(f"{message} (error {error_code})")
        self.error_code = error_code
        self.message = message


class ControllerUnavailable(TimeoutError):
    """No controller answered the request before its deadline."""


@dataclass(frozen=True)
class MetadataUpdate:
    old: MetadataImage
    image: MetadataImage
    delta: MetadataDelta  # replayed onto `old`, or onto an empty image for a snapshot
    snapshot: bool  # the image replaced ours wholesale: local state not in it is stale


class ControllerChannel:
    def __init__(
        self,
        broker_id: int,
        controllers: list[tuple[str, int]],
        listeners: list[Endpoint],
        *,
        rack: str | None = None,
        heartbeat_interval_ms: int = 2000,
        request_timeout_ms: int = 30_000,
        on_update: Callable[[MetadataUpdate], Awaitable[None]] | None = None,
    ) -> None:
        if not controllers:
            raise ValueError("at least one controller endpoint is needed")
        self.broker_id = broker_id
        self.incarnation_id = uuid.uuid4().hex  # new per process start
        self._controllers = [f"http://{h}:{p}" for h, p in controllers]
        self._listeners = listeners
        self._rack = rack
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._request_timeout_s = request_timeout_ms / 1000
        self._on_update = on_update
        # Spread brokers' reads over the controllers; writes start at the last known active.
        self._reader = broker_id % len(self._controllers)
        self._writer = self._reader
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self.image = MetadataImage()
        self.broker_epoch = -1
        self.fenced = True
        self.should_shut_down = False
        self._want_shutdown = False
        # Fenced on request until the broker can serve (its listener is up): only then
        # may the controller unfence us and make us a leader (Kafka's setReadyToUnfence).
        self._want_fence = True
        self._state_changed = asyncio.Event()  # any heartbeat answer or applied update
        self._heartbeat_now = asyncio.Event()
        self._stopping = False
        self.updates_applied = 0

    # -- lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        self._stopping = False
        # Each call sets its own timeout (a long-poll needs longer than a write).
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
        self._tasks = [
            asyncio.create_task(self._follow_metadata(), name="metadata-follower"),
            asyncio.create_task(self._lifecycle(), name="broker-heartbeats"),
        ]

    async def stop(self) -> None:
        self._stopping = True  # (see LeaderFetcher.stop: a cancel alone can be swallowed)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def is_caught_up(self) -> bool:
        return self.broker_epoch >= 0 and self.image.offset >= self.broker_epoch

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
        deadline = time.monotonic() + timeout_s
        while not cond():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting to be {what}")
            self._state_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(None if remaining == float("inf") else remaining):
                    await self._state_changed.wait()

    def _changed(self) -> None:
        self._state_changed.set()

    # -- registration and heartbeats -------------------------------------------------------------

    async def _lifecycle(self) -> None:
        backoff = BACKOFF_MIN_S
        while not self._stopping:
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
            self.broker_id, self.incarnation_id, list(self._listeners), self._rack
        )
        resp = await self.post("/v1/brokers/register", req, BrokerRegistrationResponse)
        if resp.error_code == Errors.DUPLICATE_BROKER_REGISTRATION:
            # Our previous incarnation still holds a live session (it was killed, not
            # stopped): it ends within broker.session.timeout.ms.
            raise ControllerError(resp.error_code, resp.error_message or "duplicate registration")
        if resp.error_code != Errors.NONE:
            raise ControllerError(resp.error_code, resp.error_message or "registration refused")
        self.broker_epoch = resp.broker_epoch
        self.fenced = True
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
            self.image.offset,
            want_fence=self._want_fence,
            want_shutdown=self._want_shutdown,
        )
        resp = await self.post(
            "/v1/brokers/heartbeat", req, BrokerHeartbeatResponse, timeout_s=timeout_s
        )
        if resp.error_code in (Errors.STALE_BROKER_EPOCH, Errors.BROKER_ID_NOT_REGISTERED):
            log.warning(
                "registration lost broker=%d epoch=%d error=%d; registering again",
                self.broker_id,
                self.broker_epoch,
                resp.error_code,
            )
            self.broker_epoch = -1
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

    # -- the metadata log -------------------------------------------------------------------------

    async def _follow_metadata(self) -> None:
        need_snapshot = True  # first start: the snapshot is the quickest way to the present
        backoff = BACKOFF_MIN_S
        last_records = time.monotonic()
        while not self._stopping:
            base = self._controllers[self._reader]
            try:
                if need_snapshot:
                    await self._load_snapshot(base)
                    need_snapshot = False
                    last_records = time.monotonic()
                    continue
                status, body = await self._get(
                    f"{base}/v1/metadata/log?from={self.image.offset + 1}"
                    f"&wait_ms={LONG_POLL_WAIT_MS}&max_records={MAX_RECORDS}&format=msgpack",
                    LONG_POLL_WAIT_MS / 1000 + self._request_timeout_s,
                )
                if status == 410:
                    log.info(
                        "metadata offset %d fell off the log; loading a snapshot",
                        self.image.offset + 1,
                    )
                    need_snapshot = True
                    continue
                if status != 200:
                    raise ControllerUnavailable(f"GET metadata log from {base}: HTTP {status}")
                resp = msgspec.msgpack.decode(body, type=LogResponse)
                if resp.records:
                    await self._apply_records(resp)
                    last_records = time.monotonic()
                elif time.monotonic() - last_records > STALE_AFTER_S:
                    log.info(
                        "no metadata from %s for %.0fs; trying another controller",
                        base,
                        STALE_AFTER_S,
                    )
                    self._rotate_reader()
                    last_records = time.monotonic()
                backoff = BACKOFF_MIN_S
            except asyncio.CancelledError:
                raise
            except (aiohttp.ClientError, TimeoutError, OSError, ControllerUnavailable) as exc:
                log.debug("metadata fetch from %s failed: %r", base, exc)
                self._rotate_reader()
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)
            except Exception as exc:
                # A bad answer, a record we cannot replay, or a failure applying it (a
                # full disk): never skip records. Start over from a snapshot, elsewhere.
                if isinstance(exc, msgspec.DecodeError | SnapshotError | ValueError):
                    log.error("bad metadata from %s: %s", base, exc)
                else:
                    log.exception("applying metadata failed; retrying from a snapshot")
                self._rotate_reader()
                need_snapshot = True
                await asyncio.sleep(backoff)
                backoff = min(BACKOFF_MAX_S, backoff * 2)

    def _rotate_reader(self) -> None:
        self._reader = (self._reader + 1) % len(self._controllers)

    async def _load_snapshot(self, base: str) -> None:
        assert self._session is not None
        async with self._session.get(
            f"{base}/v1/metadata/snapshot",
            timeout=aiohttp.ClientTimeout(total=self._request_timeout_s),
        ) as resp:
            if resp.status != 200:
                raise ControllerUnavailable(f"GET snapshot from {base}: HTTP {resp.status}")
            body = await resp.read()
            next_offset = int(resp.headers.get("X-Next-Offset", "-1"))
        image = await asyncio.to_thread(decode_snapshot, body)
        if next_offset > 0:
            image = msgspec.structs.replace(image, offset=max(image.offset, next_offset - 1))
        if image.offset < self.image.offset:
            # A controller behind the one we read before: keep what we have.
            log.info(
                "snapshot at %d is behind our offset %d; ignored", image.offset, self.image.offset
            )
            return
        delta = MetadataDelta(MetadataImage())
        for i, record in enumerate(snapshot_records(image)):
            delta.replay(record, i)  # positions only order the replay
        await self._publish(MetadataUpdate(self.image, image, delta, snapshot=True))

    async def _apply_records(self, resp: LogResponse) -> None:
        delta = MetadataDelta(self.image)
        for entry in resp.records:
            if entry.offset <= self.image.offset:
                continue  # overlap after a rotation: already applied
            delta.replay(entry.record, entry.offset)
        new = delta.apply()
        if new.offset == self.image.offset:
            return
        await self._publish(MetadataUpdate(self.image, new, delta, snapshot=False))

    async def _publish(self, update: MetadataUpdate) -> None:
        if self._on_update is not None:
            await self._on_update(update)
        self.image = update.image
        self.updates_applied += 1
        if self.fenced and self.is_caught_up:
            self._heartbeat_now.set()  # tell the controller at once: it unfences us
        self._changed()

    # -- HTTP ----------------------------------------------------------------------------------

    async def _get(self, url: str, timeout_s: float) -> tuple[int, bytes]:
        assert self._session is not None
        async with self._session.get(url, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            return resp.status, await resp.read()

    async def post(
        self,
        path: str,
        body: msgspec.Struct,
        resp_type: type[R],
        *,
        timeout_s: float | None = None,
    ) -> R:
        """POST to the active controller: follow 307 to it, on 503 or a network error
        try the next controller after a short backoff, until `timeout_s` has passed.
        4xx answers raise ControllerError (never retried)."""
        if self._session is None:
            raise ControllerUnavailable("the controller channel is not started")
        payload = msgspec.json.encode(body)
        deadline = time.monotonic() + (timeout_s or self._request_timeout_s)
        backoff = BACKOFF_MIN_S
        target: str | None = None  # a redirect's target, tried next
        for attempt in itertools.count():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ControllerUnavailable(f"POST {path}: no controller answered in time")
            base = target or self._controllers[self._writer]
            target = None
            try:
                async with self._session.post(
                    f"{base}{path}",
                    data=payload,
                    headers={"Content-Type": "application/json"},
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=min(remaining, self._request_timeout_s)),
                ) as resp:
                    status, data = resp.status, await resp.read()
                    location = resp.headers.get("Location")
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                log.debug("POST %s%s failed: %r", base, path, exc)
                status, data, location = 0, b"", None
            if status == 200:
                self._remember_writer(base)
                return msgspec.json.decode(data, type=resp_type)
            if status == 204:
                self._remember_writer(base)
                return None  # type: ignore[return-value]
            if status == 307 and location:
                parts = urlsplit(location)
                target = f"{parts.scheme or 'http'}://{parts.netloc}"
                if attempt < 3 * len(self._controllers):
                    continue  # straight to the active controller, no backoff
            elif 400 <= status < 500:
                err = _error(data, status)
                raise ControllerError(err.error_code, err.error_message)
            else:  # 503 (no active controller yet), 5xx or a network error
                self._writer = (self._writer + 1) % len(self._controllers)
            await asyncio.sleep(min(backoff, max(0.0, deadline - time.monotonic())))
            backoff = min(BACKOFF_MAX_S, backoff * 2)
        raise AssertionError("unreachable")

    def _remember_writer(self, base: str) -> None:
        if base in self._controllers:
            self._writer = self._controllers.index(base)

    # -- writes used by the broker ----------------------------------------------------------------

    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        return await self.post("/v1/topics", req, CreateTopicsResponse)

    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return await self.post("/v1/topics/delete", req, DeleteTopicsResponse)

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        return await self.post("/v1/partitions/create", req, CreatePartitionsResponse)

    def set_on_update(self, on_update: Callable[[MetadataUpdate], Awaitable[None]]) -> None:
        """Where metadata updates go (set before `start`)."""
        self._on_update = on_update

    async def alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse:
        return await self.post("/v1/partitions/alter", req, AlterPartitionResponse)

    async def allocate_producer_ids(self) -> AllocateProducerIdsResponse:
        req = AllocateProducerIdsRequest(self.broker_id, max(0, self.broker_epoch))
        return await self.post("/v1/producer-ids", req, AllocateProducerIdsResponse)


def _error(data: bytes, status: int) -> ErrorResponse:
    try:
        return msgspec.json.decode(data, type=ErrorResponse)
    except msgspec.DecodeError:
        text: Any = data[:200].decode("utf-8", "replace")
        return ErrorResponse(Errors.INVALID_REQUEST, f"HTTP {status}: {text}")
