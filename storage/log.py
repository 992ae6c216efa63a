"""One partition's log: a directory `<topic>-<partition>` of segments.

Append validated batches (as leader: assign offsets and stamp the leader epoch in
place; as follower: keep the leader's offsets), read slices bounded by a max offset
(the HW), look up by timestamp, truncate, move the log start, apply retention, flush,
and recover a torn tail after a crash. Mirrors Kafka's UnifiedLog/LocalLog. The
transaction side (aborted-transaction indexes, producer snapshots) is storage/log_txn.py;
retention and compaction's segment swap are storage/log_cleanup.py; truncation and the log
start's moves are storage/log_truncation.py.

Thread safety: every public method takes the log's lock, except that `flush` does its
fsyncs outside it so a background flush never stalls appends.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from common.clock import SYSTEM_CLOCK
from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.config import LogConfig
from storage.epoch_cache import LeaderEpochCache
from storage.log_cleanup import LogCleanupMixin
from storage.log_loader import LoadedLog, load_log
from storage.log_truncation import LogTruncationMixin
from storage.log_txn import TxnLogMixin
from storage.log_types import (
    FetchDataInfo,
    LogAppendInfo,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
    RecordTooLargeError,
    TimestampAndOffset,
    UnexpectedAppendOffsetError,
    parse_topic_partition,
)
from storage.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    CheckedBatch,
    RecordBatchView,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_records,
)
from storage.records import decode_batch
from storage.segment import (
    MAX_RELATIVE_OFFSET,
    AppendedBatch,
    LogSegment,
)

log = logging.getLogger(__name__)

# What a follower's log keeps in the page cache behind its end (Log.follower_page_cache_bytes).
FOLLOWER_PAGE_CACHE_BYTES = 32 << 20


class Log(LogTruncationMixin, LogCleanupMixin, TxnLogMixin):
    def __init__(
        self,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        clock: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
        fresh: bool = False,
    ) -> None:
        """`fresh`: the caller has just created `directory` (empty): nothing to recover,
        and the leader epoch checkpoint's first write needs no fsync (see
        LeaderEpochCache.lazy_first_flush)."""
        self.dir = Path(directory)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config or LogConfig()
        self._clock = clock
        self._lock = threading.RLock()
        self.dir.mkdir(parents=True, exist_ok=True)
        self.leader_epoch_cache = LeaderEpochCache(self.dir / LEADER_EPOCH_CHECKPOINT)
        if fresh:
            # Nothing to rebuild in an empty log, so no write of an empty cache now: the
            # first write (the first epoch assigned) is the one without fsync.
            self.leader_epoch_cache.needs_rebuild = False
            self.leader_epoch_cache.lazy_first_flush = True
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self.on_roll: Callable[[int], None] | None = None  # see TxnLogMixin.on_roll
        # Page cache a follower's appends keep behind the log end (0: all, as the kernel
        # likes): see LogSegment.drop_behind. Nobody reads a follower's log meanwhile, and
        # recycling its pages spares the first-touch cost of fresh ones (issue 16).
        self.follower_page_cache_bytes = FOLLOWER_PAGE_CACHE_BYTES
        # Set by the partition layer for the log cleaner (storage/cleaner.py plan_cleaning),
        # which calls them from its worker thread: they must not iterate state the event
        # loop mutates (return a value kept up to date, or a copy made in one C call).
        # The first unstable offset (the LEO when no transaction is open): the cleaner's
        # bound. None: not known, and the cleaner leaves transactional batches alone.
        self.first_unstable_offset_fn: Callable[[], int] | None = None
        # Active producers: producer id -> (last data offset or -1, epoch). None: unknown.
        self.active_producers_fn: Callable[[], Mapping[int, tuple[int, int]]] | None = None
        if fresh:  # an empty directory: no files to scan, swap, recover or rebuild
            start = max(0, recovery_point)
            loaded = LoadedLog([self._new_segment(start)], start, start)
        else:
            loaded = load_log(
                self.dir,
                self._new_segment,
                recovery_point=recovery_point,
                had_clean_shutdown=had_clean_shutdown,
                max_batch_size=self.config.max_message_bytes + 1024 * 1024,
                epoch_cache=self.leader_epoch_cache,
            )
        self._segments = loaded.segments
        self._bases = [seg.base_offset for seg in self._segments]
        self._leo = loaded.log_end_offset
        self.recovery_point = loaded.recovery_point
        self.log_start_offset = min(
            max(log_start_offset, self._segments[0].base_offset), self.log_end_offset
        )
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        # Recovery may have cut the log below a snapshot; one below the start is useless.
        self._drop_unbacked_snapshots()
        # The cleaner's first dirty offset (`cleaner-offset-checkpoint`): below it the log was
        # compacted. None: never cleaned. The LogManager loads, moves and writes it.
        self.cleaner_checkpoint: int | None = None

    # -- loading and recovery ----------------------------------------------------------------

    def _new_segment(self, base_offset: int, suffix: str = "") -> LogSegment:
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self._clock(),
            suffix=suffix,
        )

    # -- properties --------------------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def latest_epoch(self) -> int:
        return self.leader_epoch_cache.latest_epoch

    # -- appends -----------------------------------------------------------------------------

    def append_as_leader(
        self, records: bytes | bytearray | memoryview, leader_epoch: int
    ) -> LogAppendInfo:
        """Check every batch (`validate_records`), then `append_checked_as_leader`: the
        entry point for callers holding raw bytes (tools, tests, benchmarks)."""
        with self._lock:
            self._check_open()
            return self.append_checked_as_leader(validate_records(records), leader_epoch)

    def append_checked_as_leader(
        self, batches: Sequence[CheckedBatch], leader_epoch: int
    ) -> LogAppendInfo:
        """Assign offsets from the LEO, stamp `leader_epoch`, append.

        `batches` are what `validate_records` returned for one buffer (so they tile it
        from its start); they are not parsed or checked again here. A writable buffer is
        patched in place. A read-only one is not copied: each batch's 61-byte header is
        copied and patched, and `os.writev` sends it with the payload.
        """
        with self._lock:
            self._check_open()
            total = self._check_sizes(batches, leader=True)
            now = self._clock()
            append_time = now if self.config.log_append_time else -1
            mv = memoryview(batches[0].buf)
            writable = not mv.readonly
            parts: list[bytearray | memoryview] = [mv[:total]] if writable else []
            batches_out = []
            offset = first = self._leo
            for v in batches:
                pos = v.pos
                _b, length, _e, _m, _c, _a, last_delta, _bt, max_ts, *_rest = v.fields
                size = length + LOG_OVERHEAD
                head, at = (mv, pos) if writable else (bytearray(mv[pos : pos + HEADER_SIZE]), 0)
                set_base_offset(head, at, offset)
                set_partition_leader_epoch(head, at, leader_epoch)
                if append_time >= 0:
                    payload = None if writable else mv[pos + HEADER_SIZE : pos + size]
                    set_log_append_time(head, at, append_time, payload)
                    max_ts = append_time
                if not writable:
                    parts.append(head)
                    parts.append(mv[pos + HEADER_SIZE : pos + size])
                batches_out.append(AppendedBatch(pos, offset + last_delta, max_ts, size))
                offset += last_delta + 1
            if leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first)
            return self._append(parts, total, first, batches_out, now, append_time)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Append the leader's batches as they are (no copy); a partial trailing batch is
        dropped. Returns None when there was no complete batch.

        As in Kafka, `max.message.bytes` is not applied: the leader accepted the batch.
        """
        with self._lock:
            self._check_open()
            if not len(records):
                return None
            # A compacting leader sends batches with offset gaps between and inside them.
            views = validate_records(records, allow_partial_tail=True, compacted=True)
            if not views:
                return None
            total = self._check_sizes(views, leader=False)
            expected = self._leo
            batches = []
            for v in views:
                base, length, epoch, _m, _c, _a, last_delta, _bt, max_ts, *_rest = v.fields
                if base < expected:
                    raise UnexpectedAppendOffsetError(
                        f"batch at offset {base} does not continue the log at {expected}"
                    )
                expected = base + last_delta + 1
                if epoch > self.leader_epoch_cache.latest_epoch:
                    self.leader_epoch_cache.assign(epoch, base)
                batches.append(AppendedBatch(v.pos, expected - 1, max_ts, length + LOG_OVERHEAD))
            first = views[0].fields[0]
            info = self._append(
                [memoryview(records)[:total]], total, first, batches, self._clock(), -1
            )
            if self.follower_page_cache_bytes:
                self._segments[-1].drop_behind(self.follower_page_cache_bytes)
            return info

    def _check_sizes(self, views: Sequence[CheckedBatch], leader: bool) -> int:
        total = 0
        limit = self.config.max_message_bytes
        for v in views:
            size = v.fields[1] + LOG_OVERHEAD  # batchLength
            if leader and size > limit:
                raise RecordTooLargeError(
                    f"batch of {size} bytes exceeds max.message.bytes {limit}"
                )
            total += size
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{total} bytes of batches exceed segment.bytes {self.config.segment_bytes}"
            )
        return total

    def _append(
        self,
        parts: list[bytearray | memoryview],
        total: int,
        first: int,
        batches: list[AppendedBatch],
        now: int,
        append_time: int,
    ) -> LogAppendInfo:
        last = batches[-1].last_offset
        max_ts, offset_of_max = -1, first
        for b in batches:
            if b.max_timestamp > max_ts:
                max_ts, offset_of_max = b.max_timestamp, b.last_offset
        segment = self._maybe_roll(total, len(batches), first, last, max_ts, now)
        segment.append(parts, total, batches)
        self._leo = last + 1
        self._unflushed_messages += last - first + 1
        if self._unflushed_messages >= self.config.flush_messages:
            self.flush()
        return LogAppendInfo(
            first_offset=first,
            last_offset=last,
            max_timestamp=max_ts,
            offset_of_max_timestamp=offset_of_max,
            log_append_time_ms=append_time,
            append_time_ms=now,
            log_start_offset=self.log_start_offset,
            num_batches=len(batches),
            valid_bytes=total,
        )

    def _maybe_roll(
        self, size: int, n_batches: int, first: int, last: int, max_ts: int, now: int
    ) -> LogSegment:
        seg = self._segments[-1]
        if last - seg.base_offset > MAX_RELATIVE_OFFSET:
            # Offsets relative to the segment must fit an int32: only here may a segment
            # start past the LEO (a follower's huge gap), breaking contiguity.
            return self.roll(first)
        if seg.size == 0:
            return seg  # an empty active segment takes a batch beyond its base (a gap)
        first_ts = seg.first_batch_timestamp()
        if first_ts is not None and first_ts >= 0:
            waited = max_ts - first_ts
        else:
            waited = now - seg.created_ms
        if (
            seg.size + size > self.config.segment_bytes
            or waited > self.config.segment_ms
            # Room for an index entry per batch of this append, as Kafka never overfills.
            or seg.offset_index.entries + n_batches > seg.offset_index.max_entries
            or seg.time_index.entries + n_batches > seg.time_index.max_entries
        ):
            # Roll at the LEO, not at the batch's base: segments stay contiguous (each one
            # starts where the previous ends), which lets recovery tell a hole from a gap.
            seg = self.roll(self._leo)
            if last - seg.base_offset > MAX_RELATIVE_OFFSET:
                return self.roll(first)
        return seg

    def roll(self, new_base: int | None = None) -> LogSegment:
        """Start a new active segment at `new_base` (the LEO by default)."""
        with self._lock:
            base = self._leo if new_base is None else new_base
            old = self._segments[-1]
            if old.size == 0 and old.base_offset == base:
                return old
            if old.size == 0:
                old.close()
                old.delete()
                self._segments.pop()
                self._bases.pop()
            else:
                old.time_index.maybe_append(old.max_timestamp_so_far, old.offset_of_max_timestamp)
                old.offset_index.flush(fsync=False)
                old.time_index.flush(fsync=False)
            seg = self._new_segment(base)
            self._segments.append(seg)
            self._bases.append(base)
            self._rolled(base)
            return seg

    # -- reads -------------------------------------------------------------------------------

    def read(
        self,
        start_offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_message: bool = True,
    ) -> FetchDataInfo:
        """Bytes from the batch holding `start_offset`, never past `max_offset` (e.g. HW).

        Raises OffsetOutOfRangeError outside [log start offset, LEO]. A read never spans
        two segments; like Kafka's, it may end in a partial batch, except that with
        `min_one_message` the first batch is whole even when larger than `max_bytes`.
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        with self._lock:
            self._check_open()
            if start_offset < self.log_start_offset or start_offset > self._leo:
                raise OffsetOutOfRangeError(
                    f"offset {start_offset} is outside [{self.log_start_offset}, {self._leo}] "
                    f"of {self.dir.name}"
                )
            if start_offset == self._leo or (max_offset is not None and start_offset >= max_offset):
                return FetchDataInfo(None)
            # Offsets below the first segment (a follower's gap) read from the first one.
            i = max(0, bisect.bisect_right(self._bases, start_offset) - 1)
            while i < len(self._segments):
                seg = self._segments[i]
                max_position = None
                if max_offset is not None and (
                    i + 1 == len(self._segments) or self._bases[i + 1] > max_offset
                ):
                    bound = seg.translate_offset(max_offset)
                    max_position = bound.position if bound else None
                found = seg.read(start_offset, max_bytes, max_position, min_one_message)
                if found is not None:
                    slice_, first = found
                    if slice_.size == 0:
                        return FetchDataInfo(None)
                    return FetchDataInfo(slice_, first.base_offset)
                i += 1
            return FetchDataInfo(None)

    def offset_for_timestamp(self, timestamp: int) -> TimestampAndOffset | None:
        """The first record with timestamp >= `timestamp` (ListOffsets by time), or None."""
        with self._lock:
            self._check_open()
            for seg in self._segments:
                if seg.max_timestamp_so_far < timestamp:
                    continue
                found = seg.find_offset_by_timestamp(timestamp)
                while found is not None:
                    bp, _ = found
                    batch = decode_batch(RecordBatchView(seg.read_batch_bytes(bp)))
                    for rec in batch.records:
                        ts = rec.timestamp if rec.timestamp is not None else -1
                        if ts >= timestamp and rec.offset >= self.log_start_offset:
                            return TimestampAndOffset(ts, rec.offset, batch.partition_leader_epoch)
                    nxt = seg.translate_offset(bp.last_offset + 1, bp.position + bp.size)
                    found = (nxt, nxt.position) if nxt else None
            return None

    def max_timestamp_and_offset(self) -> TimestampAndOffset | None:
        """The record with the largest timestamp (ListOffsets MAX_TIMESTAMP, KIP-734)."""
        with self._lock:
            self._check_open()
            best = max(self._segments, key=lambda s: s.max_timestamp_so_far)
            if best.max_timestamp_so_far < 0:
                return None
            return self.offset_for_timestamp(best.max_timestamp_so_far)

    # -- durability and lifecycle ------------------------------------------------------------

    def flush(self, offset: int | None = None) -> None:
        """Make every batch below `offset` (default: the LEO) durable; moves the recovery point.

        The fsyncs run outside the lock so that a background flush never blocks appends.
        """
        with self._lock:
            self._check_open()
            upto = self._leo if offset is None else min(offset, self._leo)
            if upto <= self.recovery_point and offset is not None:
                return
            i = max(0, bisect.bisect_right(self._bases, self.recovery_point) - 1)
            todo = [s for s in self._segments[i:] if s.base_offset < upto or s.size == 0]
            for seg in todo:
                seg.write_indexes()
            self._unflushed_messages = 0
            self._last_flush_ms = self._clock()
        for seg in todo:
            seg.fsync()
        with self._lock:
            self.recovery_point = max(self.recovery_point, min(upto, self._leo))

    def flush_if_due(self) -> None:
        """The `flush.ms` policy, called periodically by the LogManager."""
        if self._clock() - self._last_flush_ms >= self.config.flush_ms and self._unflushed_messages:
            self.flush()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"log {self.dir.name} is closed")

    def close(self) -> None:
        """Write the indexes (a clean shutdown); data reaches disk via flush(), not here."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            active = self._segments[-1]
            if active.size:
                active.time_index.maybe_append(
                    active.max_timestamp_so_far, active.offset_of_max_timestamp
                )
            for seg in self._segments:
                seg.close()

    def delete(self) -> None:
        """Remove the whole partition directory."""
        with self._lock:
            self.close()
            for seg in self._segments:
                seg.delete()
            for path in self.dir.iterdir():
                path.unlink(missing_ok=True)
            os.rmdir(self.dir)

    def __repr__(self) -> str:
        return (
            f"Log({self.dir.name}, start={self.log_start_offset}, leo={self._leo}, "
            f"segments={len(self._segments)})"
        )
