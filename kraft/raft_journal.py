"""The controllers' Raft journal for pysyncobj: checksummed, fsynced, torn tails cut.

pysyncobj's own FileJournal is an mmap it never msyncs, and it stores the term and vote
by renaming a file it never fsyncs (notes/pysyncobj.md): a majority of controllers
losing power at once can lose committed metadata, or vote twice in one term. Kafka's
KRaft fsyncs its log before a voter acknowledges entries and its quorum-state (term,
vote) before it answers a vote. This journal gives pysyncobj the same, behind the
`Journal` interface it already calls (`add`, `deleteEntriesFrom`, `setCurrentTerm`...):

- Entries: `[u32 length][u32 crc32c][u64 index][u64 term][command]`, appended with
  write(2) and made durable by `sync()`: one fdatasync for everything appended since
  the last one. Raft's durable points call it (kraft/raft_durability.py), so one
  fsync covers every entry that arrived meanwhile (group commit).
- Open: the file is read record by record; the first record that is short or fails its
  CRC ends the log and the file is cut there. A crash tears at most the unsynced tail,
  and an entry nobody was told about is safe to drop; a torn record is never trusted.
- Term, vote and the commit-index hint: a small JSON file replaced atomically (write a
  temporary file, fsync it, rename, fsync the directory) before `setCurrentTerm`
  returns, so before pysyncobj sends the vote.
- Cutting a conflicting suffix (a follower meeting a new leader): ftruncate + fsync.
  Dropping a prefix covered by a snapshot, or clearing for an installed snapshot: a new
  file renamed over the old one (pysyncobj rewrites its file in place: a crash in the
  middle loses the log).

`fsync=False` (`controller.quorum.fsync.enable=false`) skips every fsync: a debug
switch that shows what the fsyncs buy (the power-loss test loses writes without them);
never for a real cluster.

With a ledger (tests only: the power-loss simulation, tests/harness/power_loss.py), every
durable point is written down as it happens: the journal's inode and synced length, and
a hard link `<file>.durable` to each atomically replaced file. Dropping what no ledger
line covers is exactly "everything written since the last fsync is lost".

The format of pysyncobj's FileJournal (a file starting with b"PYSYNCOBJ") is read once
and rewritten in this format, so existing data directories keep their metadata.
"""

from __future__ import annotations

import json
import logging
import os
import struct
from pathlib import Path
from typing import Any

import crc32c

from storage.checkpoint import fsync_dir

log = logging.getLogger("kraft.raft_journal")

MAGIC = b"KRAFTJ01"  # 8-byte file header
_HEAD = struct.Struct("<II")  # length of (index, term, command), crc32c of it
_ENTRY = struct.Struct("<QQ")  # Raft index, term
_LEGACY_MAGIC = b"PYSYNCOBJ"

Entry = tuple[bytes, int, int]  # (command, Raft index, term): pysyncobj's shape


def replace_file(tmp: Path, target: Path, *, fsync: bool, ledger: Ledger | None) -> None:
    """Rename `tmp` over `target`; with fsync, the content and the rename are on disk
    before this returns (fsync the file, rename, fsync the directory)."""
    if fsync:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.replace(tmp, target)
    if fsync:
        fsync_dir(target.parent)
        if ledger is not None:
            ledger.file_replaced(target)


class Ledger:
    """The durable points, written down for the power-loss simulation (tests only)."""

    def __init__(self, directory: Path) -> None:
        self.path = directory / "durability.ledger"

    def _line(self, text: str) -> None:
        with open(self.path, "a", encoding="ascii") as f:
            f.write(text + "\n")

    def journal_synced(self, journal: Path, length: int) -> None:
        self._line(f"journal {os.stat(journal).st_ino} {length}")

    def file_replaced(self, target: Path) -> None:
        durable = target.with_name(target.name + ".durable")
        tmp = durable.with_name(durable.name + ".tmp")
        tmp.unlink(missing_ok=True)
        os.link(target, tmp)
        os.replace(tmp, durable)
        if target.name.endswith(".journal"):
            self.journal_synced(target, os.stat(target).st_size)


def encode_entry(command: bytes, index: int, term: int) -> bytes:
    body = _ENTRY.pack(index, term) + command
    return _HEAD.pack(len(body), crc32c.crc32c(body)) + body


def scan(data: bytes | memoryview) -> tuple[list[Entry], list[int], int]:
    """Entries of a journal image, their offsets, and where the valid part ends (the
    first short or corrupt record ends it)."""
    view = memoryview(data)
    entries: list[Entry] = []
    offsets: list[int] = []
    pos = len(MAGIC)
    end = len(view)
    while pos + _HEAD.size <= end:
        length, crc = _HEAD.unpack_from(view, pos)
        start = pos + _HEAD.size
        if length < _ENTRY.size or start + length > end:
            break
        body = view[start : start + length]
        if crc32c.crc32c(body) != crc:
            break
        index, term = _ENTRY.unpack_from(body)
        entries.append((bytes(body[_ENTRY.size :]), index, term))
        offsets.append(pos)
        pos = start + length
    return entries, offsets, pos


class DurableJournal:
    """pysyncobj's Journal interface (duck-typed: pysyncobj checks no base class)."""

    def __init__(self, path: str | Path, *, fsync: bool = True, ledger: bool = False) -> None:
        self.path = Path(path)
        self.state_path = self.path.with_name(self.path.name + ".state")
        self.fsync = fsync
        self.ledger = Ledger(self.path.parent) if ledger else None
        self._entries: list[Entry] = []
        self._offsets: list[int] = []  # file offset of each entry's record
        self._state: dict[str, Any] = {}
        self._state_dirty = False
        self._dirty = False  # appended or cut since the last sync
        self.syncs = 0  # fdatasyncs done (for the bench and tests)
        self.torn_bytes_cut = 0
        self._open()

    # -- opening -----------------------------------------------------------------------

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = self.path.read_bytes() if self.path.exists() else b""
        if data.startswith(_LEGACY_MAGIC):
            self._convert_legacy()
            return
        if self.state_path.exists():
            try:
                self._state = json.loads(self.state_path.read_text(encoding="utf-8"))
            except (ValueError, OSError) as e:  # replaced atomically: should never happen
                raise RuntimeError(f"{self.state_path}: unreadable Raft state ({e})") from e
        if not data.startswith(MAGIC):
            if data.strip(b"\0"):
                raise RuntimeError(f"{self.path}: not a Raft journal (unknown header)")
            self._rewrite([])
            return
        self._entries, self._offsets, valid = scan(data)
        if valid < len(data):
            self.torn_bytes_cut = len(data) - valid
            log.warning(
                "raft journal %s: cut a torn tail of %d bytes after entry %s",
                self.path,
                self.torn_bytes_cut,
                self._entries[-1][1] if self._entries else "none",
            )
        # Unbuffered: every add() reaches the page cache at once, so a process crash
        # (SIGKILL) loses nothing; only a machine losing power loses the unsynced tail.
        self._file = open(self.path, "r+b", buffering=0)  # noqa: SIM115 - held open
        if valid < len(data):
            self._file.truncate(valid)
        self._file.seek(valid)
        self._end = valid
        self._dirty = True
        self.sync()

    def _convert_legacy(self) -> None:
        from pysyncobj.journal import FileJournal  # the old format, read once

        old = FileJournal(str(self.path))
        entries = [old[i] for i in range(len(old))]
        self._state = {
            "term": old.getCurrentTerm(),
            "voted_for": old.getVotedForNodeId(),
            "commit_index": old.getRaftCommitIndex(),
        }
        old._destroy()
        log.info(
            "raft journal %s: converted %d entries from pysyncobj's format", self.path, len(entries)
        )
        self._write_state()
        self._rewrite(entries)
        Path(str(self.path) + ".meta").unlink(missing_ok=True)

    def _rewrite(self, entries: list[Entry]) -> None:
        """Replace the file with `entries`, atomically and durably."""
        old = getattr(self, "_file", None)
        tmp = self.path.with_name(self.path.name + ".tmp")
        offsets = []
        with open(tmp, "wb") as f:
            f.write(MAGIC)
            pos = len(MAGIC)
            chunks = []
            for command, index, term in entries:
                record = encode_entry(command, index, term)
                offsets.append(pos)
                pos += len(record)
                chunks.append(record)
            f.write(b"".join(chunks))
        replace_file(tmp, self.path, fsync=self.fsync, ledger=self.ledger)
        if old is not None:
            old.close()
        self._file = open(self.path, "r+b", buffering=0)  # noqa: SIM115
        self._file.seek(pos)
        self._end = pos
        self._entries = list(entries)
        self._offsets = offsets
        self._dirty = False
        if self.fsync:
            self.syncs += 1

    # -- durability --------------------------------------------------------------------

    @property
    def dirty(self) -> bool:
        return self._dirty

    def sync(self) -> None:
        """Make every entry appended (or cut) so far durable: one fdatasync."""
        if not self._dirty:
            return
        self._dirty = False
        if not self.fsync:
            return
        os.fdatasync(self._file.fileno())
        self.syncs += 1
        if self.ledger is not None:
            self.ledger.journal_synced(self.path, self._end)

    def _write_state(self) -> None:
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        tmp.write_text(json.dumps(self._state), encoding="utf-8")
        replace_file(tmp, self.state_path, fsync=self.fsync, ledger=self.ledger)
        self._state_dirty = False

    # -- pysyncobj's Journal interface ---------------------------------------------------

    def add(self, command: bytes, idx: int, term: int) -> None:
        record = encode_entry(bytes(command), idx, term)
        self._file.write(record)
        self._entries.append((command, idx, term))
        self._offsets.append(self._end)
        self._end += len(record)
        self._dirty = True

    def clear(self) -> None:
        self._rewrite([])

    def deleteEntriesFrom(self, entryFrom: int) -> None:  # noqa: N802 - pysyncobj's name
        if entryFrom >= len(self._entries):
            return
        cut = self._offsets[entryFrom]
        del self._entries[entryFrom:]
        del self._offsets[entryFrom:]
        self._file.truncate(cut)
        self._file.seek(cut)
        self._end = cut
        self._dirty = True
        # Synced now, not at the next durable point: a cut suffix that came back after a
        # crash would be a log nobody acknowledged, behind entries that were.
        self.sync()

    def deleteEntriesTo(self, entryTo: int) -> None:  # noqa: N802
        self._rewrite(self._entries[entryTo:])

    def __getitem__(self, item: int | slice) -> Any:
        return self._entries[item]

    def __len__(self) -> int:
        return len(self._entries)

    def _destroy(self) -> None:
        if not self._file.closed:
            self.sync()
            if self._state_dirty:
                self._write_state()
            self._file.close()

    def flush(self) -> None:
        self.sync()

    def setRaftCommitIndex(self, raftCommitIndex: int) -> None:  # noqa: N802
        # A hint for the restart (pysyncobj clamps it to the log): written with the next
        # state change or once a second, never on the hot path.
        if self._state.get("commit_index") != raftCommitIndex:
            self._state["commit_index"] = raftCommitIndex
            self._state_dirty = True

    def getRaftCommitIndex(self) -> int:  # noqa: N802
        return int(self._state.get("commit_index", 1))

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:  # noqa: N802
        self._state["term"] = term
        self._state["voted_for"] = votedForNodeId
        self._write_state()  # durable before pysyncobj sends anything that shows it

    def getCurrentTerm(self) -> int:  # noqa: N802
        return int(self._state.get("term", 0))

    def getVotedForNodeId(self) -> Any:  # noqa: N802
        return self._state.get("voted_for")

    def onOneSecondTimer(self) -> None:  # noqa: N802
        if self._state_dirty:
            self._write_state()
