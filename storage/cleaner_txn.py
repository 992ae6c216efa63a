"""What the log cleaner knows of transactions as it walks the log in offset order: Kafka's
CleanedTransactionMetadata (LogCleaner.scala).

- Batches of aborted transactions are removed: the aborted transactions come from the
  `.txnindex` files (`Log.collect_aborted_txns`) and become "ongoing" once the walk
  reaches their first offset, until their ABORT marker is read.
- An ABORT marker stays while the pass still saw data of its transaction (that data goes
  in this pass; the marker then goes in a later one), and its index entry is copied into
  the cleaned segment's `.txnindex`. A COMMIT marker stays while the pass saw data of its
  transaction. A marker whose transaction has no data left can be discarded: like a
  tombstone, it first gets a delete horizon (now + delete.retention.ms) and goes in a
  pass after that, so a reader that saw the data also sees the marker.

The walk must never reach an open transaction: the cleanable range ends at the first
unstable offset (see `plan_cleaning`), so every transactional batch it reads has its
marker somewhere in the log.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable

from storage.control_batch import ABORT, COMMIT, marker_of
from storage.record_batch import RecordBatchView
from storage.txn_index import AbortedTxn, TransactionIndex


class CleanerTxnState:
    def __init__(self) -> None:
        self._pending: list[tuple[int, int, AbortedTxn]] = []  # heap by first offset
        self._seq = 0  # tie-break so AbortedTxn is never compared
        self._ongoing_committed: set[int] = set()
        # producer id -> (its aborted transaction, whether the pass saw a batch of it)
        self._ongoing_aborted: dict[int, list] = {}
        self.cleaned_index: TransactionIndex | None = None  # the group being written

    def add_aborted(self, txns: Iterable[AbortedTxn]) -> None:
        """Aborted transactions overlapping the part about to be read (duplicates are
        fine: a transaction already ongoing stays as it is)."""
        for txn in txns:
            heapq.heappush(self._pending, (txn.first_offset, self._seq, txn))
            self._seq += 1

    def _start_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0][0] <= offset:
            txn = heapq.heappop(self._pending)[2]
            self._ongoing_aborted.setdefault(txn.producer_id, [txn, False])

    def on_batch(self, view: RecordBatchView) -> bool:
        """Note a data batch; True when it belongs to an aborted transaction."""
        self._start_up_to(view.last_offset)
        if not view.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(view.producer_id)
        if aborted is not None:
            aborted[1] = True
            return True
        self._ongoing_committed.add(view.producer_id)
        return False

    def on_control(self, view: RecordBatchView) -> bool:
        """Note a control batch; True when it may be discarded (no data of its
        transaction was seen in this pass)."""
        self._start_up_to(view.last_offset)
        marker = marker_of(view)
        if marker is None:
            return False  # not a transaction marker: keep it
        producer_id = view.producer_id
        if marker[0] == ABORT:
            aborted = self._ongoing_aborted.pop(producer_id, None)
            if aborted is not None and aborted[1]:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(aborted[0])
                return False
            return True
        assert marker[0] == COMMIT
        if producer_id in self._ongoing_committed:
            self._ongoing_committed.discard(producer_id)
            return False
        return True
