"""Log compaction (cleanup.policy=compact): Kafka's LogCleaner, for one `Log` at a time.

A cleaning pass, as in Kafka:
1. Plan (`plan_cleaning`, cheap): the cleanable range runs from the first segment to the
   first uncleanable offset, the base of the segment that holds the lowest of: the active
   segment's base, the caller's upper bound (the partition's high watermark) and the base
   of the first dirty segment younger than min.compaction.lag.ms. Like Kafka, we round
   down to a segment base, so only whole closed segments wholly below the bound are read.
   The dirty part starts at the cleaner checkpoint (the first dirty offset).
2. Offset map: key -> latest offset, built from the dirty part.
3. Rewrite the whole range, a group of adjacent segments at a time, into `.cleaned`
   segments. A record stays when no later record has its key; a tombstone (null value)
   also needs its delete horizon unpassed; records without a key go (Kafka refuses them at
   produce time). A batch that keeps every record is copied byte for byte; one that lost
   records is rebuilt (`rebuild_batch`: its offsets, producer fields, epoch and codec stay);
   one that lost all its records goes. Transactions follow Kafka's rules (see
   storage/cleaner_txn.py): batches of aborted transactions go, committed ones are
   compacted like any other, and a marker goes once its transaction has no data left and
   its delete horizon has passed.
4. Swap each group in with `Log.replace_segments` (crash safe: `.cleaned` -> `.swap` ->
   final names; the loader completes a committed swap).

Tombstones follow KIP-534: the first pass that keeps a tombstone stamps its batch with a
delete horizon (now + delete.retention.ms); a pass after the horizon removes it. So a
tombstone survives at least delete.retention.ms after the cleaner first passed it.

Contiguity: recovery tells a lost tail from a gap because each segment ends where the next
begins (storage/log_loader.py). A group therefore closes only where its output ends at its
last input segment's end, i.e. where that segment's final batch kept a record (a kept batch
keeps its last offset). Otherwise the next segment joins the group. The final batch of the
whole range, or one that no group may grow past (int32 offset and position limits), is
kept whole if cleaning would drop all of it: only expired tombstones and keyless records
can be in it, and they go in a later pass.

Threads: steps 2 and 3 read only closed segments, through descriptors of their own, and
write new files, so they may run in a worker thread while the log takes appends and reads.
`Log.replace_segments` takes the log's lock and refuses a group whose segments changed
meanwhile (truncated, deleted); the pass then stops and the checkpoint stays.

Transactions: the cleanable range must end at or below the first unstable offset (the
first offset of the oldest open transaction), or an open transaction's records would be
taken as committed. The caller gives it (`plan_cleaning`'s `first_unstable_offset`, or
`Log.first_unstable_offset_fn`, set by the partition layer); without either, the cleaner
does not know where transactions stand and keeps transactional and control batches whole
and their keys out of the offset map, as before transactions existed.

Simplified from Kafka: the offset map holds whole keys (no hashing, no size cap); a
producer whose batches all went is forgotten (Kafka keeps an empty batch, or the last
marker, of each active producer; the partition layer's producer snapshots keep that
state here); a batch kept for contiguity (below) is kept whole, never emptied.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from storage.cleaner_filter import CleanerStats, RecordFilter
from storage.cleaner_txn import CleanerTxnState
from storage.log_loader import CLEANED_SUFFIX
from storage.record_batch import (
    BATCH_LENGTH,
    HEADER_SIZE,
    LOG_OVERHEAD,
    CorruptRecordError,
    RecordBatchView,
    validate_batch,
)
from storage.records import decode_batch
from storage.segment import MAX_RELATIVE_OFFSET, AppendedBatch, LogSegment

if TYPE_CHECKING:
    from storage.log import Log

MAX_SEGMENT_BYTES = 2**31 - 1  # offset index positions are int32
_READ_CHUNK = 1 << 20
_WRITE_CHUNK = 1 << 20
_I32 = struct.Struct(">i")
SegmentRange = tuple[LogSegment, int, int]  # segment, size, end (next base offset)


@dataclass(frozen=True, slots=True)
class LogToClean:
    """What a pass over one log would clean, and whether it is worth it (Kafka's LogToClean)."""

    log: Log
    segments: tuple[SegmentRange, ...]  # the cleanable range, oldest first
    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    max_compaction_delay_ms: int  # > 0: max.compaction.lag.ms says clean now
    txn_aware: bool = False  # the range is bounded by the first unstable offset

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0

    @property
    def needs_cleaning(self) -> bool:
        # Kafka's rule (LogCleanerManager): strictly above min.cleanable.dirty.ratio, or a
        # dirty record older than max.compaction.lag.ms.
        if self.cleanable_bytes <= 0:
            return False
        ratio = self.log.config.min_cleanable_dirty_ratio
        return self.max_compaction_delay_ms > 0 or self.cleanable_ratio > ratio


def plan_cleaning(
    log: Log,
    first_dirty_offset: int | None,
    upper_bound: int | None,
    now_ms: int,
    first_unstable_offset: int | None = None,
) -> LogToClean:
    """The cleanable range of `log` (Kafka's cleanableOffsets and calculateCleanableBytes).

    `first_dirty_offset`: the cleaner checkpoint (None, or outside the log: the log start
    offset). `upper_bound`: nothing at or above it is cleaned (the high watermark).
    `first_unstable_offset`: the first offset of the oldest open transaction, or the log
    end offset when none is open; nothing at or above it is cleaned either (Kafka bounds
    the cleaner by the last stable offset). None: asks `log.first_unstable_offset_fn`;
    when that is None too, transactional batches are left alone (see the module notes).
    """
    if first_unstable_offset is None and log.first_unstable_offset_fn is not None:
        first_unstable_offset = log.first_unstable_offset_fn()
    snapshot = log.segments_snapshot()
    closed = snapshot[:-1]  # the active segment is never cleaned
    start, leo = log.log_start_offset, snapshot[-1][2]
    dirty = first_dirty_offset
    if dirty is None or not start <= dirty <= leo:
        dirty = start
    bound = snapshot[-1][0].base_offset
    if upper_bound is not None:
        bound = min(bound, upper_bound)
    if first_unstable_offset is not None:
        bound = min(bound, first_unstable_offset)
    lag = log.config.min_compaction_lag_ms
    if lag > 0:
        for seg, _size, end in closed:
            if end > dirty and seg.max_timestamp_so_far > now_ms - lag:
                bound = min(bound, seg.base_offset)
                break
    segments = tuple(s for s in closed if s[2] <= bound)
    first_uncleanable = segments[-1][2] if segments else snapshot[0][0].base_offset
    clean = sum(size for _seg, size, end in segments if end <= dirty)
    cleanable = sum(size for _seg, size, end in segments if end > dirty)
    return LogToClean(
        log,
        segments,
        dirty,
        first_uncleanable,
        clean,
        cleanable,
        _max_compaction_delay(log, closed, dirty, now_ms),
        txn_aware=first_unstable_offset is not None,
    )


def _max_compaction_delay(log: Log, closed: list[SegmentRange], dirty: int, now_ms: int) -> int:
    """How long past max.compaction.lag.ms the oldest dirty record is (KIP-354); 0: not."""
    clean_until = now_ms - max(log.config.max_compaction_lag_ms, 0)
    stamps = []
    for seg, _size, end in closed:
        if end > dirty:
            try:
                ts = seg.first_batch_timestamp() or -1
            except (OSError, ValueError):  # closed meanwhile (deleted): not dirty any more
                continue
            if ts > 0:
                stamps.append(ts)
    earliest = min(stamps, default=None)
    return clean_until - earliest if earliest is not None and earliest < clean_until else 0


def clean_log(
    to_clean: LogToClean, now_ms: int, should_stop: Callable[[], bool] = lambda: False
) -> CleanerStats:
    """Run one pass (steps 2 to 4 above). Thread-safe; see the module's notes.

    When every group is in place the log's `cleaner_checkpoint` moves to the first
    uncleanable offset. `should_stop` is polled between segments; stopping keeps what was
    swapped so far, which is a correctly cleaned prefix.
    """
    lg = to_clean.log
    dirty = to_clean.first_dirty_offset
    stats = CleanerStats((lg.topic, lg.partition), dirty, dirty)
    try:
        readers = _Readers(to_clean.segments)
    except (OSError, ValueError):  # a segment was closed meanwhile: the log changed
        return stats
    try:
        offset_map = _build_offset_map(to_clean, readers)
        if offset_map is None or should_stop():
            return stats
        last_group = _clean_segments(to_clean, readers, offset_map, now_ms, stats, should_stop)
    except _LogChanged:
        return stats
    finally:
        readers.close()
    end = to_clean.first_uncleanable_offset
    if last_group is not None and lg.set_cleaner_checkpoint(end, last_group):
        stats.end_offset = end
        stats.completed = True
    return stats


class _LogChanged(Exception):
    """A segment being read was truncated meanwhile: the pass stops, as a refused swap does."""


class _Readers:
    """A descriptor of our own for each segment to read: a segment deleted or replaced
    meanwhile keeps its bytes for us until we close it."""

    def __init__(self, segments: tuple[SegmentRange, ...]) -> None:
        self.fds: dict[int, int] = {}
        try:
            for seg, _size, _end in segments:
                self.fds[id(seg)] = os.dup(seg.file.fileno())
        except BaseException:
            self.close()
            raise

    def mtime(self, seg: LogSegment) -> float:
        return os.fstat(self.fds[id(seg)]).st_mtime

    def batches(self, seg: LogSegment, size: int) -> Iterator[tuple[RecordBatchView, bool]]:
        """(batch, is it the last) for each batch in the first `size` bytes, CRC checked: a
        corrupt batch stops the pass rather than being copied under a fresh CRC."""
        fd = self.fds[id(seg)]
        buf, buf_pos, pos = b"", 0, 0
        while pos < size:
            rel = pos - buf_pos
            if len(buf) - rel < LOG_OVERHEAD:
                buf = buf[rel:] + os.pread(fd, _READ_CHUNK, buf_pos + len(buf))
                buf_pos, rel = pos, 0
            if len(buf) - rel < LOG_OVERHEAD:
                self._short(fd, seg, size, pos)
            need = _I32.unpack_from(buf, rel + BATCH_LENGTH)[0] + LOG_OVERHEAD
            if need < HEADER_SIZE or pos + need > size:  # never read a bogus length's worth
                raise CorruptRecordError(f"{seg.log_path}: bad batch length at {pos}")
            if len(buf) - rel < need:
                buf = buf[rel:] + os.pread(fd, max(_READ_CHUNK, need), buf_pos + len(buf))
                buf_pos, rel = pos, 0
                if len(buf) < need:
                    self._short(fd, seg, size, pos)
            view = validate_batch(buf, rel, min(len(buf), rel + need), compacted=True)
            pos += need
            yield view, pos >= size

    @staticmethod
    def _short(fd: int, seg: LogSegment, size: int, pos: int) -> None:
        if os.fstat(fd).st_size < size:
            raise _LogChanged(f"{seg.log_path} was truncated under the cleaner")
        raise CorruptRecordError(f"{seg.log_path} ends inside a batch at {pos}")

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


def _build_offset_map(to_clean: LogToClean, readers: _Readers) -> dict[bytes, int] | None:
    """Key -> latest offset over the dirty segments (None: nothing dirty to map)."""
    offset_map: dict[bytes, int] = {}
    dirty = [s for s in to_clean.segments if s[2] > to_clean.first_dirty_offset]
    if not dirty:
        return None
    txns = CleanerTxnState() if to_clean.txn_aware else None
    if txns is not None:
        txns.add_aborted(_aborted_txns(to_clean.log, dirty[0][0].base_offset, dirty[-1][2]))
    for seg, size, _end in dirty:
        for view, _last in readers.batches(seg, size):
            if txns is None:
                if view.is_control or view.is_transactional:
                    continue  # unbounded: committed, aborted and open look alike
            elif view.is_control:
                txns.on_control(view)
                continue
            elif txns.on_batch(view):
                continue  # aborted: its keys must not hide older values
            for rec in decode_batch(view).records:
                if rec.key is not None:
                    offset_map[rec.key] = rec.offset
    return offset_map


def _aborted_txns(lg: Log, start: int, end: int) -> list:
    """The aborted transactions overlapping [start, end) (a closed log: it changed)."""
    try:
        return lg.collect_aborted_txns(start, end)
    except RuntimeError as exc:
        raise _LogChanged(str(exc)) from exc


@dataclass(slots=True)
class _Group:
    """One output segment being written (`.cleaned`) and the input segments it replaces."""

    segment: LogSegment
    end: int  # the offset after the last batch written
    old: list[tuple[LogSegment, int]] = field(default_factory=list)
    mtime: float = 0.0
    changed: bool = False
    parts: list[bytes] = field(default_factory=list)
    pending: list[AppendedBatch] = field(default_factory=list)
    pending_bytes: int = 0

    @property
    def size(self) -> int:
        return self.segment.size + self.pending_bytes

    def add(self, data: bytes, view: RecordBatchView) -> None:
        max_ts = RecordBatchView(data).max_timestamp  # a rebuilt batch's may be lower
        self.pending.append(AppendedBatch(self.pending_bytes, view.last_offset, max_ts, len(data)))
        self.parts.append(data)
        self.pending_bytes += len(data)
        self.end = view.last_offset + 1
        if self.pending_bytes >= _WRITE_CHUNK:
            self.write()

    def write(self) -> None:
        if self.parts:
            parts: list[bytearray | memoryview] = [memoryview(p) for p in self.parts]
            self.segment.append(parts, self.pending_bytes, self.pending)
            self.parts, self.pending, self.pending_bytes = [], [], 0

    def finish(self) -> None:
        """Whole and durable before a swap can name it."""
        self.write()
        seg = self.segment
        # As a roll does: the time index ends with the segment's max timestamp.
        seg.time_index.maybe_append(seg.max_timestamp_so_far, seg.offset_of_max_timestamp)
        seg.flush()
        # Kafka keeps the newest last-modified time of the segments a cleaned one replaces.
        os.utime(seg.log_path, (self.mtime, self.mtime))

    def discard(self) -> None:
        self.segment.close()
        self.segment.delete()


def _new_group(log: Log, base: int, now_ms: int) -> _Group:
    for suffix in (".log", ".index", ".timeindex", ".txnindex"):  # a pass that died left these
        (log.dir / f"{base:020d}{suffix}{CLEANED_SUFFIX}").unlink(missing_ok=True)
    cfg = log.config
    seg = LogSegment(
        log.dir,
        base,
        index_interval_bytes=cfg.index_interval_bytes,
        max_index_size=cfg.segment_index_bytes,
        created_ms=now_ms,
        suffix=CLEANED_SUFFIX,
    )
    return _Group(seg, end=base)


def _clean_segments(
    to_clean: LogToClean,
    readers: _Readers,
    offset_map: dict[bytes, int],
    now_ms: int,
    stats: CleanerStats,
    should_stop: Callable[[], bool],
) -> list[tuple[LogSegment, int]] | None:
    """Rewrite and swap the range group by group. Returns the last group's segments as
    the log now holds them (for the checkpoint), None when the pass stopped early."""
    lg = to_clean.log
    segments = to_clean.segments
    txns = CleanerTxnState() if to_clean.txn_aware else None
    keep = RecordFilter(offset_map, to_clean.first_uncleanable_offset, now_ms, lg, stats, txns)
    group: _Group | None = None
    last: list[tuple[LogSegment, int]] | None = None
    try:
        for j, (seg, size, seg_end) in enumerate(segments):
            if should_stop():
                return None
            if group is None:
                group = _new_group(lg, seg.base_offset, now_ms)
            if txns is not None:
                # Kept aborts are indexed in the segment that replaces this one; from the
                # whole segment range, as Kafka, since the new index is built from scratch.
                txns.cleaned_index = group.segment.txn_index
                txns.add_aborted(_aborted_txns(lg, seg.base_offset, seg_end))
            group.old.append((seg, size))
            stats.segments_before += 1
            group.mtime = max(group.mtime, readers.mtime(seg))
            nxt = segments[j + 1] if j + 1 < len(segments) else None
            # May this segment's final batch vanish? Only if the group may grow over the
            # next segment (see the module's notes on contiguity).
            may_grow = nxt is not None and (
                nxt[2] - 1 - group.segment.base_offset <= MAX_RELATIVE_OFFSET
                and group.size + size + nxt[1] <= MAX_SEGMENT_BYTES
            )
            input_end = group.end
            for view, is_last in readers.batches(seg, size):
                input_end = view.last_offset + 1
                stats.bytes_read += view.size
                data, changed = keep(view, must_keep=is_last and not may_grow)
                group.changed |= changed
                if data is not None:
                    group.add(data, view)
            if group.end != input_end:  # this segment's final batch went
                if may_grow:
                    continue  # the next segment joins the group
                return None  # only an empty segment gets here: leave the rest alone
            if may_grow and group.size + segments[j + 1][1] <= lg.config.segment_bytes:
                continue  # Kafka groups adjacent segments up to segment.bytes
            done, group = group, None
            last = _swap(lg, done, stats)
            if last is None:
                return None
    finally:
        if group is not None:  # stopped or failed before its swap
            group.discard()
    return last


def _swap(lg: Log, group: _Group, stats: CleanerStats) -> list[tuple[LogSegment, int]] | None:
    """Put the group in place; returns what the log now holds there (None: refused)."""
    if not group.changed and len(group.old) == 1:
        group.discard()  # nothing to gain: the original stays, byte for byte
        stats.bytes_after += group.old[0][1]
        stats.segments_after += 1
        return group.old
    try:
        group.finish()
    except BaseException:
        group.discard()
        raise
    # From here the files belong to the swap: a failure inside it is finished by the loader.
    if not lg.replace_segments(group.old, group.segment):
        group.discard()
        return None
    stats.bytes_after += group.segment.size
    stats.segments_after += 1
    return [(group.segment, group.segment.size)]
