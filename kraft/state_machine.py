"""The replicated metadata state machine: pure, deterministic, no I/O.

pysyncobj calls `append_batch` on every controller in the same order; the outcome must
be the same everywhere, so it depends only on the state and the arguments:
- a batch from a stale controller epoch is refused;
- a retried batch (same writer and sequence) is answered with its first outcome, once;
- every record must apply to the image, and partition changes must carry exactly the
  next partition epoch (compare-and-set), so two decisions taken on the same image can
  never both land;
- a pipelined batch names the batch it was decided after (`after`, same writer): it is
  refused unless that one applied (OK), so a decision built on a speculative view never
  lands once that view proved wrong;
- registrations get their broker epoch = their own offset (as in KRaft);
- offsets are dense and assigned here, never taken from Raft indexes.

The log keeps a bounded tail of encoded records for brokers to fetch; a broker behind
the tail starts from a snapshot of the current image.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from enum import IntEnum

import msgspec

from metadata_log.delta import MetadataDelta, MetadataReplayError
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ControllerEpochRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    Record,
    RecordDecodeError,
    RegisterBrokerRecord,
    decode_batch,
    encode,
)

DEDUPE_WINDOW = 64  # outcomes remembered per writer


class AppendStatus(IntEnum):
    OK = 0
    STALE_CONTROLLER_EPOCH = 1
    INVALID = 2  # the batch does not apply to the image (a stale decision, or a bug)


@dataclass(frozen=True, slots=True)
class AppendResult:
    status: AppendStatus
    first_offset: int = -1
    last_offset: int = -1
    error: str = ""


class MetadataStateMachine:
    def __init__(self, max_tail_records: int = 50_000) -> None:
        self._lock = threading.Lock()  # appends run on pysyncobj's thread, reads elsewhere
        self.max_tail_records = max_tail_records
        self.image = MetadataImage()
        self.next_offset = 0
        self.tail_start = 0
        self._tail: list[bytes] = []  # encoded record at offset tail_start + i
        self._outcomes: dict[str, OrderedDict[int, AppendResult]] = {}

    # pysyncobj pickles the state for its snapshots: leave the lock out.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["_lock"]
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def append_batch(
        self, controller_epoch: int, writer: str, seq: int, batch: bytes, after: int | None = None
    ) -> AppendResult:
        seen = self._outcomes.get(writer)
        if seen is not None and seq in seen:
            return seen[seq]
        if after is not None and not _applied(seen, after):
            # Decided on the projection of batch `after`: without it that view is wrong.
            # Not applied also covers "not seen yet" (Raft reordered a retry) and "fell out
            # of the window": refusing is always safe, the writer decides again.
            result = AppendResult(
                AppendStatus.INVALID, error=f"decided after batch {after}, which did not apply"
            )
        else:
            result = self._apply(controller_epoch, batch)
        if seen is None:
            seen = self._outcomes[writer] = OrderedDict()
        seen[seq] = result
        while len(seen) > DEDUPE_WINDOW:
            seen.popitem(last=False)
        return result

    def _apply(self, controller_epoch: int, batch: bytes) -> AppendResult:
        try:
            records = decode_batch(batch)
        except RecordDecodeError as exc:
            return AppendResult(AppendStatus.INVALID, error=str(exc))
        if not records:
            return AppendResult(AppendStatus.INVALID, error="empty batch")
        barrier = next((r for r in records if isinstance(r, ControllerEpochRecord)), None)
        floor = self.image.controller_epoch
        if controller_epoch < floor or (barrier is not None and barrier.controller_epoch < floor):
            return AppendResult(
                AppendStatus.STALE_CONTROLLER_EPOCH,
                error=f"controller epoch {controller_epoch} is older than {floor}",
            )
        if barrier is None and controller_epoch != floor:
            return AppendResult(
                AppendStatus.STALE_CONTROLLER_EPOCH,
                error=f"controller epoch {controller_epoch} has committed no barrier",
            )
        first = self.next_offset
        try:
            image, encoded = apply_records(self.image, first, records)
        except MetadataReplayError as exc:
            return AppendResult(AppendStatus.INVALID, error=str(exc))
        with self._lock:
            self.image = image
            self._tail.extend(encoded)
            self.next_offset = first + len(encoded)
            excess = len(self._tail) - self.max_tail_records
            if excess > 0:
                del self._tail[:excess]
                self.tail_start += excess
        return AppendResult(AppendStatus.OK, first, first + len(encoded) - 1)

    # -- reads (any thread) ------------------------------------------------------------------

    def records_from(self, offset: int, max_records: int) -> list[tuple[int, bytes]] | None:
        """Committed records from `offset` on, or None when `offset` fell off the tail
        (the reader must start from a snapshot of the image)."""
        with self._lock:
            if offset < self.tail_start:
                return None
            start = offset - self.tail_start
            chunk = self._tail[start : start + max_records]
            return [(offset + i, data) for i, data in enumerate(chunk)]

    def snapshot(self) -> tuple[MetadataImage, int]:
        """The current image and the next offset to fetch after it."""
        with self._lock:
            return self.image, self.next_offset


def _applied(seen: OrderedDict[int, AppendResult] | None, seq: int) -> bool:
    outcome = None if seen is None else seen.get(seq)
    return outcome is not None and outcome.status == AppendStatus.OK


def apply_records(
    image: MetadataImage, first_offset: int, records: list[Record], *, encoded: bool = True
) -> tuple[MetadataImage, list[bytes]]:
    """The image after `records` at offsets `first_offset`... and their encodings, or
    MetadataReplayError when one does not apply. The state machine's one rule book: the
    active controller also runs it (encoded=False) to project pending decisions onto the
    committed image, so a decision taken on the projection applies exactly as projected."""
    delta = MetadataDelta(image)
    out: list[bytes] = []
    for i, record in enumerate(records):
        record = _assign(record, first_offset + i, delta)
        delta.replay(record, first_offset + i)
        if encoded:
            out.append(encode(record))
    return delta.apply(), out


def _assign(record: Record, offset: int, delta: MetadataDelta) -> Record:
    """Fill in what only apply time knows, and apply the compare-and-set rules."""
    if isinstance(record, RegisterBrokerRecord):
        return msgspec.structs.replace(record, broker_epoch=offset)
    if isinstance(record, PartitionChangeRecord):
        current = delta.partition(record.topic_id, record.partition)
        if current is None:
            raise MetadataReplayError(f"no partition {record.topic_id}/{record.partition}")
        if record.partition_epoch != current.partition_epoch + 1:
            raise MetadataReplayError(
                f"partition epoch {record.partition_epoch} is not next after "
                f"{current.partition_epoch} for {record.topic_id}/{record.partition}"
            )
        if record.leader_epoch < current.leader_epoch:
            raise MetadataReplayError("leader epoch may not decrease")
    if isinstance(record, ProducerIdsRecord) and record.next_producer_id <= delta.next_producer_id:
        raise MetadataReplayError("producer id block was already handed out")
    return record
