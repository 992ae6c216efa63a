"""The partitions hosted on this broker: metadata deltas in, produce and fetch served.

Metadata updates are applied by the `ReplicaChangesMixin` half (broker/replica_changes.py:
file work in a thread, roles installed on the loop, configs); this half serves the data.

The data path (produce, fetch, wait_for_data, list offsets) runs on the loop: appends
and reads are short file calls. acks=all produces and long-poll fetches wait on
futures that appends and HW moves complete: nothing polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable

from broker.alter_partition import AlterPartitionManager
from broker.change_feed import ChangeFeed
from broker.config import BrokerConfig
from broker.dynamic_config import DynamicBrokerConfig
from broker.fetch_session import DEFAULT_CACHE_SLOTS, FetchSessionCache
from broker.fetcher import FetcherManager, FollowerData, FollowerFetchState
from broker.hosted import HostedPartition, finish
from broker.partition import AlterIsr
from broker.record_deletion import LogStartCheckpointer
from broker.replica_changes import ReplicaChangesMixin
from broker.replica_core import fetch_epoch_error
from broker.replication_quota import ReplicationQuota
from broker.results import FetchPartition, FetchResult, ListOffsetResult, ProduceResult
from broker.stray_guard import StrayGuard
from broker.txn_verify import Verifier, verify_first_append
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors
from metadata_log.image import MetadataImage
from storage.log_manager import LogManager
from storage.log_types import FetchDataInfo, OffsetOutOfRangeError
from storage.record_batch import CheckedBatch

log = logging.getLogger("broker.replica_manager")

TP = tuple[str, int]


class ReplicaManager(ReplicaChangesMixin):
    def __init__(
        self,
        config: BrokerConfig,
        log_manager: LogManager,
        *,
        fetchers: FetcherManager | None = None,
        alter_partitions: AlterPartitionManager | None = None,
        clock: Clock = SYSTEM_CLOCK,
        dynamic: DynamicBrokerConfig | None = None,
    ) -> None:
        self.config = config
        self.broker_id = config.node_id
        # The broker's configs now (static + dynamic): log defaults, min.insync.replicas.
        self.dynamic = dynamic or DynamicBrokerConfig(
            config.node_id, config.properties, config.log_config
        )
        self.log_manager = log_manager
        self.fetchers = fetchers
        # None (unit tests without a controller): the ISR stays as the metadata says.
        self.alter_partitions = alter_partitions
        self._clock_ms = clock.monotonic_ms
        self._image = MetadataImage()
        self._partitions: dict[TP, HostedPartition] = {}
        self._file_work: asyncio.Future[int] | None = None  # a metadata update's file step
        self._checkpointed_hw = log_manager.read_high_watermarks()
        self.stray_guard = StrayGuard(log_manager.log_dirs)
        # DeleteRecords (leaders) and fetch answers (followers) move log start offsets.
        self.log_start_checkpointer = LogStartCheckpointer(log_manager)
        # Replicas being added by a reassignment fetch at most this fast (the fetchers
        # read it: ReplicaTarget.follower_quota).
        self.follower_quota = ReplicationQuota(
            self._follower_throttle(self._image),
            window_ms=config.replication_quota_window_size_s * 1000,
            windows=config.replication_quota_window_num,
        )
        # Called (topic, partition, producer id, committed) after a marker is appended
        # on a leader (the group coordinator completes pending TxnOffsetCommits on it).
        self.marker_listeners: list[Callable[[str, int, int, bool], None]] = []
        # KIP-890 part 1: asks the transaction coordinator whether (transactional id,
        # producer id, epoch) has added (topic, partition) to its transaction; 0 = yes.
        # None: no verification (transactional batches are taken as they come).
        self.verifier: Verifier | None = None
        # Partitions whose wake-ups fetch sessions have not seen (broker/change_feed.py).
        self.change_feed = ChangeFeed()
        # KIP-227: incremental fetch sessions of clients and followers (broker/fetch_session.py).
        slots = config.properties.get("max.incremental.fetch.session.cache.slots")
        self.fetch_sessions = FetchSessionCache(
            int(slots) if slots is not None else DEFAULT_CACHE_SLOTS
        )

    def now_ms(self) -> int:
        return self._clock_ms()

    # -- reads of the state ------------------------------------------------------------------

    def image(self) -> MetadataImage:
        return self._image

    def partition(self, topic: str, partition: int) -> HostedPartition | None:
        return self._partitions.get((topic, partition))

    @property
    def partitions(self) -> dict[TP, HostedPartition]:
        return dict(self._partitions)

    def high_watermark(self, tp: TP) -> int | None:
        h = self._partitions.get(tp)
        return None if h is None else h.core.high_watermark

    def high_watermarks(self) -> dict[TP, int]:
        return {tp: h.core.high_watermark for tp, h in self._partitions.items()}

    # -- wake-ups and completions --------------------------------------------------------------

    def _lookup_error(self, topic: str, partition: int) -> int:
        t = self._image.topic_by_name(topic)
        if t is None or partition not in t.partitions:
            return Errors.UNKNOWN_TOPIC_OR_PARTITION
        return Errors.NOT_LEADER_OR_FOLLOWER

    def leader_partition(self, topic: str, partition: int) -> HostedPartition | int:
        """The partition if we lead it, else the error to answer (NOT_LEADER_OR_FOLLOWER,
        UNKNOWN_TOPIC_OR_PARTITION)."""
        return self._leader(topic, partition, -1)

    def _leader(
        self, topic: str, partition: int, current_leader_epoch: int
    ) -> HostedPartition | int:
        """The partition if we lead it (and the client's epoch matches), else an error."""
        h = self._partitions.get((topic, partition))
        if h is None or h.transitioning:
            return self._lookup_error(topic, partition)
        code = fetch_epoch_error(h, current_leader_epoch)
        return h if code == Errors.NONE else code

    def _min_isr(self, topic: str, image: MetadataImage | None = None) -> int:
        raw = (image or self._image).topic_config(topic).get("min.insync.replicas")
        try:
            return int(raw) if raw is not None else self.dynamic.min_insync_replicas
        except ValueError:
            return self.dynamic.min_insync_replicas

    # -- produce ---------------------------------------------------------------------------------

    async def produce(
        self,
        topic: str,
        partition: int,
        batches: list[CheckedBatch],
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> ProduceResult:
        """Append as leader. The caller checked the request at the edge: `batches` are
        `validate_records`' answer (header parsed, CRC checked, once) and `acks` is one
        of 0, 1, -1. acks=0/1 answer after the local append; acks=-1 when the HW passes
        the batch (or NOT_ENOUGH_REPLICAS / REQUEST_TIMED_OUT). Idempotent producers:
        duplicates get their original offsets; gaps OUT_OF_ORDER_SEQUENCE_NUMBER.
        Transactional batches that open a transaction here are verified first with the
        coordinator when a `verifier` is set (KIP-890 part 1)."""
        await self._transition_end((topic, partition), timeout_ms)
        h = self._leader(topic, partition, -1)
        if isinstance(h, int):
            return ProduceResult(h)
        guard = None
        verify = self.verifier is not None
        if verify:
            assert self.verifier is not None
            checked = await verify_first_append(
                self.verifier, h, topic, partition, batches[0], transactional_id
            )
            if isinstance(checked, ProduceResult):
                return checked
            if checked is not None:  # it awaited the coordinator: is it still ours?
                guard = checked
                h = self._leader(topic, partition, -1)
                if isinstance(h, int):
                    return ProduceResult(h)
        return await self._wait_append(h, topic, acks, timeout_ms, batches, guard, verify)

    async def _transition_end(self, tp: TP, timeout_ms: int) -> None:
        """Wait, at most `timeout_ms`, while a metadata update changes the partition's
        role or leader epoch. Kafka's produce waits the same way (on the partition's
        leaderIsrUpdateLock while the broker makes it leader). Answering
        NOT_LEADER_OR_FOLLOWER meanwhile is not harmless: the connection's next request
        then reaches the new leader with a sequence gap (OUT_OF_ORDER_SEQUENCE_NUMBER),
        on which librdkafka bumps the producer epoch and re-sends messages whose first
        attempt may be in a log (duplicates; confluentinc/librdkafka#4953)."""
        h = self._partitions.get(tp)
        if h is None or not h.transitioning:
            return
        deadline = self._clock_ms() + max(0, timeout_ms)
        loop = asyncio.get_running_loop()
        # The update wakes the partition's waiters when the transition starts and ends
        # (and when it deletes the partition); appends and HW moves wake them too.
        while self._partitions.get(tp) is h and h.transitioning:
            left = deadline - self._clock_ms()
            if left <= 0:
                return
            fut: asyncio.Future[None] = loop.create_future()
            h.waiters.add(fut)
            try:
                await asyncio.wait_for(fut, left / 1000)
            except TimeoutError:
                return
            finally:
                h.waiters.discard(fut)

    async def _wait_append(
        self,
        h: HostedPartition,
        topic: str,
        acks: int,
        timeout_ms: int,
        batches: list[CheckedBatch],
        guard: object,
        verify: bool,
    ) -> ProduceResult:
        min_isr = self._min_isr(topic)
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        result, required = h.produce(batches, acks, min_isr, fut, guard, verify)  # type: ignore[arg-type]
        return await self._await_hw(h, result, required, fut, min_isr, timeout_ms)

    async def _await_hw(
        self,
        h: HostedPartition,
        result: ProduceResult,
        required: int | None,
        fut: asyncio.Future[int],
        min_isr: int,
        timeout_ms: int,
    ) -> ProduceResult:
        if required is None:
            return result
        try:
            code = await asyncio.wait_for(fut, max(0, timeout_ms) / 1000)
        except TimeoutError:
            h.core.remove_pending(fut)
            return ProduceResult(
                h.core.timeout_code(min_isr, Errors.REQUEST_TIMED_OUT),
                error_message=f"the HW did not reach {required} within {timeout_ms} ms "
                f"(ISR {list(h.core.maximal_isr)}, min.insync.replicas={min_isr})",
            )
        return result if code == Errors.NONE else ProduceResult(code)

    # -- transaction markers ----------------------------------------------------------------------

    async def write_txn_marker(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        timeout_ms: int,
    ) -> int:
        """Append a COMMIT or ABORT marker as leader and wait for the HW to pass it
        (acks=all, as Kafka's WriteTxnMarkers). Returns the error code; the marker
        listeners hear of it once it is replicated (Kafka calls the group coordinator's
        onTransactionCompleted from the append's callback)."""
        h = self._leader(topic, partition, -1)
        if isinstance(h, int):
            return h
        min_isr = self._min_isr(topic)
        if len(h.core.isr) < min_isr:  # acks=all's check before appending, as for produces
            return Errors.NOT_ENOUGH_REPLICAS
        result, last_offset = h.append_marker(
            producer_id, producer_epoch, commit, coordinator_epoch
        )
        if result.error_code:
            return result.error_code
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        result, required = h.acks_wait(result, last_offset, -1, min_isr, fut)
        done = await self._await_hw(h, result, required, fut, min_isr, timeout_ms)
        if done.error_code == Errors.NONE:
            # As Kafka's onTransactionCompleted: once the marker is replicated.
            for listener in list(self.marker_listeners):
                try:
                    listener(topic, partition, producer_id, commit)
                except Exception:  # a listener's bug must not fail the marker
                    log.exception("marker listener failed for %s-%d", topic, partition)
        return done.error_code

    # -- fetch -----------------------------------------------------------------------------------

    def fetch(
        self,
        p: FetchPartition,
        replica_id: int,
        isolation_level: int,
        found: FetchDataInfo | None = None,
        prev_fetch_ms: int = -1,
    ) -> FetchResult:
        """Read from the log: consumers up to the HW, followers (replica_id >= 0) up to
        the LEO, recording the follower's fetch offset for ISR/HW. `found`: this very
        read as `wait_for_data` just made it (nothing ran since), used instead of
        reading again. `prev_fetch_ms`: see `Partition.on_follower_fetch`."""
        h = self._leader(p.topic, p.partition, p.current_leader_epoch)
        if isinstance(h, int):
            return FetchResult(h)
        core, lg = h.core, h.log
        if replica_id >= 0:
            result, expand = h.serve_follower_fetch(
                replica_id,
                p.fetch_offset,
                p.last_fetched_epoch,
                p.max_bytes,
                self._clock_ms(),
                self._image.usable_broker_epoch(replica_id) if self.alter_partitions else None,
                p.replica_epoch,
                found,
                p.log_start_offset,
                prev_fetch_ms,
            )
            if expand is not None:
                self._propose_isr(h, expand, "expanding")
            return result
        hw = core.high_watermark
        lso = h.last_stable_offset
        try:
            if found is None:
                data = h.read_for_consumer(p.fetch_offset, p.max_bytes, isolation_level)
            else:
                data = found
        except OffsetOutOfRangeError:
            return FetchResult(Errors.OFFSET_OUT_OF_RANGE, hw, lso, lg.log_start_offset)
        aborted = None
        if isolation_level == 1:
            aborted = tuple(h.aborted_txns(p.fetch_offset, data, lso))
        return FetchResult(Errors.NONE, hw, lso, lg.log_start_offset, data.records,
                           aborted=aborted)  # fmt: skip

    async def wait_for_data(
        self,
        partitions: list[FetchPartition],
        min_bytes: int,
        max_wait_ms: int,
        replica_id: int = -1,
        isolation_level: int = 0,
    ) -> dict[FetchPartition, FetchDataInfo]:
        """Return once `min_bytes` could be read (consumers up to the HW, followers up to
        the LEO), a partition has news to report (an error), or `max_wait_ms` passed.

        Returns the reads it made on its last look, each exactly what `fetch` would read
        for that partition now: the caller hands them to `fetch` (`found`) instead of
        reading the log again. Partitions it did not read (an error to report) are
        missing."""
        loop = asyncio.get_running_loop()
        deadline_ms = self._clock_ms() + max(0, max_wait_ms)
        follower = replica_id >= 0
        while True:
            hosted: list[HostedPartition] = []
            found: dict[FetchPartition, FetchDataInfo] = {}
            available = 0
            for p in partitions:
                h = self._leader(p.topic, p.partition, p.current_leader_epoch)
                if isinstance(h, int):
                    return found  # an error to report at once
                lg = h.log
                if not lg.log_start_offset <= p.fetch_offset <= lg.log_end_offset:
                    return found
                if follower and h.diverging(p.fetch_offset, p.last_fetched_epoch):
                    return found
                hosted.append(h)
                bound = lg.log_end_offset if follower else h.consumer_bound(isolation_level)
                if p.fetch_offset >= bound:
                    continue  # nothing to read yet (the fetch reads it when answering)
                if follower:
                    data = h.read_for_follower(p.fetch_offset, p.max_bytes)
                else:
                    data = h.read_for_consumer(p.fetch_offset, p.max_bytes, isolation_level)
                found[p] = data
                if p.max_bytes > 0:  # a read of 0 bytes still gets a batch, but waits on
                    available += data.size
            remaining = (deadline_ms - self._clock_ms()) / 1000
            if available >= min_bytes or remaining <= 0 or not hosted:
                return found
            fut: asyncio.Future[None] = loop.create_future()
            for h in hosted:
                h.waiters.add(fut)
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                pass  # one last look, which is what the fetch answers with
            finally:
                for h in hosted:
                    h.waiters.discard(fut)

    # -- ISR changes (AlterPartition) ---------------------------------------------------------

    def _hosts(self, h: HostedPartition) -> bool:
        return self._partitions.get(h.tp) is h

    def _propose_isr(self, h: HostedPartition, alter: AlterIsr, what: str) -> None:
        assert self.alter_partitions is not None
        self.alter_partitions.propose(h, alter, what, lambda: self._hosts(h))

    def shrink_isrs(self) -> int:
        """Propose dropping lagging followers from the ISRs we lead (and send again the
        changes whose outcome is unknown); how many proposals."""
        if self.alter_partitions is None:
            return 0
        return self.alter_partitions.check_isrs(
            list(self._partitions.values()),
            self._clock_ms(),
            self.config.replica_lag_time_max_ms,
            self._hosts,
        )

    async def run_isr_expiration(self, stop: asyncio.Event) -> None:
        """Kafka's isr-expiration task: a shrink check every replica.lag.time.max.ms / 2."""
        interval = self.config.replica_lag_time_max_ms / 2000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            self.shrink_isrs()

    # -- offsets ---------------------------------------------------------------------------------

    def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int = 0,
    ) -> ListOffsetResult:
        h = self._leader(topic, partition, current_leader_epoch)
        if isinstance(h, int):
            return ListOffsetResult(h)
        return h.list_offset(timestamp, isolation_level)

    def offset_for_leader_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int
    ) -> tuple[int, int, int]:
        h = self._leader(topic, partition, current_leader_epoch)
        if isinstance(h, int):
            return h, -1, -1
        epoch, end = h.log.leader_epoch_cache.end_offset_for(leader_epoch, h.log.log_end_offset)
        return Errors.NONE, epoch, end

    # -- the follower side (called by the fetchers) ------------------------------------------------

    def follower_fetch_state(self, tp: TP) -> FollowerFetchState | None:
        h = self._partitions.get(tp)
        if h is None or h.transitioning or h.core.is_leader:
            return None
        state = h.fetch_state()
        reg = self._image.partition(h.core.topic_id, tp[1])
        if reg is not None and self.broker_id in reg.adding_replicas:
            # A replica a reassignment is adding: follower.replication.throttled.rate.
            state = dataclasses.replace(state, throttled=True)
        return state

    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        b = self._image.brokers.get(broker_id)
        if b is None:
            return None
        ep = b.endpoint(self.config.inter_broker_listener_name) or b.endpoint()
        return None if ep is None else (ep.host, ep.port)

    async def process_follower_data(
        self, tp: TP, sent: FollowerFetchState, data: FollowerData
    ) -> int:
        h = self._partitions.get(tp)
        if h is None or h.transitioning or h.core.is_leader:
            return Errors.NONE
        start = h.log.log_start_offset
        code = await h.apply_leader_answer(sent, data)
        if h.log.log_start_offset != start:  # the leader's DeleteRecords reached us
            self.log_start_checkpointer.request()
        return code

    # -- shutdown --------------------------------------------------------------------------------

    async def checkpoint_high_watermarks(self) -> None:
        await asyncio.to_thread(self.log_manager.write_high_watermarks, self.high_watermarks())

    async def run_checkpoints(self, stop: asyncio.Event) -> None:
        """Write `replication-offset-checkpoint` every interval until `stop`."""
        interval = self.config.hw_checkpoint_interval_ms / 1000
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), interval)
            try:
                await self.checkpoint_high_watermarks()
            except OSError as exc:
                log.error("HW checkpoint failed: %r", exc)

    async def wait_file_work(self) -> None:
        """Wait for a metadata update's file work still running in its thread (it may
        be creating logs: the log manager must not close them underneath it)."""
        work = self._file_work
        if work is not None and not work.done():
            with contextlib.suppress(Exception):
                await work

    def snapshot_producer_states(self) -> None:
        """Clean shutdown: a producer snapshot at each log's end, so a restart restores
        producer state without reading the log (run in a thread, before logs close).
        Each is fsynced: with 10,000 partitions they overlap on FILE_WORKERS threads."""
        self._run_file_jobs([lambda h=h: h.snapshot() or True for h in self._partitions.values()])

    def shutdown(self) -> None:
        """Fail what waits (the listener is closed by now)."""
        for h in self._partitions.values():
            finish(h.core.drain_pending(), Errors.NOT_LEADER_OR_FOLLOWER)
            h.wake()
