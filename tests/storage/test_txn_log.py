"""The `.txnindex` and `.snapshot` lifecycle in `Log` (storage/log_txn.py): which
segment an abort is indexed in, collection across segments, truncation, segment
deletion, restart, sanity checks, snapshot retention, and the roll callback.
Real files in tmp_path."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.config import LogConfig
from storage.control_batch import ABORT, build_marker_batch
from storage.log import Log
from storage.producer_snapshot import SnapshotEntry, snapshot_path
from storage.records import Record, build_batch
from storage.txn_index import AbortedTxn
from tests.harness.compaction import T0, Clock, abandon

PID = 77


def new_log(tmp_path: Path, clean: bool = False, **config: object) -> Log:
    """`clean`: reopen as after a clean shutdown (no rescan of the segments)."""
    cfg = LogConfig(**{"segment_bytes": 1 << 20, **config})  # type: ignore[arg-type]
    return Log(tmp_path / "t-0", cfg, clock=Clock(), had_clean_shutdown=clean)


def data(log: Log, n: int = 1, pid: int = PID) -> int:
    """Append one transactional batch of `n` records; returns its base offset."""
    records = [Record(b"v%d" % i, b"k%d" % i, timestamp=T0) for i in range(n)]
    batch = build_batch(
        records,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
        now_ms=T0,
    )
    return log.append_as_leader(batch, 0).first_offset


def abort(log: Log, first: int, pid: int = PID) -> AbortedTxn:
    """Append an ABORT marker and index it as the partition layer does."""
    marker = log.append_as_leader(build_marker_batch(pid, 0, ABORT, 1, now_ms=T0), 0)
    txn = AbortedTxn(pid, first, marker.first_offset, marker.first_offset)
    log.add_aborted_txn(txn)
    return txn


def txn_files(log: Log) -> list[str]:
    return sorted(p.name for p in log.dir.glob("*.txnindex*"))


def test_abort_is_indexed_in_the_segment_holding_its_marker(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    first = data(log, 3)
    log.roll()
    assert txn_files(log) == []  # no aborts, no file (as Kafka)
    txn = abort(log, first)
    assert txn == AbortedTxn(PID, 0, 3, 3)
    assert txn_files(log) == ["00000000000000000003.txnindex"]
    assert log.segments[0].txn_index.entries == 0
    assert log.segments[1].txn_index.all_entries() == [txn]


def test_add_aborted_txn_refuses_a_marker_outside_the_log(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log)
    with pytest.raises(ValueError, match="outside the log"):
        log.add_aborted_txn(AbortedTxn(PID, 0, 5, 5))


def test_replaying_an_indexed_abort_is_a_no_op(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    txn = abort(log, data(log))
    log.add_aborted_txn(txn)  # recovery from an older snapshot replays the marker
    assert log.segments[0].txn_index.all_entries() == [txn]
    with pytest.raises(ValueError, match="not above"):
        log.add_aborted_txn(AbortedTxn(PID + 1, 0, txn.last_offset, 0))


def three_segments(log: Log) -> list[AbortedTxn]:
    """Aborts in segments 0, 1 and 2 (a transaction spanning a roll in the middle)."""
    t1 = abort(log, data(log, 2))  # offsets 0-1, marker 2
    log.roll()
    first = data(log, 2, pid=8)  # 3-4, aborted in the next segment
    log.roll()
    t2 = abort(log, first, pid=8)  # marker 5
    t3 = abort(log, data(log), pid=9)  # 6, marker 7
    data(log)  # 8
    return [t1, t2, t3]


def test_collect_aborted_txns_across_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    t1, t2, t3 = three_segments(log)
    assert log.collect_aborted_txns(0, 9) == [t1, t2, t3]
    # From the middle segment: its index is empty, the marker of t2 is in the next one.
    assert log.collect_aborted_txns(3, 5) == [t2]
    assert log.collect_aborted_txns(8, 9) == []
    # Below the first segment (a follower's gap) starts from the first one.
    assert log.collect_aborted_txns(0, 2) == [t1]


def test_truncate_to_drops_entries_and_files_of_removed_segments(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    t1, t2, _t3 = three_segments(log)
    log.truncate_to(7)  # the marker of t3 goes
    assert log.collect_aborted_txns(0, 100) == [t1, t2]
    log.truncate_to(4)  # the segment at 5 and its index go
    assert txn_files(log) == ["00000000000000000000.txnindex"]
    assert log.collect_aborted_txns(0, 100) == [t1]
    log.truncate_to(2)
    assert log.collect_aborted_txns(0, 100) == []
    assert (log.dir / "00000000000000000000.txnindex").stat().st_size == 0


def test_truncate_fully_and_start_at_leaves_no_index(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    three_segments(log)
    log.truncate_fully_and_start_at(100)
    assert txn_files(log) == []
    assert log.collect_aborted_txns(100, 200) == []


def test_deleting_old_segments_drops_their_indexes(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    _t1, t2, t3 = three_segments(log)
    log.delete_records_before(3)  # the first segment goes
    assert txn_files(log) == ["00000000000000000005.txnindex"]
    assert log.collect_aborted_txns(3, 100) == [t2, t3]
    log.delete_records_before(9)
    log.delete_old_segments()
    assert txn_files(log) == []


def test_restart_reopens_the_indexes(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    txns = three_segments(log)
    log.flush()
    log.close()
    for clean in (True, False):
        reopened = new_log(tmp_path, clean=clean)
        assert reopened.txn_indexes_ok()
        assert reopened.collect_aborted_txns(0, 100) == txns
        reopened.close()


def test_crash_recovery_cuts_entries_past_the_surviving_log(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    t1 = abort(log, data(log))  # marker 1
    t2 = abort(log, data(log))  # marker 3
    seg = log.active_segment
    cut = seg.translate_offset(3)
    assert cut is not None
    log.flush()
    abandon(log)
    with open(seg.log_path, "r+b") as f:  # the last marker did not reach the disk
        f.truncate(cut.position + 10)
    reopened = new_log(tmp_path)
    assert reopened.log_end_offset == 3
    assert reopened.txn_indexes_ok()
    assert reopened.collect_aborted_txns(0, 100) == [t1]
    assert t2 not in reopened.active_segment.txn_index.all_entries()


def test_a_torn_index_is_reported_and_reset_rebuilds(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    t1 = abort(log, data(log))
    log.close()
    path = log.dir / "00000000000000000000.txnindex"
    path.write_bytes(path.read_bytes() + b"\x00" * 5)
    reopened = new_log(tmp_path, clean=True)
    assert not reopened.txn_indexes_ok()
    reopened.reset_txn_indexes()
    assert reopened.txn_indexes_ok() and path.stat().st_size == 0
    reopened.add_aborted_txn(t1)  # the partition layer's rebuild from the log
    assert reopened.collect_aborted_txns(0, 10) == [t1]


def test_an_entry_past_the_segment_is_reported(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log)
    log.roll()
    data(log)
    log.close()
    # An entry naming offset 1 in the first segment, which ends at 1.
    path = log.dir / "00000000000000000000.txnindex"
    path.write_bytes(AbortedTxn(1, 0, 1, 1).to_bytes())
    assert not new_log(tmp_path, clean=True).txn_indexes_ok()
    # A rescan of the segments (an unclean stop) cuts it instead.
    assert new_log(tmp_path).txn_indexes_ok()
    assert path.stat().st_size == 0


def test_an_orphan_index_is_deleted_at_load(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log)
    log.close()
    orphan = log.dir / "00000000000000000050.txnindex"
    orphan.write_bytes(AbortedTxn(1, 50, 51, 51).to_bytes())
    new_log(tmp_path)
    assert not orphan.exists()


# -- producer snapshots ------------------------------------------------------------------------

E = SnapshotEntry(PID, 0, 4, 10, 0, T0, 3, -1)


def snapshot_offsets(log: Log) -> list[int]:
    return sorted(int(p.name.split(".")[0]) for p in log.dir.glob("*.snapshot"))


def test_snapshots_keep_the_newest_two(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log, 10)
    for offset in (2, 5, 8):
        log.take_producer_snapshot([E], offset)
    assert snapshot_offsets(log) == [5, 8] == log.producer_snapshot_offsets()
    assert log.latest_producer_snapshot(10) == (8, [E])
    assert log.latest_producer_snapshot(7) == (5, [E])
    assert log.latest_producer_snapshot(4) is None


def test_an_unreadable_snapshot_is_deleted_and_the_older_one_used(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log, 10)
    log.take_producer_snapshot([E], 5)
    log.take_producer_snapshot([E, E], 8)
    path = snapshot_path(log.dir, 8)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    assert log.latest_producer_snapshot(10) == (5, [E])
    assert not path.exists()


def test_truncation_deletes_snapshots_above_the_new_end(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for _ in range(10):
        data(log)
    log.take_producer_snapshot([E], 4)
    log.take_producer_snapshot([E], 10)
    log.truncate_to(4)  # a snapshot at the new end still describes the log below it
    assert snapshot_offsets(log) == [4]
    log.truncate_fully_and_start_at(50)
    assert snapshot_offsets(log) == []


def test_snapshots_below_the_log_start_are_deleted(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    for _ in range(10):
        data(log)
    log.take_producer_snapshot([E], 3)
    log.take_producer_snapshot([E], 6)
    log.delete_records_before(6)  # inside the only segment: no file goes but snapshots
    assert snapshot_offsets(log) == [6]


def test_deleting_segments_deletes_snapshots_below_the_new_start(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log, 5)
    log.take_producer_snapshot([E], 3)
    log.roll()
    log.take_producer_snapshot([E], 5)
    data(log, 5)
    log.delete_records_before(5)
    assert log.log_start_offset == 5 and snapshot_offsets(log) == [5]


def test_reopening_drops_snapshots_the_log_no_longer_backs(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log, 10)
    log.take_producer_snapshot([E], 10)
    log.flush()
    seg = log.active_segment
    cut = seg.translate_offset(0)
    assert cut is not None
    abandon(log)
    with open(seg.log_path, "r+b") as f:  # the whole batch was torn by a crash
        f.truncate(cut.position + 20)
    reopened = new_log(tmp_path)
    assert reopened.log_end_offset == 0
    assert snapshot_offsets(reopened) == []


def test_snapshot_survives_restart_and_tmp_leftovers_go(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    data(log, 3)
    log.take_producer_snapshot([E], 3)
    log.close()
    leftover = log.dir / "00000000000000000002.snapshot.tmp"
    leftover.write_bytes(b"torn")
    reopened = new_log(tmp_path)
    assert reopened.latest_producer_snapshot(reopened.log_end_offset) == (3, [E])
    assert not leftover.exists()


def test_on_roll_is_called_with_the_new_base(tmp_path: Path) -> None:
    log = new_log(tmp_path, segment_bytes=200)
    rolls: list[tuple[int, int]] = []
    log.on_roll = lambda base: rolls.append((base, log.log_end_offset))
    data(log, 1)
    log.roll()
    assert rolls == [(1, 1)]
    log.roll()  # nothing appended: no new segment, no call
    assert rolls == [(1, 1)]
    for _ in range(10):  # size-driven rolls call it too, before the new batch is written
        data(log, 1)
    assert len(rolls) > 1
    assert all(base == leo for base, leo in rolls)
