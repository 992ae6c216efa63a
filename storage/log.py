"""One partition's log: a directory `<topic>-<partition>` of segments.

Append validated batches (as leader: assign offsets and stamp the leader epoch in
place; as follower: keep the leader's offsets), read slices bounded by a max offset
(the HW), look up by timestamp, truncate, move the log start, apply retention, flush,
and recover a torn tail after a crash. Mirrors Kafka's UnifiedLog/LocalLog.

Thread safety: every public method takes the log's lock, except that `flush` does its
fsyncs outside it so a background flush never stalls appends.
"""

from __future__ import annotations

import bisect
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT
from storage.config import LogConfig
from storage.epoch_cache import LeaderEpochCache
from storage.record_batch import (
    RecordBatchError,
    RecordBatchView,
    set_base_offset,
    set_log_append_time,
    set_partition_leader_epoch,
    validate_records,
)
from storage.records import decode_batch
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_RELATIVE_OFFSET,
    TIME_INDEX_SUFFIX,
    AppendedBatch,
    FileSlice,
    LogSegment,
    check_index_or_none,
)

log = logging.getLogger(__name__)


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class OffsetOutOfRangeError(Exception):
    error_code = 1  # OFFSET_OUT_OF_RANGE


class RecordTooLargeError(RecordBatchError):
    error_code = 10  # MESSAGE_TOO_LARGE


class RecordListTooLargeError(RecordBatchError):
    error_code = 18  # RECORD_LIST_TOO_LARGE


class UnexpectedAppendOffsetError(RecordBatchError):
    """A follower append that does not continue the log (its offsets are not ours)."""


def parse_topic_partition(name: str) -> tuple[str, int]:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless message.timestamp.type=LogAppendTime
    append_time_ms: int  # when the append happened (wall clock)
    log_start_offset: int
    num_batches: int
    valid_bytes: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Bytes for a fetch: a file slice from the batch holding the start offset."""

    records: FileSlice | None
    first_batch_offset: int = -1

    @property
    def size(self) -> int:
        return self.records.size if self.records else 0

    def read(self) -> bytes:
        return self.records.read() if self.records else b""


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int


class Log:
    def __init__(
        self,
        directory: Path | str,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        had_clean_shutdown: bool = False,
        clock: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.dir = Path(directory)
        self.topic, self.partition = parse_topic_partition(self.dir.name)
        self.config = config or LogConfig()
        self._clock = clock
        self._lock = threading.RLock()
        self.dir.mkdir(parents=True, exist_ok=True)
        epoch_file = self.dir / LEADER_EPOCH_CHECKPOINT
        epoch_file_present = epoch_file.exists()
        self.leader_epoch_cache = LeaderEpochCache(epoch_file)
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        self._unflushed_messages = 0
        self._last_flush_ms = clock()
        self.recovery_point = recovery_point
        self._load(had_clean_shutdown, epoch_file_present)
        self.log_start_offset = min(
            max(log_start_offset, self._segments[0].base_offset), self.log_end_offset
        )
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)

    # -- loading and recovery ----------------------------------------------------------------

    def _new_segment(self, base_offset: int) -> LogSegment:
        return LogSegment(
            self.dir,
            base_offset,
            index_interval_bytes=self.config.index_interval_bytes,
            max_index_size=self.config.segment_index_bytes,
            created_ms=self._clock(),
        )

    def _load(self, had_clean_shutdown: bool, epoch_file_present: bool) -> None:
        bases = []
        for path in self.dir.iterdir():
            name = path.name
            if name.endswith((".tmp", ".deleted", ".cleaned", ".swap")):
                path.unlink(missing_ok=True)  # leftovers of an interrupted operation
            elif name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
                bases.append(int(name[: -len(LOG_SUFFIX)]))
        for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX):  # indexes whose log is gone
            for path in self.dir.glob(f"*{suffix}"):
                stem = path.name[: -len(suffix)]
                if stem.isdigit() and int(stem) not in bases:
                    path.unlink(missing_ok=True)
        for base in sorted(bases):
            self._segments.append(self._new_segment(base))
        if not self._segments:
            self._segments.append(self._new_segment(max(0, self.recovery_point)))
        self._bases = [s.base_offset for s in self._segments]

        rebuild_epochs = not epoch_file_present or self.leader_epoch_cache.is_empty()
        recovered_from = None
        for i, seg in enumerate(self._segments):
            next_base = self._bases[i + 1] if i + 1 < len(self._bases) else None
            unflushed = next_base is None or next_base > self.recovery_point
            needs_recovery = not had_clean_shutdown and unflushed
            if not needs_recovery:
                problem = check_index_or_none(seg, full=unflushed)
                if problem is not None:
                    log.warning("rebuilding index", extra={"segment": str(seg.log_path)})
                    needs_recovery = True
            if needs_recovery:
                recovered_from = i
                break
        if recovered_from is not None:
            self._recover_from(recovered_from)
        self._leo = self._segments[-1].next_offset()
        self.recovery_point = min(self.recovery_point, self._leo)
        if recovered_from is not None:
            self.recovery_point = self._leo
        if rebuild_epochs or recovered_from is not None:
            self.leader_epoch_cache.truncate_from_end(self._leo)
            if rebuild_epochs and self._leo > self._segments[0].base_offset:
                self._rebuild_epoch_cache()

    def _recover_from(self, first: int) -> None:
        """Rescan segments from index `first`; after a bad batch, later segments go."""
        i = first
        while i < len(self._segments):
            seg = self._segments[i]
            truncated = seg.recover(self.config.max_message_bytes + 1024 * 1024, self._note_epoch)
            seg.flush()
            if truncated:
                log.warning(
                    "truncated a torn or corrupt log tail",
                    extra={"segment": str(seg.log_path), "bytes": truncated},
                )
                for later in self._segments[i + 1 :]:
                    later.close()
                    later.delete()
                del self._segments[i + 1 :]
                break
            i += 1
        # An empty segment left behind a later one cannot stand between two others.
        while len(self._segments) > 1 and self._segments[-1].size == 0:
            if self._segments[-1].base_offset == self._segments[-2].next_offset():
                break
            dead = self._segments.pop()
            dead.close()
            dead.delete()
        self._bases = [s.base_offset for s in self._segments]

    def _note_epoch(self, view: RecordBatchView) -> None:
        epoch = view.partition_leader_epoch
        if epoch > self.leader_epoch_cache.latest_epoch:
            self.leader_epoch_cache.assign(epoch, view.base_offset, flush=False)

    def _rebuild_epoch_cache(self) -> None:
        self.leader_epoch_cache.clear()
        for seg in self._segments:
            for view in seg.iter_headers():
                self._note_epoch(view)
        self.leader_epoch_cache.flush()

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
        """Validate, assign offsets from the LEO, stamp `leader_epoch`, append."""
        with self._lock:
            self._check_open()
            buf, views = self._validated(records, allow_partial_tail=False)
            now = self._clock()
            append_time = now if self.config.log_append_time else -1
            offset = first = self._leo
            for v in views:
                set_base_offset(buf, v.pos, offset)
                set_partition_leader_epoch(buf, v.pos, leader_epoch)
                if append_time >= 0:
                    set_log_append_time(buf, v.pos, append_time)
                offset = v.next_offset
            if leader_epoch > self.leader_epoch_cache.latest_epoch:
                self.leader_epoch_cache.assign(leader_epoch, first)
            return self._append(buf, views, now, append_time)

    def append_as_follower(self, records: bytes | bytearray | memoryview) -> LogAppendInfo | None:
        """Append the leader's batches as they are; a partial trailing batch is dropped.

        Returns None when there was no complete batch.
        """
        with self._lock:
            self._check_open()
            buf, views = self._validated(records, allow_partial_tail=True)
            if not views:
                return None
            expected = self._leo
            for v in views:
                if v.base_offset < expected:
                    raise UnexpectedAppendOffsetError(
                        f"batch at offset {v.base_offset} does not continue the log at {expected}"
                    )
                expected = v.next_offset
            for v in views:
                epoch = v.partition_leader_epoch
                if epoch > self.leader_epoch_cache.latest_epoch:
                    self.leader_epoch_cache.assign(epoch, v.base_offset)
            return self._append(buf, views, self._clock(), -1)

    def _validated(
        self, records: bytes | bytearray | memoryview, allow_partial_tail: bool
    ) -> tuple[bytearray | memoryview, list[RecordBatchView]]:
        views = validate_records(records, allow_partial_tail=allow_partial_tail)
        total = 0
        for v in views:
            if v.size > self.config.max_message_bytes:
                raise RecordTooLargeError(
                    f"batch of {v.size} bytes exceeds max.message.bytes "
                    f"{self.config.max_message_bytes}"
                )
            total += v.size
        if total > self.config.segment_bytes:
            raise RecordListTooLargeError(
                f"{total} bytes of batches exceed segment.bytes {self.config.segment_bytes}"
            )
        mv = memoryview(records)
        # Patch in place when we may; otherwise one copy (memcpy, far cheaper than the write).
        buf: bytearray | memoryview = mv[:total] if not mv.readonly else bytearray(mv[:total])
        return buf, [RecordBatchView(buf, v.pos) for v in views]

    def _append(
        self,
        buf: bytearray | memoryview,
        views: list[RecordBatchView],
        now: int,
        append_time: int,
    ) -> LogAppendInfo:
        first = views[0].base_offset
        last = views[-1].last_offset
        max_ts, offset_of_max = -1, first
        batches = []
        for v in views:
            ts = v.max_timestamp
            if ts > max_ts:
                max_ts, offset_of_max = ts, v.last_offset
            batches.append(AppendedBatch(v.pos, v.last_offset, ts, v.size))
        segment = self._maybe_roll(len(buf), first, last, max_ts, now)
        segment.append(buf, batches)
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
            num_batches=len(views),
            valid_bytes=len(buf),
        )

    def _maybe_roll(
        self, size: int, first: int, last: int, max_ts: int, now: int
    ) -> LogSegment:
        seg = self._segments[-1]
        if seg.size == 0:
            if seg.base_offset != first:  # e.g. after a follower's first fetch far ahead
                return self.roll(first)
            return seg
        first_ts = seg.first_batch_timestamp()
        waited = max_ts - first_ts if first_ts is not None and first_ts >= 0 else (
            now - seg.created_ms
        )
        if (
            seg.size + size > self.config.segment_bytes
            or waited > self.config.segment_ms
            or seg.offset_index.is_full()
            or seg.time_index.is_full()
            or last - seg.base_offset > MAX_RELATIVE_OFFSET
        ):
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
            i = bisect.bisect_right(self._bases, start_offset) - 1
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

    # -- truncation and the log start --------------------------------------------------------

    def truncate_to(self, offset: int) -> bool:
        """Remove every batch holding offsets >= `offset` (a follower's divergent tail)."""
        if offset < 0:
            raise ValueError(f"cannot truncate to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self._leo:
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
            self.log_start_offset = min(self.log_start_offset, self._leo)
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
            return True

    # -- retention ---------------------------------------------------------------------------

    def delete_old_segments(self, high_watermark: int | None = None) -> int:
        """Apply retention.ms and retention.bytes; returns the number of segments deleted.

        Only segments wholly below `high_watermark` (default: the LEO) may go, as in Kafka.
        """
        with self._lock:
            self._check_open()
            hw = self._leo if high_watermark is None else high_watermark
            now = self._clock()
            retention_ms = self.config.retention_ms
            deleted = 0
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
        self.log_start_offset = max(self.log_start_offset, self._bases[0])
        self.leader_epoch_cache.truncate_from_start(self.log_start_offset)
        return doomed

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
