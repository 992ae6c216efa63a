"""The aborted-transaction index of one segment: `<base>.txnindex`, Kafka's format.

Kafka's TransactionIndex/AbortedTxn: a flat file of 34-byte big-endian entries
(version int16 = 0, producerId int64, firstOffset int64, lastOffset int64,
lastStableOffset int64), one per transaction aborted in the segment, in the order the
abort markers were written (so lastOffset increases). A read_committed fetch collects
the entries overlapping its range to tell the consumer which producer's records to drop.

Aborts are rare, so the entries also live in memory (a list) and the file is only
appended to, cut on truncation, and cleared on reset. As in Kafka the file is created
only when the first entry arrives: most segments never have one. The log is the source
of truth: a torn or corrupt index is rebuilt from it (see `Log.txn_indexes_ok`).
"""

from __future__ import annotations

import contextlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from storage.index import CorruptIndexError

TXN_INDEX_SUFFIX = ".txnindex"
CURRENT_VERSION = 0
_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
assert ENTRY_SIZE == 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the offset of the ABORT marker
    last_stable_offset: int  # the LSO when the abort completed

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            CURRENT_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


def parse_entries(data: bytes, path: Path | str = "<bytes>") -> tuple[list[AbortedTxn], bool]:
    """The whole entries of `data` and whether it ended in a torn one (a partial tail).

    Raises CorruptIndexError on an entry of an unknown version (Kafka refuses those too).
    """
    entries: list[AbortedTxn] = []
    usable = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, usable, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version != CURRENT_VERSION:
            raise CorruptIndexError(
                f"{path}: entry {pos // ENTRY_SIZE} has version {version}, "
                f"only {CURRENT_VERSION} is known"
            )
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries, usable != len(data)


class TransactionIndex:
    """The `.txnindex` of the segment starting at `base_offset`."""

    def __init__(self, path: Path, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] = []
        self._torn = False  # the file ends inside an entry (a crash mid-append)
        self._bad_version: CorruptIndexError | None = None
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        try:
            self._entries, self._torn = parse_entries(data, path)
        except CorruptIndexError as exc:
            # Kept for sanity_check(): the loader decides (rebuild), not the constructor.
            self._bad_version = exc
            self._entries = []
        self._file_size = len(data)
        self._dirty = False  # appended since the last fsync

    # -- writing ---------------------------------------------------------------------------

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry; its last offset must be above the previous one (Kafka's rule)."""
        if self._entries and txn.last_offset <= self._entries[-1].last_offset:
            raise ValueError(
                f"aborted transaction last offset {txn.last_offset} is not above the "
                f"previous one {self._entries[-1].last_offset} in {self.path}"
            )
        if self._torn:
            # Never append behind a torn entry: every later entry would be misaligned.
            self._rewrite()
        with open(self.path, "ab") as f:
            f.write(txn.to_bytes())
        self._entries.append(txn)
        self._file_size += ENTRY_SIZE
        self._dirty = True

    def truncate_to(self, offset: int) -> None:
        """Drop the entries with last offset >= `offset` (Kafka's truncateTo)."""
        keep = len(self._entries)
        for i, txn in enumerate(self._entries):
            if txn.last_offset >= offset:
                keep = i
                break
        if keep == len(self._entries):
            return  # a torn tail stays for sanity_check to report
        del self._entries[keep:]
        self._rewrite()

    def reset(self) -> None:
        """Remove every entry (the file stays, empty, if it exists)."""
        self._entries.clear()
        self._bad_version = None
        if self.path.exists():
            self._rewrite()
        else:
            self._torn = False

    def _rewrite(self) -> None:
        size = len(self._entries) * ENTRY_SIZE
        with open(self.path, "r+b" if self.path.exists() else "wb") as f:
            f.truncate(size)
        self._file_size = size
        self._torn = False
        self._dirty = True

    def flush(self) -> None:
        """fsync the file, if anything changed since the last flush."""
        if not self._dirty:
            return
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        self._dirty = False

    def close(self) -> None:
        """Nothing stays open between calls; present for symmetry with the other indexes."""

    def delete(self) -> None:
        self.path.unlink(missing_ok=True)
        self._entries.clear()
        self._file_size = 0
        self._torn = False

    def rename(self, path: Path) -> None:
        """Move the file (if it exists yet) and remember the new name either way."""
        with contextlib.suppress(FileNotFoundError):
            os.replace(self.path, path)
        self.path = path

    # -- reading ---------------------------------------------------------------------------

    @property
    def entries(self) -> int:
        return len(self._entries)

    def all_entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), and whether
        the search is complete (Kafka's collectAbortedTxns): an entry whose LSO reached
        `upper_bound` means no later segment can hold a transaction that started below
        it, so the caller may stop."""
        found: list[AbortedTxn] = []
        for txn in self._entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                found.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return found, True
        return found, False

    def sanity_check(self) -> None:
        """Raise CorruptIndexError on a torn file, an unknown version, an entry outside
        this segment or out of order. Kafka only checks the first two of those; ours are
        cheap (aborts are rare) and a bad index costs a rebuild, not data."""
        if self._bad_version is not None:
            raise self._bad_version
        if self._torn:
            raise CorruptIndexError(
                f"{self.path}: size {self._file_size} is not a whole number of "
                f"{ENTRY_SIZE}-byte entries"
            )
        previous = -1
        for i, txn in enumerate(self._entries):
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(
                    f"{self.path}: entry {i} {txn} ends below the segment's base offset "
                    f"{self.base_offset}"
                )
            if txn.first_offset > txn.last_offset or txn.last_offset <= previous:
                raise CorruptIndexError(f"{self.path}: entry {i} {txn} is out of order")
            previous = txn.last_offset

    def __repr__(self) -> str:
        return f"TransactionIndex({self.path.name}, entries={len(self._entries)})"
