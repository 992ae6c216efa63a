"""A partition hosted on this broker: its sans-I/O replication core, its log, its
producer state, and the futures of fetches waiting for it. Its follower side (what a
leader's fetch answer does to our log and HW) is the mixin in broker/hosted_follower.py.

Transactions (KIP-98): the last stable offset is min(first unstable offset, HW) on a
leader and on a follower alike (each from its own producer state and HW); read_committed
fetches read up to it and get the aborted transactions of what they read from the
log's transaction index. Markers a leader writes and markers a follower copies both
close transactions and index the aborted ones. Producer state is snapshotted at each
segment roll and at a clean shutdown, and restored from the newest snapshot plus the
batches after it (or rebuilt from the whole log, with its transaction index, when the
index or the snapshot is unusable).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.change_feed import ChangeFeed
from broker.hosted_follower import FollowerSideMixin
from broker.partition import AlterIsr, Partition
from broker.producer_recovery import aborted_entry, log_headers, reload_producers, take_snapshot
from broker.producer_state import (
    BatchHeader,
    CompletedTxn,
    ProducerStateError,
    ProducerStateManager,
    VerificationGuard,
)
from broker.results import FetchResult, ListOffsetResult, ProduceResult, RecordError
from common.errors import Errors
from metadata_log.image import PartitionRegistration
from storage.control_batch import ABORT, COMMIT, build_marker_batch
from storage.epoch_cache import UNDEFINED_EPOCH
from storage.log import Log
from storage.log_types import FetchDataInfo, OffsetOutOfRangeError
from storage.record_batch import (
    CheckedBatch,
    RecordBatchError,
    validate_records,
)
from storage.records import decode_batch
from storage.txn_index import AbortedTxn

__all__ = ["log_headers"]  # the replication model's harness reads logs with it

log = logging.getLogger("broker.replica_manager")

# ListOffsets' special timestamps. No tiered storage here: the local log start is the
# log start (-4, KIP-405), and nothing is tiered (-5, KIP-1005: offset -1, as Kafka
# answers with remote storage off).
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5


def start_leader_epoch(lg: Log, leader_epoch: int) -> None:
    """The file step of a new leadership: our epoch starts at our LEO, and followers'
    divergence checks need it before our first append in it."""
    if leader_epoch > lg.leader_epoch_cache.latest_epoch:
        lg.leader_epoch_cache.assign(leader_epoch, lg.log_end_offset)


def check_keys(batches: list[CheckedBatch], name: str) -> ProduceResult | None:
    """Kafka's LogValidator.validateKey for a compacted topic: every record needs a key,
    else INVALID_RECORD with a record error per keyless record (its index in the batch)
    and processRecordErrors' message. Decodes the records (decompressing): only
    compacted topics pay it, as in Kafka."""
    errors: list[RecordError] = []
    for b in batches:
        if b.is_control:
            continue
        for i, rec in enumerate(decode_batch(b).records):
            if rec.key is None:
                why = f"Compacted topic cannot accept message without key in topic partition {name}"
                errors.append(RecordError(i, why))
    if not errors:
        return None
    shown = ", ".join(f"RecordError(batchIndex={e.batch_index}, message='{e.message}')"
                      for e in errors[:3])  # fmt: skip
    message = (
        f"One or more records have been rejected due to {len(errors)} record errors in "
        f"total, and only showing the first three errors at most: [{shown}]"
    )
    return ProduceResult(Errors.INVALID_RECORD, error_message=message, record_errors=tuple(errors))


def wake(waiters: set[asyncio.Future[None]]) -> None:
    for fut in waiters:
        if not fut.done():
            fut.set_result(None)
    waiters.clear()


def finish(tokens: list[asyncio.Future[int]], code: int) -> None:
    """Complete pending acks=all produces with an error code (0: done)."""
    for fut in tokens:
        if not fut.done():
            fut.set_result(code)


def finish_acks(done: list[tuple[asyncio.Future[int], int]]) -> None:
    """Complete pending acks=all produces, each with its own code."""
    for fut, code in done:
        if not fut.done():
            fut.set_result(code)


@dataclass(eq=False)
class HostedPartition(FollowerSideMixin):
    core: Partition[asyncio.Future[int]]
    log: Log
    producers: ProducerStateManager
    waiters: set[asyncio.Future[None]] = field(default_factory=set)
    # Its role is changing (files being prepared): produces wait for the change to end
    # (ReplicaManager._transition_end), other requests get NOT_LEADER_OR_FOLLOWER.
    transitioning: bool = False
    # Idempotent producers whose last batch here could not be written (a full disk):
    # until one of theirs is written, a sequence gap is that batch, not a client bug.
    unwritten_producers: set[int] = field(default_factory=set)
    # The replica manager's change feed: every wake is marked there too (fetch sessions
    # read only the partitions marked since their last fetch).
    feed: ChangeFeed | None = None

    @property
    def tp(self) -> tuple[str, int]:
        return self.core.topic, self.core.partition

    @property
    def name(self) -> str:
        return f"{self.core.topic}-{self.core.partition}"

    def __post_init__(self) -> None:
        # The log cleaner (a thread) must not clean past the LSO (Kafka's
        # firstUncleanableDirtyOffset): transactions there are not decided yet.
        self.log.first_unstable_offset_fn = self._cleaner_bound
        # ... nor remove the batch (or marker) producer state is rebuilt from.
        self.log.active_producers_fn = self.producers.last_records

    def _cleaner_bound(self) -> int:
        hw = self.core.high_watermark
        first = self.producers.peek_first_unstable_offset(hw)
        return hw if first is None else min(first, hw)

    def wake(self) -> None:
        wake(self.waiters)
        if self.feed is not None:
            self.feed.mark((self.core.topic, self.core.partition))

    # -- roles --------------------------------------------------------------------------------

    def install(self, reg: PartitionRegistration, now_ms: int) -> bool:
        """Take the role `reg` gives this broker (after `start_leader_epoch` when it
        leads). Returns whether we start leading a new epoch. Pending produces that
        complete or can no longer complete here are finished."""
        core, leo = self.core, self.log.log_end_offset
        new_epoch = False
        if reg.leader == core.local_id:
            new_epoch, done = core.make_leader(
                reg.replicas, reg.isr, reg.leader_epoch, reg.partition_epoch, leo, now_ms
            )
            finish_acks(done)
        else:
            failed = core.make_follower(
                reg.replicas, reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch, leo
            )
            finish(failed, Errors.NOT_LEADER_OR_FOLLOWER)
        return new_epoch

    # -- leader side --------------------------------------------------------------------------

    def produce(
        self,
        batches: list[CheckedBatch],
        acks: int,
        min_isr: int,
        token: asyncio.Future[int],
        guard: VerificationGuard | None = None,
        verify: bool = False,
    ) -> tuple[ProduceResult, int | None]:
        """A produce on the leader (`batches` checked at the edge, `acks` one of 0, 1,
        -1): `min.insync.replicas` for acks=all (NOT_ENOUGH_REPLICAS before appending),
        the append, then for acks=all the wait for the HW. Returns the result and, when
        it must wait, the offset the HW must reach (`token` completes then, with its
        code); None: answer now."""
        if acks == -1 and len(self.core.isr) < min_isr:
            return ProduceResult(
                Errors.NOT_ENOUGH_REPLICAS,
                error_message=f"ISR {list(self.core.isr)} is smaller than "
                f"min.insync.replicas={min_isr}",
            ), None
        result, last_offset = self.append_as_leader(batches, guard, verify)
        return self.acks_wait(result, last_offset, acks, min_isr, token)

    def acks_wait(
        self,
        result: ProduceResult,
        last_offset: int,
        acks: int,
        min_isr: int,
        token: asyncio.Future[int],
    ) -> tuple[ProduceResult, int | None]:
        """After an append: the offset the HW must reach before answering (acks=all),
        or None to answer `result` now."""
        if result.error_code != Errors.NONE or acks != -1:
            return result, None
        code = self.core.add_pending(last_offset + 1, min_isr, token)
        if code is None:
            return result, last_offset + 1
        return (result if code == Errors.NONE else ProduceResult(code)), None

    def append_as_leader(
        self,
        batches: list[CheckedBatch],
        guard: VerificationGuard | None = None,
        verify: bool = False,
    ) -> tuple[ProduceResult, int]:
        """Check idempotence, append at our leader epoch, move the HW where the ISR
        allows. Returns the result and the last offset of the batches (a duplicate's
        original ones), for acks=all to wait on. The producer-state checks and the log
        use the header fields read when the batches were checked."""
        lg = self.log
        if lg.config.compact:
            try:
                refused = check_keys(batches, self.name)
            except RecordBatchError as exc:  # records that do not decode
                return ProduceResult(exc.error_code, error_message=str(exc)), -1
            if refused is not None:
                return refused, -1
        headers = [BatchHeader.of_fields(b.fields) for b in batches]
        try:
            dup = self.producers.check(headers, guard, verify)
        except ProducerStateError as exc:
            if exc.error_code == Errors.OUT_OF_ORDER_SEQUENCE_NUMBER and any(
                h.producer_id in self.unwritten_producers for h in headers
            ):
                # The gap is the batch the disk refused just before (the connection's next
                # in-flight request comes right after it). Kafka would have taken the log
                # dir offline and answer KAFKA_STORAGE_ERROR; so do we, and the client
                # retries both in order. OUT_OF_ORDER_SEQUENCE_NUMBER makes librdkafka
                # bump its epoch, re-sending possibly-written messages (duplicates).
                return ProduceResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(exc)), -1
            return ProduceResult(exc.error_code, error_message=str(exc)), -1
        if dup is not None:  # a retry of a batch we have: its original offsets
            result = ProduceResult(Errors.NONE, dup.first_offset, -1, lg.log_start_offset)
            return result, dup.last_offset
        try:
            info = lg.append_checked_as_leader(batches, self.core.leader_epoch)
        except RecordBatchError as exc:  # too large for max.message.bytes, segment.bytes
            return ProduceResult(exc.error_code, error_message=str(exc)), -1
        except OSError as exc:  # never UNKNOWN_SERVER_ERROR: clients retry it into duplicates
            log.error("append to %s failed: %r", self.name, exc)
            self.unwritten_producers.update(h.producer_id for h in headers if h.is_idempotent)
            return ProduceResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(exc)), -1
        if self.unwritten_producers:
            self.unwritten_producers.difference_update(h.producer_id for h in headers)
        self._index(self.producers.record(headers, info.first_offset))
        finish_acks(self.core.on_leader_append(lg.log_end_offset))
        self.wake()
        result = ProduceResult(
            Errors.NONE, info.first_offset, info.log_append_time_ms, info.log_start_offset
        )
        return result, info.last_offset

    def _index(self, completed: Iterable[CompletedTxn]) -> None:
        """Aborted transactions into the log's transaction index (read_committed
        readers skip their records)."""
        for txn in completed:
            if txn.aborted:
                self.log.add_aborted_txn(aborted_entry(txn))

    def append_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int | None = None,
    ) -> tuple[ProduceResult, int]:
        """Write a transaction marker as leader (the coordinator's WriteTxnMarkers):
        fenced by an older producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch
        (TRANSACTION_COORDINATOR_FENCED). Returns the result and the marker's offset
        (for the acks=all wait)."""
        try:
            self.producers.check_marker(producer_id, producer_epoch, coordinator_epoch)
        except ProducerStateError as exc:
            return ProduceResult(exc.error_code, error_message=str(exc)), -1
        lg = self.log
        control = COMMIT if commit else ABORT
        raw = build_marker_batch(
            producer_id,
            producer_epoch,
            control,
            coordinator_epoch,
            self.core.leader_epoch,
            int(time.time() * 1000) if now_ms is None else now_ms,
        )
        batches = validate_records(bytearray(raw))
        header = BatchHeader.of_fields(batches[0].fields)
        header = dataclasses.replace(header, marker=(control, coordinator_epoch))
        try:
            info = lg.append_checked_as_leader(batches, self.core.leader_epoch)
        except OSError as exc:
            log.error("marker append to %s failed: %r", self.name, exc)
            return ProduceResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(exc)), -1
        self._index(self.producers.record([header], info.first_offset))
        finish_acks(self.core.on_leader_append(lg.log_end_offset))
        self.wake()
        result = ProduceResult(Errors.NONE, info.first_offset, -1, info.log_start_offset)
        return result, info.last_offset

    @property
    def last_stable_offset(self) -> int:
        """min(first unstable offset, HW), never below the log start (Kafka's
        UnifiedLog.lastStableOffset). Followers keep it too, from their own state."""
        hw = self.core.high_watermark
        first = self.producers.first_unstable_offset(hw)
        if first is None:
            return hw
        return min(max(first, self.log.log_start_offset), hw)

    def diverging(self, fetch_offset: int, last_fetched_epoch: int) -> tuple[int, int] | None:
        """KIP-320: (epoch, end offset) when a follower's last fetched epoch ends here
        before its fetch offset (or is not ours): it must truncate. None: no divergence."""
        if last_fetched_epoch < 0:
            return None
        epoch, end = self.log.leader_epoch_cache.end_offset_for(
            last_fetched_epoch, self.log.log_end_offset
        )
        if epoch == UNDEFINED_EPOCH:
            return None
        if epoch < last_fetched_epoch or end < fetch_offset:
            return epoch, end
        return None

    def serve_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        last_fetched_epoch: int,
        max_bytes: int,
        now_ms: int,
        registered_epoch: int | None,
        broker_epoch: int = -1,
        found: FetchDataInfo | None = None,
        follower_log_start: int = -1,
        prev_fetch_ms: int = -1,
    ) -> tuple[FetchResult, AlterIsr | None]:
        """A follower's fetch, on the leader: the divergence check (KIP-320), then its
        position (HW, ISR lag), then our log up to the LEO. Also returns the ISR
        expansion to propose when this fetch made the follower eligible
        (`registered_epoch`: the follower's broker epoch in the metadata image, None
        when it is fenced or shutting down; `broker_epoch`: the one its fetch named,
        KIP-903, -1 for none). `found`: this very read, already made by a long-poll's
        wait (`read_for_follower`), so the log is not read twice. `follower_log_start`:
        the follower's log start offset, which pending DeleteRecords wait on.
        `prev_fetch_ms`: see `Partition.on_follower_fetch`."""
        core, lg = self.core, self.log
        if replica_id not in core.replicas or core.is_stale_fetch(replica_id, broker_epoch):
            return FetchResult(Errors.NOT_LEADER_OR_FOLLOWER), None
        hw = core.high_watermark
        diverging = self.diverging(fetch_offset, last_fetched_epoch)
        if diverging is not None:
            lso = lg.log_start_offset
            return FetchResult(Errors.NONE, hw, hw, lso, diverging_epoch=diverging), None
        expand = None
        if lg.log_start_offset <= fetch_offset <= lg.log_end_offset:
            leo = lg.log_end_offset
            low = core.low_watermark(lg.log_start_offset)
            finish_acks(
                core.on_follower_fetch(
                    replica_id,
                    fetch_offset,
                    leo,
                    now_ms,
                    broker_epoch,
                    follower_log_start,
                    prev_fetch_ms,
                )
            )
            if core.high_watermark != hw or core.low_watermark(lg.log_start_offset) != low:
                self.wake()
            expand = core.maybe_expand_isr(replica_id, registered_epoch)
        try:
            data = self.read_for_follower(fetch_offset, max_bytes) if found is None else found
        except OffsetOutOfRangeError:
            hw = core.high_watermark
            return FetchResult(Errors.OFFSET_OUT_OF_RANGE, hw, hw, lg.log_start_offset), expand
        hw = core.high_watermark
        lso = self.last_stable_offset
        return FetchResult(Errors.NONE, hw, lso, lg.log_start_offset, data.records), expand

    def read_for_follower(self, fetch_offset: int, max_bytes: int) -> FetchDataInfo:
        """What a follower's fetch reads: our log up to the LEO."""
        return self.log.read(fetch_offset, max(0, max_bytes))

    def consumer_bound(self, isolation_level: int) -> int:
        """How far a consumer may read: the HW, or the LSO for read_committed."""
        return self.last_stable_offset if isolation_level == 1 else self.core.high_watermark

    def read_for_consumer(
        self, fetch_offset: int, max_bytes: int, isolation_level: int = 0
    ) -> FetchDataInfo:
        """What a consumer's fetch reads: our log up to the HW (read_committed: the LSO)."""
        bound = self.consumer_bound(isolation_level)
        return self.log.read(fetch_offset, max(0, max_bytes), max_offset=bound)

    def aborted_txns(self, fetch_offset: int, data: FetchDataInfo, lso: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed reader of `data` needs: those that
        end at or after the fetch offset and start before what was read ends (bounded
        by the LSO and by the segment the read came from, as a read stays in one)."""
        if data.records is None or data.size == 0:
            return []
        upper = lso
        for seg in self.log.segments:
            if seg.base_offset > fetch_offset:
                upper = min(upper, seg.base_offset)
                break
        return self.log.collect_aborted_txns(fetch_offset, upper)

    def list_offset(self, timestamp: int, isolation_level: int = 0) -> ListOffsetResult:
        """ListOffsets as leader: -1 latest (the HW; the LSO for read_committed), -2
        earliest (and -4, earliest local), -3 max timestamp (KIP-734), -5 latest tiered
        (none), else the first record at or after `timestamp`; only records below the HW
        (the LSO) are found."""
        core, lg = self.core, self.log
        bound = self.consumer_bound(isolation_level)
        if timestamp == LATEST:
            return ListOffsetResult(Errors.NONE, -1, bound, core.leader_epoch)
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            start = lg.log_start_offset
            epoch = lg.leader_epoch_cache.epoch_for_offset(start)
            return ListOffsetResult(Errors.NONE, -1, start, epoch)
        if timestamp == MAX_TIMESTAMP:
            found = lg.max_timestamp_and_offset()
        else:
            found = lg.offset_for_timestamp(timestamp) if timestamp >= 0 else None
        if found is None or found.offset >= bound:
            return ListOffsetResult(Errors.NONE, -1, -1, -1)
        return ListOffsetResult(Errors.NONE, found.timestamp, found.offset, found.leader_epoch)

    def reload_producers(self) -> None:
        """After a truncation (Kafka's truncateAndReload): the newest snapshot at or
        below the new LEO plus the batches after it. The truncation dropped the later
        snapshots and transaction index entries."""
        reload_producers(self.log, self.producers)

    def snapshot(self) -> None:
        """A producer snapshot at the LEO (clean shutdown: a restart replays nothing)."""
        take_snapshot(self.log, self.producers, self.log.log_end_offset)
