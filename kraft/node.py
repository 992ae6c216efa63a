"""ControllerNode: the asyncio shell around the quorum and the sans-I/O decisions.

Who decides: the active controller, i.e. the Raft leader whose barrier
(`ControllerEpochRecord` with its term as controller epoch) has committed. Raft
leadership alone is not enough: a new leader has not necessarily applied everything its
predecessor committed until an entry of its own term commits (Raft, section 5.4.2), and
a deposed leader may still think it leads for up to `leaderFallbackTimeout`. The barrier
fixes the first; the state machine refusing every batch whose controller epoch is older
than the newest committed barrier fixes the second.

How it decides: pipelined group commit (kraft/node_writes.py). The state machine's
compare-and-set re-checks everything at apply time, and refuses an entry decided after
one that did not apply, so a decision taken on a view that moved (e.g. a batch whose
outcome was unknown landed late) is taken again, never applied twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from typing import Any

from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors
from kraft.controller import QuorumController
from kraft.controller_config import ControllerNodeConfig
from kraft.liveness_probe import LivenessProbes
from kraft.node_status import node_metrics, node_status
from kraft.node_writes import GroupCommitWrites, Waiter
from kraft.pipeline import Pipeline
from kraft.quorum import Quorum, QuorumError
from kraft.service import ControllerApiError, NotActiveController
from kraft.state_machine import AppendResult, AppendStatus
from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    BrokerUnreachableRequest,
    BrokerUnreachableResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    QuorumStatus,
)
from metadata_log.image import MetadataImage
from metadata_log.records import ControllerEpochRecord, NoOpRecord, Record

log = logging.getLogger("kraft.node")


class ControllerNode(GroupCommitWrites):
    """Implements kraft.service.ControllerService."""

    def __init__(
        self,
        config: ControllerNodeConfig,
        quorum: Quorum,
        controller: QuorumController | None = None,
        *,
        tick_interval_s: float = 0.25,
        noop_interval_s: float = 5.0,
        write_timeout_s: float = 5.0,
        clock: Clock = SYSTEM_CLOCK,
        max_inflight: int | None = None,
    ) -> None:
        self.config = config
        self.node_id = config.node_id
        self.quorum = quorum
        # Topic and ACL ids are the random things the controller hands out: drawn here, in
        # the shell, so the decisions stay deterministic for given generators.
        self.controller = controller or QuorumController(
            config.controller_config(),
            new_topic_id=lambda: str(uuid.uuid4()),
            new_acl_id=lambda: str(uuid.uuid4()),
        )
        self.tick_interval_s = tick_interval_s
        self.noop_interval_s = noop_interval_s
        self.write_timeout_s = write_timeout_s
        # Session deadlines live only in the active controller's memory: the clock's
        # monotonic milliseconds, never wall time.
        self.clock = clock
        self._active_epoch: int | None = None  # term whose barrier committed, while leader
        # One proposal (decide + start the append) at a time; ticks and the barrier hold
        # it while nothing is in flight.
        self._lock = asyncio.Lock()
        self._queue: list[Waiter] = []  # writes waiting for the next group
        if max_inflight is None:  # test doubles of the config may leave it out
            max_inflight = getattr(config, "max_inflight_entries", 1)
        self._pipeline: Pipeline[Waiter] = Pipeline(max_inflight)
        self._settled = asyncio.Event()  # an in-flight entry settled
        self._settling: set[asyncio.Task[None]] = set()
        self._drainer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._last_append_ms = 0
        self._probes = LivenessProbes(self._confirm_dead)
        self.activations = 0

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self.quorum.add_state_listener(self._on_role_change)
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.node_id}")

    async def stop(self) -> None:
        self._deactivate("stopping")
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _on_role_change(self) -> None:
        if not self.quorum.is_leader:
            self._deactivate("left the Raft leader role")
        self._wake.set()

    def _deactivate(self, why: str) -> None:
        if self._active_epoch is not None:
            log.info(
                "controller inactive node=%d epoch=%d reason=%r",
                self.node_id,
                self._active_epoch,
                why,
            )
            self._active_epoch = None

    @property
    def active(self) -> bool:
        """Checked on every decision, not only on notifications: pysyncobj's role is read
        directly, so a node stops deciding the moment it leaves the leader state."""
        epoch = self._active_epoch
        return epoch is not None and self.quorum.is_leader and self.quorum.term == epoch

    async def _run(self) -> None:
        while True:
            await self._wake_or_tick()
            self._wake.clear()
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad step must not end the loop that keeps us active
                log.exception("controller step failed node=%d", self.node_id)

    async def _wake_or_tick(self) -> None:
        """Until a role change wakes us or a tick interval passes on the clock."""
        if self._wake.is_set():
            return
        tick = asyncio.ensure_future(self.clock.sleep(self.tick_interval_s))
        wake = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait((tick, wake), return_when=asyncio.FIRST_COMPLETED)
        finally:
            tick.cancel()
            wake.cancel()

    async def _step(self) -> None:
        if self._active_epoch is not None and not self.active:
            self._deactivate("Raft term or role changed")
        if not self.quorum.is_leader:
            return
        if self._active_epoch is None:
            await self._claim()
            return
        async with self._lock:
            await self._wait_idle()  # ticks decide on the committed image
            epoch = self._active_epoch
            if epoch is None or not self.active:
                return
            now = self.clock.monotonic_ms()
            records = self.controller.tick(self.quorum.image(), now)
            if not records and now - self._last_append_ms >= self.noop_interval_s * 1000:
                # Lets brokers tell a live log from a stale one.
                records = [NoOpRecord()]
            if records:
                # Timed out: the next tick decides again. Fenced: _handle_stale deactivated us.
                with contextlib.suppress(TimeoutError, NotActiveController):
                    self._handle_stale(await self._append(epoch, records))

    async def _claim(self) -> None:
        """Commit the barrier of this term; only then act."""
        term = self.quorum.term
        async with self._lock:
            await self._wait_idle()
            image = self.quorum.image()
            if not (image.controller_epoch == term and image.controller_id == self.node_id):
                try:
                    result = await self.quorum.append(
                        term,
                        [ControllerEpochRecord(controller_epoch=term, controller_id=self.node_id)],
                        timeout_s=self.write_timeout_s,
                    )
                except QuorumError as exc:
                    log.info("barrier not committed node=%d term=%d: %s", self.node_id, term, exc)
                    return
                if result.status != AppendStatus.OK:
                    log.info(
                        "barrier refused node=%d term=%d: %s", self.node_id, term, result.error
                    )
                    return
            if not (self.quorum.is_leader and self.quorum.term == term):
                return  # lost the role while committing; whoever leads now claims
            self._active_epoch = term
            self._last_append_ms = self.clock.monotonic_ms()
            self.controller.activate(self.quorum.image(), self._last_append_ms)
            self.activations += 1
            log.info(
                "controller active node=%d epoch=%d metadata_offset=%d",
                self.node_id,
                term,
                self.quorum.next_offset,
            )

    # -- writes --------------------------------------------------------------------------------

    def _leader_http(self) -> str | None:
        leader = self.quorum.leader_id
        if leader < 0 or leader == self.node_id:
            return None  # unknown, or us before our barrier committed: retry shortly
        return self.config.http_address(leader)

    def _require_active(self) -> int:
        epoch = self._active_epoch
        if epoch is None or not self.active:
            raise NotActiveController(self._leader_http())
        return epoch

    async def _append(
        self, epoch: int, records: list[Record], seq: int | None = None, after: int | None = None
    ) -> AppendResult:
        pipelined = {} if seq is None else {"seq": seq, "after": after}
        try:
            result = await self.quorum.append(
                epoch, records, timeout_s=self.write_timeout_s, **pipelined
            )
        except QuorumError as exc:
            # Outcome unknown: the API answers 503 and the client retries.
            raise TimeoutError(str(exc)) from exc
        self._last_append_ms = self.clock.monotonic_ms()
        return result

    def _handle_stale(self, result: AppendResult) -> None:
        if result.status == AppendStatus.STALE_CONTROLLER_EPOCH:
            self._deactivate(f"fenced: {result.error}")
            raise NotActiveController(self._leader_http())

    async def _call(self, request: Any) -> Any:
        response, _ = await self._write(request)
        return response

    async def register_broker(self, req: BrokerRegistrationRequest) -> BrokerRegistrationResponse:
        return await self._call(req)

    async def heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse:
        return await self._call(req)

    async def broker_unreachable(self, req: BrokerUnreachableRequest) -> BrokerUnreachableResponse:
        was = self.controller.cluster.is_suspected(req.broker_id)
        resp: BrokerUnreachableResponse = await self._call(req)
        if not was and self.controller.cluster.is_suspected(req.broker_id):
            # Why a broker may be fenced before its session ends: worth a line.
            log.info(
                "broker %d suspected dead (%s, reported by %s); fenced unless it heartbeats "
                "by %d ms",
                req.broker_id,
                req.reason,
                "the controller" if req.reporter_id < 0 else f"broker {req.reporter_id}",
                self.controller.cluster.session_deadline(req.broker_id),
            )
        if self.controller.cluster.is_suspected(req.broker_id):
            reg = self.quorum.image().brokers.get(req.broker_id)
            if reg is not None:
                # Confirm the sign ourselves: nothing listening anywhere fences it now.
                self._probes.start(reg)
        return resp

    async def _confirm_dead(self, broker_id: int, broker_epoch: int) -> None:
        """Every listener of the suspected incarnation refused our connection."""
        async with self._lock:
            if not self.active:
                return
            image = self.quorum.image()
            if self.controller.cluster.confirmed_dead(image, broker_id, broker_epoch):
                log.info(
                    "broker %d confirmed dead: its listeners refuse connections; fencing it now",
                    broker_id,
                )
                self._wake.set()  # the next step's tick fences it

    async def alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse:
        return await self._call(req)

    async def alter_partitions(self, req: AlterPartitionsRequest) -> AlterPartitionsResponse:
        return await self._call(req)

    async def allocate_producer_ids(
        self, req: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse:
        return await self._call(req)

    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        return await self._call(req)

    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return await self._call(req)

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        return await self._call(req)

    async def elect_leaders(self, req: ElectLeadersRequest) -> ElectLeadersResponse:
        return await self._call(req)

    async def alter_partition_reassignments(
        self, req: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        return await self._call(req)

    async def list_partition_reassignments(
        self, req: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse:
        # A read, but answered by the active controller (as Kafka's): its image is the
        # newest committed one.
        return await self._call(req)

    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> None:
        # A refusal is raised by the configuration manager as ControllerApiError (this
        # response has no error field); a batch that did not apply is refused here.
        _, result = await self._write(req)
        if result is not None and result.status != AppendStatus.OK:
            raise ControllerApiError(Errors.INVALID_REQUEST, result.error or "not applied")

    async def create_acls(self, req: CreateAclsRequest) -> CreateAclsResponse:
        return await self._call(req)

    async def delete_acls(self, req: DeleteAclsRequest) -> DeleteAclsResponse:
        return await self._call(req)

    async def alter_user_scram_credentials(
        self, req: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        return await self._call(req)

    # -- reads (any node: committed state) -----------------------------------------------------

    def image(self) -> MetadataImage:
        return self.quorum.image()

    def records_from(self, offset: int, max_records: int) -> list[tuple[int, bytes]] | None:
        return self.quorum.records_from(offset, max_records)

    def snapshot(self) -> tuple[MetadataImage, int]:
        return self.quorum.snapshot()

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        return await self.quorum.wait_for_offset(offset, timeout_s)

    def status(self) -> QuorumStatus:
        return node_status(self.quorum, self.config, self.active)

    def metrics(self) -> dict[str, float]:
        return node_metrics(self.quorum, self.active, self.activations)
