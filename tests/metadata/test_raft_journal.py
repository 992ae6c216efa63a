"""The controllers' Raft journal (kraft/raft_journal.py) on real files: what survives a
reopen, a torn tail at any byte, and the conversion from pysyncobj's own format."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from pysyncobj.journal import FileJournal

from kraft.raft_journal import MAGIC, DurableJournal
from tests.harness.power_loss import lose_power


def _entries(n: int, start: int = 1, term: int = 1) -> list[tuple[bytes, int, int]]:
    return [(f"cmd-{i}".encode() * (i % 5 + 1), i, term) for i in range(start, start + n)]


def _fill(j: DurableJournal, entries: list[tuple[bytes, int, int]]) -> None:
    for e in entries:
        j.add(*e)


def test_entries_term_and_vote_survive_a_reopen(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    _fill(j, _entries(50))
    j.setCurrentTerm(7, "127.0.0.1:9000")
    j.setRaftCommitIndex(40)
    j._destroy()
    again = DurableJournal(path)
    assert list(again[0:]) == _entries(50)
    assert (again.getCurrentTerm(), again.getVotedForNodeId()) == (7, "127.0.0.1:9000")
    assert again.getRaftCommitIndex() == 40
    assert again.torn_bytes_cut == 0


def test_one_sync_covers_every_entry_appended_since_the_last(tmp_path: Path) -> None:
    j = DurableJournal(tmp_path / "raft.journal")
    before = j.syncs
    _fill(j, _entries(100))
    assert j.dirty
    j.sync()
    j.sync()  # nothing new: no second fsync
    assert j.syncs == before + 1 and not j.dirty


def test_a_torn_or_corrupt_tail_is_cut_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    _fill(j, _entries(10))
    j._destroy()
    size = path.stat().st_size
    with open(path, "r+b") as f:  # flip a byte inside the last record's command
        f.seek(size - 2)
        byte = f.read(1)
        f.seek(size - 2)
        f.write(bytes([byte[0] ^ 0xFF]))
        f.seek(size)
        f.write(b"\x40\x00\x00\x00garbage")  # and a record header with no body
    again = DurableJournal(path)
    assert list(again[0:]) == _entries(9)
    assert again.torn_bytes_cut > 0
    assert path.stat().st_size < size
    again.add(*_entries(1, start=10, term=2)[0])  # appends after the cut, not after garbage
    again._destroy()
    assert list(DurableJournal(path)[0:]) == _entries(9) + _entries(1, start=10, term=2)


def test_cut_suffix_and_dropped_prefix_persist(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    j = DurableJournal(path)
    _fill(j, _entries(20))
    j.deleteEntriesFrom(15)  # a follower's conflicting suffix
    j.add(b"new", 16, 3)
    j.deleteEntriesTo(5)  # compaction: a snapshot covers the first five
    j._destroy()
    assert list(DurableJournal(path)[0:]) == _entries(15)[5:] + [(b"new", 16, 3)]


def test_pysyncobj_journal_is_converted_once(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    old = FileJournal(str(path))
    for e in _entries(30):
        old.add(*e)
    old.setCurrentTerm(4, "127.0.0.1:9001")
    old._destroy()
    j = DurableJournal(path)
    assert list(j[0:]) == _entries(30)
    assert (j.getCurrentTerm(), j.getVotedForNodeId()) == (4, "127.0.0.1:9001")
    assert path.read_bytes().startswith(MAGIC)
    j._destroy()
    assert json.loads((tmp_path / "raft.journal.state").read_text())["term"] == 4


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(st.integers(1, 8), min_size=1, max_size=8),
    unsynced=st.integers(0, 8),
    keep=st.floats(0, 1),
)
def test_power_loss_at_any_byte_keeps_every_synced_entry(
    tmp_path_factory, batches: list[int], unsynced: int, keep: float
) -> None:
    """Sync after each batch, append some more, lose power (the ledger's cut), then let
    an arbitrary part of the unsynced bytes survive anyway (disks write back in any
    order): the reopened journal holds every synced entry and only whole entries."""
    tmp = tmp_path_factory.mktemp("j")
    path = tmp / "raft.journal"
    j = DurableJournal(path, ledger=True)
    synced: list[tuple[bytes, int, int]] = []
    idx = 1
    for n in batches:
        batch = _entries(n, start=idx)
        _fill(j, batch)
        j.sync()
        synced += batch
        idx += n
    _fill(j, _entries(unsynced, start=idx))
    full = path.read_bytes()
    j._file.close()  # the process dies; no sync on the way out
    lose_power(tmp)
    durable = path.stat().st_size
    survived = full[: durable + int(keep * (len(full) - durable))]
    path.write_bytes(survived)
    again = DurableJournal(path)
    got = list(again[0:])
    assert got[: len(synced)] == synced
    assert got == (synced + _entries(unsynced, start=idx))[: len(got)]
