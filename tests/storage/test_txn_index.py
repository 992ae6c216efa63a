"""storage.txn_index: Kafka's `.txnindex` format, collect semantics, truncation,
and corrupt files (torn, unknown version, out of range) refused by sanity_check."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from storage.index import CorruptIndexError
from storage.txn_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def index(tmp_path: Path, base: int = 0) -> TransactionIndex:
    return TransactionIndex(tmp_path / f"{base:020d}.txnindex", base)


def test_entry_bytes_are_kafkas_abortedtxn_layout() -> None:
    # version int16, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64
    expected = bytes.fromhex(
        "0000"
        "00000000000004d2"  # producer id 1234
        "000000000000000a"  # first offset 10
        "0000000000000014"  # last offset 20
        "000000000000000f"  # last stable offset 15
    )
    assert ENTRY_SIZE == 34
    assert AbortedTxn(1234, 10, 20, 15).to_bytes() == expected


def test_file_is_created_on_first_append_and_holds_the_entries(tmp_path: Path) -> None:
    idx = index(tmp_path)
    assert not idx.path.exists()  # like Kafka: most segments never need one
    a, b = AbortedTxn(1, 0, 5, 0), AbortedTxn(2, 3, 9, 6)
    idx.append(a)
    idx.append(b)
    idx.flush()
    assert idx.path.read_bytes() == a.to_bytes() + b.to_bytes()
    reopened = index(tmp_path)
    assert reopened.all_entries() == [a, b]
    reopened.sanity_check()


def test_append_refuses_a_last_offset_that_does_not_increase(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 0, 5, 0))
    with pytest.raises(ValueError, match="not above"):
        idx.append(AbortedTxn(2, 1, 5, 0))
    assert idx.entries == 1


def test_collect_follows_kafkas_overlap_and_completion_rules(tmp_path: Path) -> None:
    idx = index(tmp_path)
    t1 = AbortedTxn(1, 0, 4, 0)
    t2 = AbortedTxn(2, 2, 10, 5)
    t3 = AbortedTxn(3, 11, 20, 20)
    for t in (t1, t2, t3):
        idx.append(t)
    # [5, 11): t1 ends before it; t2 overlaps; t3 starts at 11 (exclusive bound).
    found, complete = idx.collect(5, 11)
    assert found == [t2]
    # t3's LSO 20 >= 11: no later segment can hold an overlapping one.
    assert complete
    found, complete = idx.collect(0, 30)
    assert found == [t1, t2, t3] and not complete
    # Stops at the first entry whose LSO reaches the bound (t2's 5 >= 5).
    found, complete = idx.collect(0, 5)
    assert found == [t1, t2] and complete


def test_truncate_to_drops_entries_ending_at_or_after_the_offset(tmp_path: Path) -> None:
    idx = index(tmp_path)
    entries = [AbortedTxn(1, 0, 4, 0), AbortedTxn(2, 5, 9, 5), AbortedTxn(3, 6, 12, 10)]
    for t in entries:
        idx.append(t)
    idx.truncate_to(10)
    assert idx.all_entries() == entries[:2]
    idx.truncate_to(9)
    assert idx.all_entries() == entries[:1]
    assert idx.path.stat().st_size == ENTRY_SIZE
    assert index(tmp_path).all_entries() == entries[:1]
    # After a truncation, appends continue from the new last entry.
    idx.append(AbortedTxn(4, 5, 7, 5))
    assert index(tmp_path).all_entries() == [entries[0], AbortedTxn(4, 5, 7, 5)]


def test_reset_empties_the_file(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.append(AbortedTxn(1, 0, 4, 0))
    idx.reset()
    assert idx.all_entries() == [] and idx.path.stat().st_size == 0
    idx.append(AbortedTxn(1, 0, 2, 0))  # the last-offset rule restarts too
    assert index(tmp_path).entries == 1


def test_rename_and_delete_follow_the_file_or_its_absence(tmp_path: Path) -> None:
    idx = index(tmp_path)
    idx.rename(tmp_path / "x.txnindex.cleaned")  # no file yet: just the new name
    idx.append(AbortedTxn(1, 0, 4, 0))
    assert (tmp_path / "x.txnindex.cleaned").exists()
    idx.rename(tmp_path / "x.txnindex")
    assert (tmp_path / "x.txnindex").exists() and not (tmp_path / "x.txnindex.cleaned").exists()
    idx.delete()
    assert not (tmp_path / "x.txnindex").exists()
    idx.delete()  # twice is fine


def test_torn_file_fails_sanity_check_until_truncated_below_it(tmp_path: Path) -> None:
    good = AbortedTxn(1, 0, 4, 0)
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(good.to_bytes() + AbortedTxn(2, 5, 9, 5).to_bytes()[:20])
    idx = index(tmp_path)
    assert idx.all_entries() == [good]  # the whole entries are still readable
    with pytest.raises(CorruptIndexError, match="not a whole number"):
        idx.sanity_check()
    idx.truncate_to(100)  # nothing to drop: the damage stays visible
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    idx.truncate_to(4)  # dropping the entry before the torn one cuts both
    idx.sanity_check()
    assert path.stat().st_size == 0 and idx.all_entries() == []


def test_append_after_a_torn_tail_does_not_misalign_entries(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 4, 0).to_bytes() + b"\x00\x00\x00")
    idx = index(tmp_path)
    idx.append(AbortedTxn(2, 5, 9, 5))
    assert index(tmp_path).all_entries() == [AbortedTxn(1, 0, 4, 0), AbortedTxn(2, 5, 9, 5)]


def test_unknown_version_fails_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 7, 1, 0, 4, 0))
    idx = index(tmp_path)
    with pytest.raises(CorruptIndexError, match="version 7"):
        idx.sanity_check()
    idx.reset()
    idx.sanity_check()


def test_entry_below_the_segment_base_fails_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / f"{100:020d}.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 50, 0).to_bytes())
    with pytest.raises(CorruptIndexError, match="below the segment's base offset 100"):
        index(tmp_path, 100).sanity_check()


def test_entries_out_of_order_fail_sanity_check(tmp_path: Path) -> None:
    path = tmp_path / f"{0:020d}.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 50, 0).to_bytes() + AbortedTxn(2, 0, 40, 0).to_bytes())
    with pytest.raises(CorruptIndexError, match="out of order"):
        index(tmp_path).sanity_check()
