"""Idempotent producer state of one partition, from batch headers only.

Kafka's ProducerStateManager, reduced to what idempotence needs (no transactions): for
each producer id, its epoch and the metadata of its last 5 batches (sequence range and
offsets). A leader checks every incoming batch before appending it:
- a batch equal to one of the last 5 (same epoch, same sequence range) is a retry: the
  client gets the original offsets and nothing is appended;
- a lower epoch is fenced (INVALID_PRODUCER_EPOCH);
- a new epoch must start at sequence 0, the same epoch must continue at last + 1,
  otherwise OUT_OF_ORDER_SEQUENCE_NUMBER (a producer we know nothing of may start
  anywhere, as in Kafka: its state may have been removed with old segments).
Followers record the leader's batches without checks. After a restart or a truncation
the state is rebuilt by scanning the log's batch headers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from common.errors import Errors
from storage.record_batch import CONTROL_MASK, NO_PRODUCER_ID, RecordBatchView, header_fields

MAX_BATCHES_PER_PRODUCER = 5  # Kafka's max.in.flight.requests.per.connection bound
INT32_MAX = 2**31 - 1


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


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The header fields idempotence needs, read once per batch."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_offset_delta: int
    base_offset: int
    is_control: bool
    max_timestamp: int = -1

    @classmethod
    def of(cls, view: RecordBatchView) -> BatchHeader:
        """From a batch not checked on the way in (our own log's, on a rebuild)."""
        return cls.of_fields(header_fields(view.buf, view.pos))

    @classmethod
    def of_fields(cls, f: tuple) -> BatchHeader:
        """From the header fields `validate_batch` already read (`CheckedBatch.fields`)."""
        # (base, length, epoch, magic, crc, attributes, last_delta, base_ts, max_ts,
        #  producer id, producer epoch, base sequence, count)
        return cls(f[9], f[10], f[11], f[6], f[0], bool(f[5] & CONTROL_MASK), f[8])

    @property
    def is_idempotent(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID and not self.is_control

    @property
    def last_seq(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset_delta)


def increment_sequence(sequence: int, increment: int) -> int:
    """Sequences wrap from INT32_MAX to 0 (DefaultRecordBatch.incrementSequence)."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    def __init__(self) -> None:
        self._producers: dict[int, ProducerEntry] = {}

    def check(self, headers: list[BatchHeader]) -> BatchMetadata | None:
        """Validate a leader append. Returns the original batch when the append is a
        retry of one already written (Kafka answers the whole request with it), None
        when it may be appended; raises ProducerStateError otherwise."""
        staged: dict[int, tuple[int, int]] = {}  # producer id -> (epoch, last seq) so far
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
                staged[h.producer_id] = (h.producer_epoch, h.last_seq)
                continue  # unknown producer: any sequence is accepted
            if h.producer_epoch < epoch:
                raise ProducerStateError(
                    Errors.INVALID_PRODUCER_EPOCH,
                    f"producer {h.producer_id} epoch {h.producer_epoch} is older than "
                    f"the current epoch {epoch}",
                )
            if h.producer_epoch > epoch:
                if h.base_sequence != 0:
                    raise ProducerStateError(
                        Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                        f"producer {h.producer_id}: a new epoch {h.producer_epoch} must start "
                        f"at sequence 0, got {h.base_sequence}",
                    )
            elif not _in_sequence(last, h.base_sequence):
                raise ProducerStateError(
                    Errors.OUT_OF_ORDER_SEQUENCE_NUMBER,
                    f"producer {h.producer_id} epoch {epoch}: expected sequence "
                    f"{increment_sequence(last, 1)}, got {h.base_sequence}",
                )
            staged[h.producer_id] = (h.producer_epoch, h.last_seq)
        return None

    def record(self, headers: Iterable[BatchHeader], first_offset: int | None = None) -> None:
        """Remember appended batches. A leader passes the first offset it assigned (the
        headers still hold the client's); a follower's headers carry the offsets."""
        offset = first_offset
        for h in headers:
            base = h.base_offset if offset is None else offset
            last = base + h.last_offset_delta
            if offset is not None:
                offset = last + 1
            if not h.is_idempotent:
                continue
            entry = self._producers.get(h.producer_id)
            if entry is None or h.producer_epoch > entry.epoch:
                entry = self._producers[h.producer_id] = ProducerEntry(h.producer_epoch)
            elif h.producer_epoch < entry.epoch:
                continue  # an older epoch's batch (a follower replaying history)
            entry.batches.append(BatchMetadata(h.base_sequence, h.last_seq, base, last))
            entry.last_timestamp = h.max_timestamp

    def active_producers(self) -> list[tuple[int, ProducerEntry]]:
        """(producer id, state) of every producer with batches in the log, by id."""
        return sorted(((p, e) for p, e in self._producers.items() if e.batches), key=lambda x: x[0])

    def rebuild(self, views: Iterable[RecordBatchView]) -> None:
        """Start over from the log's batch headers (oldest first)."""
        self._producers.clear()
        self.record(BatchHeader.of(v) for v in views)
