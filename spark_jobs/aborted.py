"""read_committed: which batches of one Fetch answer belong to aborted transactions.

Kafka's consumer (CompletedFetch) with the Fetch answer's aborted_transactions list:
the list holds, per aborted transaction overlapping the fetched range, its producer id
and first offset. Walking the batches in offset order, a transaction becomes "aborted
and open" for its producer once a batch reaching its first offset is seen; the
producer's transactional batches are then skipped until its ABORT marker (a control
batch), which closes it. Control batches themselves are never rows. Nothing here
needs the transaction's last offset: the marker is in the log right after it.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.varint import MalformedError, read_varint

ABORT, COMMIT = 0, 1  # Kafka's ControlRecordType ids (the control record key's type)


class AbortedTransactions:
    """The state of one Fetch answer's walk (Kafka's abortedProducerIds + its queue)."""

    __slots__ = ("_pending", "_next", "_open")

    def __init__(self, aborted: Iterable[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda a: a[1])  # by first offset
        self._next = 0
        self._open: set[int] = set()

    def skip(self, producer_id: int, last_offset: int, transactional: bool, abort: bool) -> bool:
        """Feed one batch (in offset order); True when its records must be skipped.
        `abort`: the batch is a control batch holding an ABORT marker."""
        if producer_id < 0:
            return False
        # consumeAbortedTransactionsUpTo(lastOffset)
        while self._next < len(self._pending) and self._pending[self._next][1] <= last_offset:
            self._open.add(self._pending[self._next][0])
            self._next += 1
        if abort:
            self._open.discard(producer_id)
            return False  # a control batch: the caller skips it anyway
        return transactional and producer_id in self._open


def control_type(records: bytes | memoryview) -> int | None:
    """The type of a control batch's first record (its key: version int16, type int16),
    from the batch's record bytes after the header; None if unreadable."""
    try:
        _, pos = read_varint(records, 0)  # record length
        pos += 1  # attributes
        _, pos = read_varint(records, pos)  # timestamp delta
        _, pos = read_varint(records, pos)  # offset delta
        key_len, pos = read_varint(records, pos)
    except (MalformedError, IndexError):
        return None
    if key_len < 4 or pos + 4 > len(records):
        return None
    return int.from_bytes(bytes(records[pos + 2 : pos + 4]), "big", signed=True)
