"""Sparse offset and time indexes of one segment, in Kafka's file formats.

`.index`: entries of (relative offset int32, position int32); `.timeindex`: entries of
(timestamp int64, relative offset int32), all big-endian. Offsets are relative to the
segment's base offset. Entries live in memory (a bytearray, searched in place with
struct) and reach the file on flush; a crash may lose or tear the tail, which recovery
detects and rebuilds, because the log itself is the source of truth.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path


class CorruptIndexError(ValueError):
    pass


class _SparseIndex:
    ENTRY: struct.Struct

    def __init__(self, path: Path, base_offset: int, max_index_size: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_size // self.ENTRY.size)
        self._buf = bytearray()
        # The file holds _buf[:_synced] (then possibly stale bytes) and is _file_size long.
        self._synced = 0
        self._file_size = 0
        self.was_missing = False  # a missing index must be rebuilt from the log
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
            self.was_missing = True
            path.touch()
        # A torn final entry is dropped here; deeper checks are sanity_check()'s.
        usable = len(data) - len(data) % self.ENTRY.size
        self._buf[:] = data[:usable]
        self._synced = usable
        self._file_size = len(data)

    @property
    def entries(self) -> int:
        return len(self._buf) // self.ENTRY.size

    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def _entry(self, i: int) -> tuple[int, int]:
        return self.ENTRY.unpack_from(self._buf, i * self.ENTRY.size)

    def _search(self, key_of_entry: int, target: int) -> int:
        """Index of the last entry whose field `key_of_entry` is <= target, or -1."""
        lo, hi = 0, self.entries
        unpack = self.ENTRY.unpack_from
        size = self.ENTRY.size
        buf = self._buf
        while lo < hi:
            mid = (lo + hi) // 2
            if unpack(buf, mid * size)[key_of_entry] <= target:
                lo = mid + 1
            else:
                hi = mid
        return lo - 1

    def _truncate_entries(self, n: int) -> None:
        del self._buf[n * self.ENTRY.size :]
        self._synced = min(self._synced, len(self._buf))

    def _indices_to_check(self, full: bool) -> range:
        return range(self.entries) if full else range(max(0, self.entries - 1), self.entries)

    def reset(self) -> None:
        self._buf.clear()
        self._synced = 0

    def flush(self, fsync: bool = True) -> None:
        """Bring the file in line with memory (rewrite what changed, cut the rest), fsync."""
        with open(self.path, "r+b") as f:
            if self._synced < len(self._buf) or self._file_size != len(self._buf):
                f.seek(self._synced)
                f.write(self._buf[self._synced :])
                f.truncate(len(self._buf))
                self._synced = self._file_size = len(self._buf)
            if fsync:
                f.flush()
                os.fsync(f.fileno())

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)

    def rename(self, path: Path) -> None:
        os.replace(self.path, path)
        self.path = path


class OffsetIndex(_SparseIndex):
    """Offset -> file position of the batch that holds it (or an earlier one)."""

    ENTRY = struct.Struct(">ii")

    @property
    def last_offset(self) -> int:
        if not self._buf:
            return self.base_offset
        return self.base_offset + self._entry(self.entries - 1)[0]

    def append(self, offset: int, position: int) -> None:
        if self._buf and offset <= self.last_offset:
            raise CorruptIndexError(
                f"index entry for offset {offset} is not above the last one {self.last_offset}"
            )
        self._buf += self.ENTRY.pack(offset - self.base_offset, position)

    def lookup(self, target_offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or below `target_offset`, else (base, 0)."""
        i = self._search(0, target_offset - self.base_offset)
        if i < 0:
            return self.base_offset, 0
        rel, pos = self._entry(i)
        return self.base_offset + rel, pos

    def lookup_position(self, target_position: int) -> int:
        """The position of the last entry at or below `target_position` (a batch start), else 0.

        Positions grow with offsets, so the entries are sorted by position too."""
        i = self._search(1, target_position)
        return self._entry(i)[1] if i >= 0 else 0

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self._truncate_entries(self._search(0, offset - self.base_offset - 1) + 1)

    def sanity_check(self, log_size: int, full: bool = True) -> None:
        """Raise CorruptIndexError unless entries increase and point inside the log.

        Without `full`, only the file size and the last entry are checked (cheap, for
        segments below the recovery point whose index was flushed with them).
        """
        last_rel, last_pos = -1, -1
        for i in self._indices_to_check(full):
            rel, pos = self._entry(i)
            if rel <= last_rel or pos <= last_pos or pos >= log_size or rel < 0:
                raise CorruptIndexError(f"{self.path}: entry {i} ({rel}, {pos}) is out of order")
            last_rel, last_pos = rel, pos
        if self._file_size % self.ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {self._file_size} is not a whole entry")


class TimeIndex(_SparseIndex):
    """Timestamp -> first offset whose batch may hold a record at or after it."""

    ENTRY = struct.Struct(">qi")

    @property
    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base) when empty."""
        if not self._buf:
            return -1, self.base_offset
        ts, rel = self._entry(self.entries - 1)
        return ts, self.base_offset + rel

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add an entry when `timestamp` is larger than the last one's (Kafka's rule)."""
        last_ts, last_off = self.last_entry
        if self._buf and (timestamp <= last_ts or offset <= last_off):
            return
        self._buf += self.ENTRY.pack(timestamp, offset - self.base_offset)

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry at or below `timestamp`, else (-1, base)."""
        i = self._search(0, timestamp)
        if i < 0:
            return -1, self.base_offset
        ts, rel = self._entry(i)
        return ts, self.base_offset + rel

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset` (offsets grow with timestamps here)."""
        self._truncate_entries(self._search(1, offset - self.base_offset - 1) + 1)

    def sanity_check(self, log_size: int, full: bool = True) -> None:
        last_ts, last_rel = -(2**63), -1
        for i in self._indices_to_check(full):
            ts, rel = self._entry(i)
            if ts <= last_ts or rel <= last_rel or rel < 0:
                raise CorruptIndexError(f"{self.path}: entry {i} ({ts}, {rel}) is out of order")
            last_ts, last_rel = ts, rel
        if self._file_size % self.ENTRY.size:
            raise CorruptIndexError(f"{self.path}: size {self._file_size} is not a whole entry")
