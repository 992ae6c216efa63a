"""The cleanup side of `Log`: retention (retention.ms, retention.bytes, segments below the
log start) and compaction's segment swap (storage/cleaner.py plans and writes the cleaned
segment; `replace_segments` puts it in place).

A mixin, like storage/log_txn.py, so that `Log` keeps one public surface while its module
stays about appends, reads and segments. Everything runs under the log's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from storage.checkpoint import fsync_dir
from storage.config import LogConfig
from storage.log_loader import SWAP_SUFFIX
from storage.segment import LogSegment

if TYPE_CHECKING:
    from storage.epoch_cache import LeaderEpochCache


class LogCleanupMixin:
    """The state it changes is the log's (set in `Log.__init__`)."""

    dir: Path
    config: LogConfig
    log_start_offset: int
    leader_epoch_cache: LeaderEpochCache
    _lock: threading.RLock
    _segments: list[LogSegment]
    _bases: list[int]
    _leo: int
    _clock: Callable[[], int]

    if TYPE_CHECKING:

        def _check_open(self) -> None: ...
        def roll(self, new_base: int | None = None) -> LogSegment: ...
        def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None: ...
        @property
        def size_in_bytes(self) -> int: ...

    # -- retention ---------------------------------------------------------------------------

    def delete_old_segments(self, high_watermark: int | None = None) -> int:
        """Apply retention.ms and retention.bytes; returns the number of segments deleted.

        Only segments wholly below `high_watermark` (default: the LEO) may go, as in Kafka.
        """
        with self._lock:
            self._check_open()
            hw = self._leo if high_watermark is None else high_watermark
            # Kafka's deleteLogStartOffsetBreachedSegments, whatever the cleanup policy:
            # segments wholly below the log start offset (moved by DeleteRecords, or read
            # from log-start-offset-checkpoint at start-up) go.
            start = min(hw, self.log_start_offset)
            deleted = self._delete_segments_while(lambda seg, nb: nb <= start)
            if not self.config.delete:
                # cleanup.policy=compact: as in Kafka, retention.ms and retention.bytes do
                # not apply.
                return deleted
            now = self._clock()
            retention_ms = self.config.retention_ms
            if retention_ms >= 0:
                deleted += self._delete_segments_while(
                    lambda seg, nb: nb <= hw and now - seg.max_timestamp_so_far > retention_ms
                )
            if self.config.retention_bytes >= 0:
                excess = [self.size_in_bytes - self.config.retention_bytes]

                def over_size(seg: LogSegment, next_base: int) -> bool:
                    if next_base > hw or excess[0] < seg.size:
                        return False
                    excess[0] -= seg.size
                    return True

                deleted += self._delete_segments_while(over_size)
            return deleted

    def _delete_segments_while(self, predicate: Callable[[LogSegment, int], bool]) -> int:
        """Delete segments from the oldest while `predicate(segment, next base)` holds."""
        doomed = 0
        for i, seg in enumerate(self._segments):
            is_active = i + 1 == len(self._segments)
            if is_active and seg.size == 0:
                break
            next_base = self._leo if is_active else self._bases[i + 1]
            if not predicate(seg, next_base):
                break
            doomed += 1
        if not doomed:
            return 0
        if doomed == len(self._segments):
            self.roll()  # never leave the log without an active segment
        for seg in self._segments[:doomed]:
            seg.close()
            seg.delete()
        del self._segments[:doomed]
        del self._bases[:doomed]
        self.log_start_offset = start = max(self.log_start_offset, self._bases[0])
        self.leader_epoch_cache.truncate_from_start(start)
        self._delete_snapshots(lambda snapshot: snapshot < start)
        return doomed

    # -- compaction (see storage/cleaner.py) -------------------------------------------------

    def segments_snapshot(self) -> list[tuple[LogSegment, int, int]]:
        """(segment, size, base offset of the next segment or the LEO) for every segment,
        read together under the lock: the cleaner plans from it, and `replace_segments`
        checks that what it cleaned is still there, unchanged."""
        with self._lock:
            self._check_open()
            ends = [*self._bases[1:], self._leo]
            return [(seg, seg.size, end) for seg, end in zip(self._segments, ends, strict=True)]

    def replace_segments(self, old: Sequence[tuple[LogSegment, int]], new: LogSegment) -> bool:
        """Swap `new`, a cleaned segment written and fsynced beside the log (`.cleaned`
        files), in for the consecutive segments `old`, given with the sizes it was made from.

        False, with nothing changed, when `old` is no longer in the log as it was (truncated,
        deleted, replaced meanwhile): the caller then deletes `new`. `new` starts at the
        first old segment's base and ends where the last one ends, so segments stay
        contiguous. Takes the lock and only renames and unlinks files, so it is short;
        callable from any thread. Crash safety as in Kafka: `.cleaned` -> `.swap` (the
        commit: from here the loader completes the swap), old files deleted, `.swap` ->
        final names. The LEO, log start offset, recovery point and epochs do not change.
        """
        with self._lock:
            self._check_open()
            segs = [seg for seg, _ in old]
            i = self._find_unchanged(old)
            if i is None:
                return False
            end = segs[-1].next_offset()
            if new.base_offset != segs[0].base_offset or new.next_offset() != end:
                raise ValueError(f"{new} does not cover exactly the offsets of {segs}")
            new.change_suffix(SWAP_SUFFIX)
            fsync_dir(self.dir)  # the commit point is durable before any old file goes
            self._segments[i : i + len(segs)] = [new]
            self._bases[i : i + len(segs)] = [new.base_offset]
            # Closed like segments deleted by retention (their FileSlices die with them).
            for seg in segs:
                seg.close()
                if seg.base_offset != new.base_offset:
                    seg.delete()  # the first one's files are replaced by the renames below
                else:
                    # ...except its .txnindex when `new` has none (its file is lazy).
                    seg.txn_index.delete()
            new.change_suffix("")
            fsync_dir(self.dir)
            return True

    def set_cleaner_checkpoint(
        self, offset: int, cleaned: Sequence[tuple[LogSegment, int]]
    ) -> bool:
        """Move the cleaner checkpoint to `offset`, unless the last segments cleaned (with
        their sizes) changed meanwhile: a truncation there must win (it lowered it)."""
        with self._lock:
            if self._closed or self._find_unchanged(cleaned) is None:
                return False
            self.cleaner_checkpoint = offset
            return True

    def _find_unchanged(self, old: Sequence[tuple[LogSegment, int]]) -> int | None:
        """Where the consecutive segments `old` are in the log, if still there at these sizes."""
        first = old[0][0]
        i = next((k for k, seg in enumerate(self._segments) if seg is first), None)
        if i is None:
            return None
        current = self._segments[i : i + len(old)]
        if len(current) != len(old) or any(
            a is not b or a.size != size for a, (b, size) in zip(current, old, strict=False)
        ):
            return None
        return i
