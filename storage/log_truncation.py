"""Truncation and the log start of `Log` (a mixin, like storage/log_cleanup.py): cut a
follower's divergent tail (Kafka's UnifiedLog.truncateTo), restart the log empty at an
offset (truncateFullyAndStartAt), and move the log start up for DeleteRecords. Each
keeps the leader epoch cache, the recovery point, the cleaner checkpoint and the
producer snapshots consistent with the offsets that remain. Everything runs under the
log's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from storage.log_types import OffsetOutOfRangeError
from storage.segment import LogSegment

if TYPE_CHECKING:
    from storage.epoch_cache import LeaderEpochCache


class LogTruncationMixin:
    """The state it changes is the log's (set in `Log.__init__`)."""

    log_start_offset: int
    recovery_point: int
    cleaner_checkpoint: int | None
    leader_epoch_cache: LeaderEpochCache
    _lock: threading.RLock
    _segments: list[LogSegment]
    _bases: list[int]
    _leo: int

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...
        def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment: ...
        def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None: ...
        def _delete_segments_while(self, predicate: Callable[[LogSegment, int], bool]) -> int: ...

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding offsets >= `offset` (a follower's divergent tail)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._leo:
                # Kafka does this too (UnifiedLog.truncateTo): an epoch we started as
                # leader at our LEO without appending to it must go, or our fetches
                # keep naming an epoch the new leader never had, and diverge forever.
                # An empty log (start == LEO) is no exception: its entry at the LEO may
                # be such an epoch (found by the replication model), and when it stands
                # for records deleted before the start, dropping it only makes the next
                # fetch name no epoch, which the leader does not check.
                self.leader_epoch_cache.truncate_from_end(self._leo)
                return False
            if offset < self._segments[0].base_offset:
                self.truncate_fully_and_start_at(offset)
                return True
            while len(self._segments) > 1 and self._bases[-1] > offset:
                dead = self._segments.pop()
                self._bases.pop()
                dead.close()
                dead.delete()
            self._segments[-1].truncate_to(offset)
            self._leo = self._segments[-1].next_offset()
            self.leader_epoch_cache.truncate_from_end(self._leo)
            self.recovery_point = min(self.recovery_point, self._leo)
            if self.cleaner_checkpoint is not None:  # Kafka's maybeTruncateCheckpoint
                self.cleaner_checkpoint = min(self.cleaner_checkpoint, self._leo)
            self.log_start_offset = min(self.log_start_offset, self._leo)
            leo = self._leo
            self._delete_snapshots(lambda snapshot: snapshot > leo)
            return True

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything; the log restarts empty at `offset`."""
        with self._lock:
            self._check_open()
            for seg in self._segments:
                seg.close()
                seg.delete()
            self._segments = [self._new_segment(offset)]
            self._bases = [offset]
            self._leo = offset
            self.leader_epoch_cache.clear()
            self.log_start_offset = offset
            self.recovery_point = offset
            self.cleaner_checkpoint = None
            self._delete_snapshots(lambda _snapshot: True)  # the producers' history is gone

    def delete_records_before(self, offset: int) -> bool:
        """Move the log start offset up to `offset` (DeleteRecords); drops whole segments.

        The caller bounds `offset` by the high watermark, as Kafka does.
        """
        with self._lock:
            self._check_open()
            if offset > self._leo:
                raise OffsetOutOfRangeError(
                    f"cannot delete records before {offset}: the log ends at {self._leo}"
                )
            if offset <= self.log_start_offset:
                return False
            self.log_start_offset = offset
            self.leader_epoch_cache.truncate_from_start(offset)
            self._delete_segments_while(lambda seg, next_base: next_base <= offset)
            self._delete_snapshots(lambda snapshot: snapshot < offset)
            return True
