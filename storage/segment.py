"""One log segment: `<20-digit base offset>.log` with its `.index`, `.timeindex` and
`.txnindex` (aborted transactions; its file exists only once it has an entry)."""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from storage.index import CorruptIndexError, OffsetIndex, TimeIndex
from storage.record_batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordBatchError,
    RecordBatchView,
    validate_batch,
)
from storage.txn_index import TXN_INDEX_SUFFIX, TransactionIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"

# baseOffset, batchLength, epoch, magic, crc, attributes, lastOffsetDelta, baseTimestamp,
# maxTimestamp: enough of the header to place and date a batch.
_HEAD = struct.Struct(">qiibIhiqq")
_SCAN_CHUNK = 8 << 20
MAX_RELATIVE_OFFSET = 2**31 - 1
_IOV_MAX = 1024  # writev's limit on buffers per call (Linux)
# Drop-behind (see LogSegment.drop_behind): page-cache work is done in steps of this much.
_DROP_STEP = 8 << 20


def segment_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class FileSlice:
    """A byte range of a segment file, ready for `os.sendfile` or a plain read.

    It holds the open file itself, so a slice stays readable even if its segment is
    deleted meanwhile (the unlinked file lives until the last reference goes).
    """

    file: io.FileIO
    position: int
    size: int

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        out = os.pread(self.file.fileno(), self.size, self.position)
        while len(out) < self.size:  # pread may return short on large ranges
            more = os.pread(self.file.fileno(), self.size - len(out), self.position + len(out))
            if not more:
                raise OSError(f"segment file ended inside a slice at {self.position + len(out)}")
            out += more
        return out

    def read_into(self, out: memoryview) -> None:
        """Read the slice into `out` (exactly `size` bytes long): no intermediate bytes."""
        fd, done = self.file.fileno(), 0
        while done < self.size:  # preadv may return short on large ranges
            n = os.preadv(fd, [out[done:]], self.position + done)
            if n <= 0:
                raise OSError(f"segment file ended inside a slice at {self.position + done}")
            done += n


@dataclass(frozen=True, slots=True)
class BatchPosition:
    position: int
    base_offset: int
    last_offset: int
    size: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class AppendedBatch:
    """What a segment needs to know about each batch it appends."""

    position: int  # inside the buffer being appended
    last_offset: int
    max_timestamp: int
    size: int


class LogSegment:
    def __init__(
        self,
        directory: Path,
        base_offset: int,
        *,
        index_interval_bytes: int,
        max_index_size: int,
        created_ms: int,
        suffix: str = "",
    ) -> None:
        """`suffix` names a segment being built beside the log (the cleaner's `.cleaned`)."""
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.log_path = directory / segment_name(base_offset, LOG_SUFFIX + suffix)
        self.file = io.FileIO(self.log_path, "a+")  # O_APPEND: writes go to the end
        self.size = os.fstat(self.file.fileno()).st_size
        self.flushed_size = self.size
        self.offset_index = OffsetIndex(
            directory / segment_name(base_offset, INDEX_SUFFIX + suffix),
            base_offset,
            max_index_size,
        )
        self.time_index = TimeIndex(
            directory / segment_name(base_offset, TIME_INDEX_SUFFIX + suffix),
            base_offset,
            max_index_size,
        )
        self.txn_index = TransactionIndex(
            directory / segment_name(base_offset, TXN_INDEX_SUFFIX + suffix), base_offset
        )
        self.created_ms = created_ms
        self._bytes_since_index_entry = 0
        ts, off = self.time_index.last_entry
        self.max_timestamp_so_far = ts
        self.offset_of_max_timestamp = off
        self._first_batch_timestamp: int | None = None
        # drop_behind's cursors: writeback was started below `_kicked`, and the pages
        # below `_dropped` were let go.
        self._kicked = self._dropped = self.size
        self.broken: str | None = None  # why this segment refuses appends (a failed cut)

    # -- writing ---------------------------------------------------------------------------

    def append(
        self, parts: list[bytearray | memoryview], total: int, batches: list[AppendedBatch]
    ) -> None:
        """Append whole, validated and patched batches: `parts` hold `total` bytes, and
        each batch's `position` counts from the start of those bytes.

        All or nothing: a write that fails part-way (ENOSPC, EIO) is cut off the file
        again before the error goes up, and nothing (size, indexes, timestamps) counts
        it. Left in place, its bytes would sit under the next append's (the file is
        O_APPEND) while the indexes pointed at the torn copy: a batch with a bad CRC
        inside the log, which the chaos campaign's disk-full fault found."""
        for b in batches:
            if b.last_offset - self.base_offset > MAX_RELATIVE_OFFSET:
                raise ValueError(f"offset {b.last_offset} does not fit segment {self.base_offset}")
        if self.broken is not None:
            raise OSError(f"{self.log_path}: unusable since a failed write ({self.broken})")
        base_position = self.size
        fd = self.file.fileno()
        try:
            written = 0
            for i in range(0, len(parts), _IOV_MAX):
                written += os.writev(fd, parts[i : i + _IOV_MAX])
            if written < total:  # a short write (signal, full disk): finish it or raise
                rest = memoryview(b"".join(parts))[written:]
                while rest:
                    rest = rest[os.write(fd, rest) :]
        except OSError as exc:
            try:
                os.ftruncate(fd, base_position)
            except OSError as cut:  # the file's end is unknown now: refuse further writes
                self.broken = f"{exc!r}, then truncating back failed: {cut!r}"
            raise
        for b in batches:
            self._track_batch(b.last_offset, base_position + b.position, b.max_timestamp, b.size)
        if self.size == 0 and batches:
            self._first_batch_timestamp = batches[0].max_timestamp
        self.size += total

    def drop_behind(self, keep: int) -> None:
        """Let the page cache go of what lies more than `keep` bytes behind the end.

        For a follower's log, which nobody reads while it follows: the bytes written
        `keep` behind the end get their writeback started, and those `2 * keep` behind
        (clean by then) are dropped. New writes then reuse the pages just freed instead
        of growing the page cache into memory not touched for a while, which costs a
        first-touch fault per page in the copy (on a VM whose host took back the guest's
        free memory, 15x the copy itself: issue 16's copy_folio_from_iter_atomic). Both
        are one posix_fadvise(DONTNEED) per 8 MiB step: the kernel starts writeback of
        dirty pages (no waiting) and evicts the clean ones in the range."""
        end = self.size - keep
        if end - self._kicked < _DROP_STEP:
            return
        fd = self.file.fileno()
        os.posix_fadvise(fd, self._kicked, end - self._kicked, os.POSIX_FADV_DONTNEED)
        self._kicked = end
        if end - keep > self._dropped:
            os.posix_fadvise(fd, self._dropped, end - keep - self._dropped, os.POSIX_FADV_DONTNEED)
            self._dropped = end - keep

    def _track_batch(self, last_offset: int, position: int, max_ts: int, size: int) -> None:
        """Max timestamp so far, and an index entry every `index.interval.bytes`."""
        if max_ts > self.max_timestamp_so_far:
            self.max_timestamp_so_far = max_ts
            self.offset_of_max_timestamp = last_offset
        # A full index skips the entry (lookups just scan further); the next append rolls.
        if self._bytes_since_index_entry > self.index_interval_bytes and not (
            self.offset_index.is_full() or self.time_index.is_full()
        ):
            self.offset_index.append(last_offset, position)
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
            self._bytes_since_index_entry = 0
        self._bytes_since_index_entry += size

    def flush(self) -> None:
        self.write_indexes()
        self.fsync()

    def write_indexes(self) -> None:
        """Bring the index files up to date without fsync (cheap; under the log's lock)."""
        self.offset_index.flush(fsync=False)
        self.time_index.flush(fsync=False)

    def fsync(self) -> None:
        """fsync the log and index files. Safe from another thread, even mid-deletion."""
        size = self.size
        try:
            os.fsync(self.file.fileno())
        except ValueError:  # closed meanwhile: it was deleted or the log was closed
            return
        self.txn_index.flush()
        for index in (self.offset_index, self.time_index):
            try:
                fd = os.open(index.path, os.O_RDONLY)
            except FileNotFoundError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        self.flushed_size = max(self.flushed_size, size)

    def iter_headers(self) -> Iterator[RecordBatchView]:
        """Views over each batch's header, read one by one (for rare rebuilds)."""
        position = 0
        while position + HEADER_SIZE <= self.size:
            raw = os.pread(self.file.fileno(), HEADER_SIZE, position)
            if len(raw) < HEADER_SIZE:
                return
            view = RecordBatchView(raw)
            yield view
            position += view.size

    def first_batch_timestamp(self) -> int | None:
        """Max timestamp of the first batch: Kafka's basis for `segment.ms` rolls."""
        if self._first_batch_timestamp is None and self.size >= HEADER_SIZE:
            self._first_batch_timestamp = _HEAD.unpack(os.pread(self.file.fileno(), 43, 0))[8]
        return self._first_batch_timestamp

    # -- reading ---------------------------------------------------------------------------

    def _header_at(self, position: int) -> tuple[int, int, int, int] | None:
        """(base offset, last offset, size, max timestamp) of the batch at `position`."""
        raw = os.pread(self.file.fileno(), _HEAD.size, position)
        if len(raw) < _HEAD.size:
            return None
        base, length, _e, _m, _c, _a, last_delta, _bts, max_ts = _HEAD.unpack(raw)
        return base, base + last_delta, length + LOG_OVERHEAD, max_ts

    def translate_offset(self, offset: int, start_position: int = 0) -> BatchPosition | None:
        """The first batch whose last offset is >= `offset`, found from the index forward."""
        _, position = self.offset_index.lookup(offset)
        position = max(position, start_position)
        while position < self.size:
            head = self._header_at(position)
            if head is None:
                return None
            base, last, size, max_ts = head
            if last >= offset:
                return BatchPosition(position, base, last, size, max_ts)
            position += size
        return None

    def read(
        self, start_offset: int, max_size: int, max_position: int | None, min_one_batch: bool
    ) -> tuple[FileSlice, BatchPosition] | None:
        """Bytes from the batch holding `start_offset`, up to `max_size` and `max_position`.

        With `min_one_batch` at least the first whole batch is returned. Past the first
        batch the slice ends on a batch boundary: Kafka's slice may end inside a batch,
        which readers drop and fetch again next time (at 100 B messages and 1 MiB
        partition limits that was about a third of the bytes a consumer received). A
        first batch larger than `max_size` without `min_one_batch` still comes back
        partial, as in Kafka (the protocol's "record too large" signal).
        """
        first = self.translate_offset(start_offset)
        if first is None:
            return None
        limit = self.size if max_position is None else min(max_position, self.size)
        if min_one_batch:
            max_size = max(max_size, first.size)
        size = max(0, min(limit - first.position, max_size))
        end = first.position + size
        if size > first.size and end < limit:
            end = self._whole_batches_end(first.position + first.size, end)
            size = end - first.position
        return FileSlice(self.file, first.position, size), first

    def _whole_batches_end(self, start: int, end: int) -> int:
        """The last batch boundary at or before `end`, at least `start` (a boundary).

        The offset index gives a boundary at most `index.interval.bytes` (plus one batch)
        before `end`; from there the walk reads batch headers only: work per batch.
        """
        position = max(start, self.offset_index.lookup_position(end))
        while position < end:
            head = self._header_at(position)
            if head is None or position + head[2] > end:
                break
            position += head[2]
        return position

    def find_offset_by_timestamp(self, timestamp: int) -> tuple[BatchPosition, int] | None:
        """The first batch with max timestamp >= `timestamp`, and its position, or None."""
        _, offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(offset)
        while position < self.size:
            head = self._header_at(position)
            if head is None:
                return None
            base, last, size, max_ts = head
            if max_ts >= timestamp:
                return BatchPosition(position, base, last, size, max_ts), position
            position += size
        return None

    def read_batch_bytes(self, bp: BatchPosition) -> bytes:
        return FileSlice(self.file, bp.position, bp.size).read()

    # -- truncation and recovery -----------------------------------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove batches whose last offset is >= `offset`; returns bytes removed."""
        self.txn_index.truncate_to(offset)
        first = self.translate_offset(offset)
        if first is None:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        removed = self.size - first.position
        os.ftruncate(self.file.fileno(), first.position)
        self.size = first.position
        self._kicked = min(self._kicked, self.size)
        self._dropped = min(self._dropped, self.size)
        self.flushed_size = min(self.flushed_size, self.size)
        self._bytes_since_index_entry = 0
        if self.size == 0:
            self._first_batch_timestamp = None
        self._recompute_max_timestamp()
        return removed

    def _recompute_max_timestamp(self) -> None:
        ts, off = self.time_index.last_entry
        self.max_timestamp_so_far, self.offset_of_max_timestamp = ts, off
        _, position = self.offset_index.lookup(off)
        while position < self.size:
            head = self._header_at(position)
            if head is None:
                break
            _base, last, size, max_ts = head
            if max_ts > self.max_timestamp_so_far:
                self.max_timestamp_so_far, self.offset_of_max_timestamp = max_ts, last
            position += size

    def sanity_check(self, full: bool) -> None:
        self.offset_index.sanity_check(self.size, full)
        self.time_index.sanity_check(self.size, full)

    def recover(
        self, max_batch_size: int, on_batch: Callable[[RecordBatchView], None] | None = None
    ) -> int:
        """Rebuild the indexes by scanning every batch; cut the file at the first bad one.

        A batch counts when its header is sane, it lies wholly in the file, its CRC
        matches and its offsets continue the segment. Returns the bytes truncated.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp_so_far, self.offset_of_max_timestamp = -1, self.base_offset
        self._bytes_since_index_entry = 0
        self._first_batch_timestamp = None
        fd = self.file.fileno()
        file_size = os.fstat(fd).st_size
        buf = b""
        buf_pos = 0  # file position of buf[0]
        pos = 0
        next_offset = self.base_offset
        while pos < file_size:
            rel = pos - buf_pos
            if len(buf) - rel < HEADER_SIZE:
                buf = buf[rel:] + os.pread(fd, _SCAN_CHUNK, buf_pos + len(buf))
                buf_pos, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    break
            size = struct.unpack_from(">i", buf, rel + 8)[0] + LOG_OVERHEAD
            if size < HEADER_SIZE or size > max_batch_size or pos + size > file_size:
                break
            if len(buf) - rel < size:
                buf = buf[rel:] + os.pread(fd, max(_SCAN_CHUNK, size), buf_pos + len(buf))
                buf_pos, rel = pos, 0
                if len(buf) < size:
                    break
            try:
                view = validate_batch(buf, rel, rel + size, compacted=True)
            except RecordBatchError:
                break
            if view.base_offset < next_offset or view.last_offset - self.base_offset > (
                MAX_RELATIVE_OFFSET
            ):
                break
            max_ts = view.max_timestamp
            self._track_batch(view.last_offset, pos, max_ts, size)
            if self._first_batch_timestamp is None:
                self._first_batch_timestamp = max_ts
            if on_batch is not None:
                on_batch(view)
            next_offset = view.next_offset
            pos += size
        # Like a roll: the time index ends with the segment's max, so a later load that
        # trusts the index (below the recovery point) still knows this segment's times.
        if pos:
            self.time_index.maybe_append(self.max_timestamp_so_far, self.offset_of_max_timestamp)
        truncated = file_size - pos
        if truncated:
            os.ftruncate(fd, pos)
        # Aborts indexed past what survived (a cut tail, or an index written before the
        # log reached the disk) go: the index never runs ahead of its log.
        self.txn_index.truncate_to(next_offset)
        self.size = pos
        self._kicked = min(self._kicked, self.size)
        self._dropped = min(self._dropped, self.size)
        self.flushed_size = pos
        self.offset_index.flush()
        self.time_index.flush()
        return truncated

    def next_offset(self) -> int:
        """The offset after this segment's last batch (its base offset when empty)."""
        if self.size == 0:
            return self.base_offset
        _, position = self.offset_index.lookup(2**63 - 1)
        last = self.base_offset - 1
        while position < self.size:
            head = self._header_at(position)
            if head is None:
                break
            _base, last, size, _ts = head
            position += size
        return last + 1

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        try:
            self.offset_index.flush(fsync=False)
            self.time_index.flush(fsync=False)
        finally:
            self.file.close()

    def change_suffix(self, suffix: str) -> None:
        """Rename the files to `<base>.log<suffix>` etc. (Kafka's changeFileSuffixes).

        The indexes go first and the log last: the log's name is what recovery goes by, so
        whoever sees the new log name also finds its indexes renamed (or rebuilds them).
        """
        indexes = (
            (self.offset_index, INDEX_SUFFIX),
            (self.time_index, TIME_INDEX_SUFFIX),
            (self.txn_index, TXN_INDEX_SUFFIX),
        )
        for index, plain in indexes:
            index.rename(self.directory / segment_name(self.base_offset, plain + suffix))
        path = self.directory / segment_name(self.base_offset, LOG_SUFFIX + suffix)
        os.replace(self.log_path, path)
        self.log_path = path

    def delete(self) -> None:
        """Unlink the files. The open file is left to outstanding FileSlices (see FileSlice)."""
        self.log_path.unlink(missing_ok=True)
        self.offset_index.delete()
        self.time_index.delete()
        self.txn_index.delete()

    def __repr__(self) -> str:
        return f"LogSegment(base_offset={self.base_offset}, size={self.size})"


def check_index_or_none(segment: LogSegment, full: bool) -> CorruptIndexError | None:
    try:
        segment.sanity_check(full)
    except CorruptIndexError as exc:
        return exc
    return None
