"""Idempotent and transactional producer state of one partition, from batch headers.

Kafka's ProducerStateManager and ProducerAppendInfo. For each producer id: its epoch,
the metadata of its last 5 batches (sequence range and offsets), its coordinator epoch
and the first offset of its open transaction. A leader checks every incoming batch
before appending it:
- a batch equal to one of the last 5 (same epoch, same sequence range) is a retry: the
  client gets the original offsets and nothing is appended;
- a lower epoch is fenced (INVALID_PRODUCER_EPOCH);
- a new epoch must start at sequence 0, the same epoch must continue at last + 1,
  otherwise OUT_OF_ORDER_SEQUENCE_NUMBER (a producer we know nothing of may start
  anywhere, as in Kafka: its state may have been removed with old segments);
- a non-transactional batch from a producer with an open transaction is
  INVALID_TXN_STATE; a transactional batch that opens a transaction needs the
  coordinator's word first when verification is on (KIP-890 part 1, the guard below).
Transactions: the first transactional batch opens one (its offset enters the ongoing
map); a marker (control batch: COMMIT or ABORT, with the coordinator epoch) closes it.
A closed transaction stays "unstable" until the HW passes its marker (Kafka's
unreplicatedTxns): until then a reader of committed data must not pass its first
offset, since a new leader might not have the marker. So the first unstable offset is
the smallest first offset of the open and of the unreplicated closed transactions,
and the LSO is min(that, HW).
Followers record the leader's batches without checks. After a restart the state comes
from a snapshot plus the batches after it, or from a scan of the whole log.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.errors import Errors
from common.varint import read_varint
from storage.record_batch import (
    CONTROL_MASK,
    HEADER_SIZE,
    NO_PRODUCER_ID,
    TRANSACTIONAL_MASK,
    RecordBatchView,
    header_fields,
)

MAX_BATCHES_PER_PRODUCER = 5  # Kafka's max.in.flight.requests.per.connection bound
INT32_MAX = 2**31 - 1
ABORT, COMMIT = 0, 1  # ControlRecordType ids (the control record key's type)
_I16 = struct.Struct(">h")
_MARKER_VALUE = struct.Struct(">hi")  # EndTransactionMarker value: version, coordinator epoch


class ProducerStateError(Exception):
    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int


@dataclass(slots=True)
class ProducerEntry:
    epoch: int
    last_timestamp: int = -1  # the max timestamp of its last batch (DescribeProducers)
    batches: deque[BatchMetadata] = field(
        default_factory=lambda: deque(maxlen=MAX_BATCHES_PER_PRODUCER)
    )
    coordinator_epoch: int = -1  # of the last marker written for it
    current_txn_first_offset: int = -1  # -1: no open transaction here

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def new_epoch(self, epoch: int) -> None:
        """Kafka's maybeUpdateProducerEpoch: another epoch forgets the batches (their
        sequences belong to the old one), not the transaction or coordinator epoch."""
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header fields producer state needs, read once per batch. `marker`: for a
    control batch whose first record was read, (control type, coordinator epoch)."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    base_offset: int
    is_control: bool
    max_timestamp: int = -1
    is_transactional: bool = False
    marker: tuple[int, int] | None = None

    @classmethod
    def of(cls, view: RecordBatchView) -> BatchHeader:
        """From a batch not checked on the way in (our own log's, a leader's). A control
        batch's marker is read when the view holds the whole batch."""
        h = cls.of_fields(header_fields(view.buf, view.pos))
        if h.is_control and len(view.buf) - view.pos >= view.size:
            return cls(*_fields(h)[:-1], marker_of(view))
        return h

    @classmethod
    def of_fields(cls, f: tuple) -> BatchHeader:
        """From the header fields `validate_batch` already read (`CheckedBatch.fields`)."""
        # (base, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
        #  producer id, producer epoch, base sequence, count)
        attrs = f[5]
        return cls(
            f[9], f[10], f[11], f[6], f[0], bool(attrs & CONTROL_MASK), f[8],
            bool(attrs & TRANSACTIONAL_MASK),
        )  # fmt: skip

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID and not self.is_control

    @property
    def last_seq(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def _fields(h: BatchHeader) -> tuple:
    return (
        h.producer_id, h.producer_epoch, h.base_sequence, h.last_offset_delta, h.base_offset,
        h.is_control, h.max_timestamp, h.is_transactional, h.marker,
    )  # fmt: skip


def marker_of(view: RecordBatchView) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a control batch's first record (Kafka's
    EndTransactionMarker: key = version, type; value = version, coordinator epoch).
    Control batches are never compressed. None: no record (the cleaner emptied it) or
    not a transaction marker."""
    if view.record_count <= 0:
        return None
    buf, pos = view.buf, view.pos + HEADER_SIZE
    try:
        _length, pos = read_varint(buf, pos)
        pos += 1  # attributes
        _ts_delta, pos = read_varint(buf, pos)
        _off_delta, pos = read_varint(buf, pos)
        key_len, pos = read_varint(buf, pos)
        if key_len < 4:
            return None
        control_type = _I16.unpack_from(buf, pos + 2)[0]
        pos += key_len
        value_len, pos = read_varint(buf, pos)
        coordinator_epoch = _MARKER_VALUE.unpack_from(buf, pos)[1] if value_len >= 6 else -1
    except (struct.error, IndexError, ValueError):
        return None
    if control_type not in (ABORT, COMMIT):
        return None
    return control_type, coordinator_epoch


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequences wrap from INT32_MAX to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def decrement_sequence(sequence: int, decrement: int) -> int:
    if sequence < decrement:
        return INT32_MAX - (decrement - sequence) + 1
    return sequence - decrement


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction a marker closed (Kafka's CompletedTxn). For an abort, the log's
    transaction index gets (producer id, first offset, last offset, last stable offset)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the marker's offset
    aborted: bool
    last_stable_offset: int  # the LSO once it is complete (Kafka's lastStableOffset(txn))


class VerificationGuard:
    """KIP-890: made before asking the coordinator whether a producer's transaction
    includes this partition; an append after the answer is allowed only while the guard
    is still the producer's current one (a marker, or another transaction's first
    batch, in between removes it: the answer may be about a transaction now closed)."""

    __slots__ = ()


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}
        self._ongoing: dict[int, int] = {}  # first offset -> producer id (open transactions)
        self._unreplicated: dict[int, tuple[int, int]] = {}  # first -> (pid, marker offset)
        self._guards: dict[int, VerificationGuard] = {}

    # -- transactions: the first unstable offset ---------------------------------------------

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the oldest transaction that is open or whose marker is
        not yet below `high_watermark` (which completes the ones it passed: Kafka's
        onHighWatermarkUpdated); None when there is none."""
        if self._unreplicated:
            done = [f for f, (_p, last) in self._unreplicated.items() if last < high_watermark]
            for f in done:
                del self._unreplicated[f]
        firsts = [*self._ongoing, *self._unreplicated]
        return min(firsts) if firsts else None

    def peek_first_unstable_offset(self, high_watermark: int) -> int | None:
        """`first_unstable_offset` without completing anything, safe to call from
        another thread (the log cleaner's): it reads copies of the maps."""
        firsts = list(self._ongoing)
        unreplicated = list(self._unreplicated.items())
        firsts += [f for f, (_p, last) in unreplicated if last >= high_watermark]
        return min(firsts) if firsts else None

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset(high_watermark)
        return high_watermark if first is None else min(first, high_watermark)

    def first_undecided_offset(self) -> int | None:
        return min(self._ongoing) if self._ongoing else None

    def has_ongoing_txn(self, producer_id: int) -> bool:
        entry = self._producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset >= 0

    def ongoing_txns(self) -> dict[int, int]:
        """First offset -> producer id of the open transactions."""
        return dict(self._ongoing)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    # -- KIP-890 verification -----------------------------------------------------------------

    def start_verification(self, producer_id: int) -> VerificationGuard:
        """The guard of a verification about to be asked (the current one if another
        request is asking already: Kafka's maybeCreateVerificationStateEntry)."""
        return self._guards.setdefault(producer_id, VerificationGuard())

    # -- leader checks ------------------------------------------------------------------------

    def check(
        self,
        headers: list[BatchHeader],
        guard: VerificationGuard | None = None,
        verify: bool = False,
    ) -> BatchMetadata | None:
        """Validate a leader append of client batches. Returns the original batch when
        the append is a retry of one already written (Kafka answers the whole request
        with it), None when it may be appended; raises ProducerStateError otherwise.
        `verify`: transaction verification is on, so a transactional batch that opens a
        transaction needs `guard` to still be its producer's current guard."""
        staged: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) so far
        in_txn: dict[int, bool] = {}  # producer id -> an open transaction, so far
        for h in headers:
            if not h.is_idempotent:
                continue
            entry = self._producers.get(h.producer_id)
            if h.producer_id in staged:
                epoch, last = staged[h.producer_id]
            elif entry is not None:
                dup = entry.find_duplicate(h.producer_epoch, h.base_sequence, h.last_seq)
                if dup is not None:
                    return dup
                epoch, last = entry.epoch, entry.last_seq
            else:
                epoch, last = -1, -1
            open_here = entry is not None and entry.current_txn_first_offset >= 0
            ongoing = in_txn.get(h.producer_id, open_here)
            if entry is not None or h.producer_id in staged:
                self._check_sequence(h, epoch, last)
            if ongoing and not h.is_transactional:
                raise ProducerStateError(
                    Errors.INVALID_TXN_STATE,
                    f"expected a transactional write from producer {h.producer_id}: it has "
                    "an open transaction",
                )
            if h.is_transactional and not ongoing:
                if verify and (guard is None or self._guards.get(h.producer_id) is not guard):
                    raise ProducerStateError(
                        Errors.INVALID_TXN_STATE,
                        f"producer {h.producer_id}: the record was not part of an ongoing "
                        "transaction (the partition was not verified as added to it)",
                    )
                in_txn[h.producer_id] = True
            staged[h.producer_id] = (h.producer_epoch, h.last_seq)
        return None

    @staticmethod
    def _check_sequence(h: BatchHeader, epoch: int, last: int) -> None:
        if h.producer_epoch < epoch:
            raise ProducerStateError(
                Errors.INVALID_PRODUCER_EPOCH,
                f"producer {h.producer_id} epoch {h.producer_epoch} is older than "
                f"the current epoch {epoch}",
            )
        if h.producer_epoch > epoch:
            if h.base_sequence != 0 and epoch >= 0:
                raise ProducerStateError(
                    Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {h.producer_id}: a new epoch {h.producer_epoch} must start "
                    f"at sequence 0, got {h.base_sequence}",
                )
        elif last >= 0 and not _in_sequence(last, h.base_sequence):
            raise ProducerStateError(
                Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                f"producer {h.producer_id} epoch {epoch}: expected sequence "
                f"{increment_sequence(last, 1)}, got {h.base_sequence}",
            )

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """A marker the coordinator asks a leader to write (Kafka's appendEndTxnMarker
        for the COORDINATOR origin): an older producer epoch is INVALID_PRODUCER_EPOCH,
        an older coordinator epoch TRANSACTION_COORDINATOR_FENCED (a zombie coordinator)."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise ProducerStateError(
                Errors.INVALID_PRODUCER_EPOCH,
                f"marker for producer {producer_id} has epoch {producer_epoch}, older than "
                f"the current epoch {entry.epoch}",
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise ProducerStateError(
                Errors.TRANSACTION_COORDINATOR_FENCED,
                f"marker for producer {producer_id} has coordinator epoch "
                f"{coordinator_epoch}, older than {entry.coordinator_epoch} (a zombie)",
            )

    # -- recording appends ----------------------------------------------------------------------

    def record(
        self, headers: Iterable[BatchHeader], first_offset: int | None = None
    ) -> list[CompletedTxn]:
        """Remember appended batches. A leader passes the first offset it assigned (the
        headers still hold the client's); a follower's headers carry the offsets.
        Returns the transactions the markers among them closed, each with the LSO it
        leaves (its abort goes into the transaction index); they stay unstable until the
        HW passes their marker."""
        offset = first_offset
        closing: list[tuple[int, int, int, bool]] = []  # pid, first, marker offset, aborted
        for h in headers:
            base = h.base_offset if offset is None else offset
            last = base + h.last_offset_delta
            if offset is not None:
                offset = last + 1
            if h.producer_id == NO_PRODUCER_ID:
                continue
            if h.is_control:
                done = self._record_marker(h, base)
                if done is not None:
                    closing.append(done)
                continue
            entry = self._producers.get(h.producer_id)
            if entry is None:
                entry = self._producers[h.producer_id] = ProducerEntry(h.producer_epoch)
            elif h.producer_epoch < entry.epoch:
                continue  # an older epoch's batch (a follower replaying history)
            entry.new_epoch(h.producer_epoch)
            entry.batches.append(BatchMetadata(h.base_sequence, h.last_seq, base, last))
            entry.last_timestamp = h.max_timestamp
            if h.is_transactional:
                self._guards.pop(h.producer_id, None)
                if entry.current_txn_first_offset < 0:
                    entry.current_txn_first_offset = base
                    self._ongoing[base] = h.producer_id
        # As Kafka: the LSOs are computed once the append's transactions all started.
        completed = []
        for pid, first, marker_offset, aborted in closing:
            lso = self._next_incomplete(pid)
            completed.append(CompletedTxn(pid, first, marker_offset, aborted,
                                          marker_offset + 1 if lso is None else lso))  # fmt: skip
            if self._ongoing.get(first) == pid:
                del self._ongoing[first]
            self._unreplicated[first] = (pid, marker_offset)
        return completed

    def _record_marker(self, h: BatchHeader, offset: int) -> tuple[int, int, int, bool] | None:
        pid = h.producer_id
        self._guards.pop(pid, None)
        entry = self._producers.get(pid)
        if entry is None:
            entry = self._producers[pid] = ProducerEntry(h.producer_epoch)
        if h.marker is None:
            return None  # an emptied control batch: its transaction was cleaned away
        control_type, coordinator_epoch = h.marker
        first = entry.current_txn_first_offset
        if h.producer_epoch >= entry.epoch:
            entry.new_epoch(h.producer_epoch)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.current_txn_first_offset = -1
        entry.last_timestamp = h.max_timestamp
        if first < 0:
            return None  # an empty transaction: nothing to index, no LSO effect
        return pid, first, offset, control_type == ABORT

    def _next_incomplete(self, producer_id: int) -> int | None:
        """Kafka's findNextIncompleteTxn: the oldest open transaction of another producer."""
        others = [f for f, p in self._ongoing.items() if p != producer_id]
        return min(others) if others else None

    # -- listing, snapshots, rebuilds ------------------------------------------------------------

    def active_producers(self) -> list[tuple[int, ProducerEntry]]:
        """(producer id, state) of every producer with batches or a transaction, by id."""
        return sorted(
            ((p, e) for p, e in self._producers.items()
             if e.batches or e.current_txn_first_offset >= 0),
            key=lambda x: x[0],
        )  # fmt: skip

    def clear(self) -> None:
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._guards.clear()

    def rebuild(self, views: Iterable[RecordBatchView]) -> list[CompletedTxn]:
        """Start over from the log's batches (oldest first); returns the aborted
        transactions found, for a rebuild of the transaction index."""
        self.clear()
        return self.replay(views)

    def replay(self, views: Iterable[RecordBatchView]) -> list[CompletedTxn]:
        """Apply the log's batches after a snapshot (or from the start)."""
        out: list[CompletedTxn] = []
        for v in views:
            out.extend(self.record([BatchHeader.of(v)]))
        return [t for t in out if t.aborted]

    def snapshot_entries(self) -> list:
        """The state as storage's SnapshotEntry list (Kafka's snapshot keeps each
        producer's last batch only)."""
        from storage.producer_snapshot import SnapshotEntry

        out = []
        for pid, e in sorted(self._producers.items()):
            b = e.batches[-1] if e.batches else None
            out.append(
                SnapshotEntry(
                    producer_id=pid,
                    epoch=e.epoch,
                    last_sequence=b.last_seq if b else -1,
                    last_offset=b.last_offset if b else -1,
                    offset_delta=(b.last_offset - b.first_offset) if b else 0,
                    timestamp=e.last_timestamp,
                    coordinator_epoch=e.coordinator_epoch,
                    current_txn_first_offset=e.current_txn_first_offset,
                )
            )
        return out

    def load_snapshot(self, entries: Iterable) -> None:
        """Start over from snapshot entries (Kafka's loadProducerEntry): open
        transactions re-enter the ongoing map."""
        self.clear()
        for s in entries:
            e = ProducerEntry(s.epoch, s.timestamp)
            if s.last_offset >= 0:
                first_seq = decrement_sequence(s.last_sequence, s.offset_delta)
                first_offset = s.last_offset - s.offset_delta
                meta = BatchMetadata(first_seq, s.last_sequence, first_offset, s.last_offset)
                e.batches.append(meta)
            e.coordinator_epoch = s.coordinator_epoch
            e.current_txn_first_offset = s.current_txn_first_offset
            self._producers[s.producer_id] = e
            if s.current_txn_first_offset >= 0:
                self._ongoing[s.current_txn_first_offset] = s.producer_id
