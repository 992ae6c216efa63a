"""The transaction side of `Log`: aborted-transaction indexes across segments and the
producer-state snapshot files of the partition directory.

A mixin so that `Log` keeps one public surface (the storage API of issue 15) while its
module stays about appends, reads and segments. Everything runs under the log's lock.

Snapshots (`<20-digit offset>.snapshot`, storage/producer_snapshot.py) hold the producer
state as of that offset: the partition layer loads the newest one at or below the log
end and replays the log from its offset. Like Kafka's ProducerStateManager, the log
drops snapshots the log no longer backs: above the log end after a truncation, all of
them when the log restarts elsewhere, and those below the log start (the log from there
cannot be read any more). Kafka keeps every snapshot down to the log start; two are
enough here: the newest, and one to fall back on should the newest be unreadable.
"""

from __future__ import annotations

import bisect
import logging
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from storage.index import CorruptIndexError
from storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from storage.txn_index import AbortedTxn

if TYPE_CHECKING:
    from storage.segment import LogSegment

log = logging.getLogger(__name__)

SNAPSHOTS_KEPT = 2


class TxnLogMixin:
    """Requires the host's `dir`, `_lock`, `_segments`, `_bases`, `_leo` and
    `log_start_offset`, and `_check_open()`."""

    dir: Path
    _lock: threading.RLock
    _segments: list[LogSegment]
    _bases: list[int]
    _leo: int
    log_start_offset: int
    # Called with the new active segment's base offset after every roll, under the log's
    # lock and before the append that caused it is written: the partition layer takes its
    # producer snapshot there (Kafka's roll does the same). None: nobody listens.
    on_roll: Callable[[int], None] | None = None

    def _check_open(self) -> None:  # pragma: no cover - Log's
        raise NotImplementedError

    # -- aborted transactions ------------------------------------------------------------

    def add_aborted_txn(self, txn: AbortedTxn) -> None:
        """Index an aborted transaction in the segment holding its marker (`last_offset`).

        Replaying a marker already indexed (recovery from a snapshot older than the
        index) is a no-op; any other entry that does not follow the segment's last one
        raises ValueError.
        """
        with self._lock:
            self._check_open()
            if not self.log_start_offset <= txn.last_offset < self._leo:
                raise ValueError(
                    f"aborted transaction marker at {txn.last_offset} is outside the log "
                    f"[{self.log_start_offset}, {self._leo}) of {self.dir.name}"
                )
            index = self._segments[self._segment_index(txn.last_offset)].txn_index
            if txn in index.all_entries():
                return
            index.append(txn)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), from the
        segment holding `fetch_offset` on until an entry's LSO reaches `upper_bound`
        (Kafka's LocalLog.collectAbortedTransactions)."""
        with self._lock:
            self._check_open()
            found: list[AbortedTxn] = []
            # Past `upper_bound` too: a transaction that began below it may have been
            # aborted (its marker indexed) in any later segment.
            for seg in self._segments[self._segment_index(fetch_offset) :]:
                entries, complete = seg.txn_index.collect(fetch_offset, upper_bound)
                found += entries
                if complete:
                    break
            return found

    def reset_txn_indexes(self) -> None:
        """Empty every segment's `.txnindex` (a rebuild from the log follows)."""
        with self._lock:
            self._check_open()
            for seg in self._segments:
                seg.txn_index.reset()

    def txn_indexes_ok(self) -> bool:
        """Whether every `.txnindex` is sane: whole entries of a known version, in order,
        inside its segment's offsets. False (with a warning) calls for a rebuild."""
        with self._lock:
            self._check_open()
            ends = [*self._bases[1:], self._leo]
            for seg, end in zip(self._segments, ends, strict=True):
                try:
                    seg.txn_index.sanity_check()
                    entries = seg.txn_index.all_entries()
                    if entries and entries[-1].last_offset >= end:
                        raise CorruptIndexError(
                            f"{seg.txn_index.path}: entry {entries[-1]} is past the "
                            f"segment's end {end}"
                        )
                except CorruptIndexError as exc:
                    log.warning(
                        "transaction index needs a rebuild: %s",
                        exc,
                        extra={"log": self.dir.name, "error": str(exc)},
                    )
                    return False
            return True

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    # -- producer snapshots --------------------------------------------------------------

    def take_producer_snapshot(self, entries: Iterable[SnapshotEntry], offset: int) -> None:
        """Write `<offset>.snapshot` (atomically) and keep only the newest two."""
        with self._lock:
            self._check_open()
            write_snapshot(snapshot_path(self.dir, offset), entries)
            snapshots = list_snapshots(self.dir)
            for _offset, path in snapshots[:-SNAPSHOTS_KEPT]:
                path.unlink(missing_ok=True)

    def latest_producer_snapshot(self, max_offset: int) -> tuple[int, list[SnapshotEntry]] | None:
        """(offset, entries) of the newest readable snapshot at or below `max_offset`.

        An unreadable one is deleted with a warning (Kafka does the same) and the next
        older one is tried.
        """
        with self._lock:
            self._check_open()
            for offset, path in reversed(list_snapshots(self.dir)):
                if offset > max_offset:
                    continue
                try:
                    return offset, read_snapshot(path)
                except (CorruptSnapshotError, OSError) as exc:
                    log.warning(
                        "deleting unreadable producer snapshot %s: %s",
                        path,
                        exc,
                        extra={"log": self.dir.name, "snapshot": str(path), "error": str(exc)},
                    )
                    path.unlink(missing_ok=True)
            return None

    def producer_snapshot_offsets(self) -> list[int]:
        """The offsets of the snapshot files present, oldest first."""
        with self._lock:
            return [offset for offset, _path in list_snapshots(self.dir)]

    def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None:
        for offset, path in list_snapshots(self.dir):
            if doomed(offset):
                path.unlink(missing_ok=True)

    def _drop_unbacked_snapshots(self) -> None:
        """Snapshots outside [log start, log end]: the log no longer backs them."""
        start, end = self.log_start_offset, self._leo
        self._delete_snapshots(lambda offset: offset < start or offset > end)

    def _rolled(self, base: int) -> None:
        if self.on_roll is not None:
            self.on_roll(base)
