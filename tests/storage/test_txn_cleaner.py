"""Compaction of transactional data (storage/cleaner.py, storage/cleaner_txn.py), as
Kafka's LogCleaner: aborted data goes, committed data is compacted like any other with
its batch headers intact, a marker stays while its transaction has data and goes one
delete.retention.ms after that, the cleaned segment's `.txnindex` keeps the aborts still
needed, and nothing at or above the first unstable offset is touched. Real files."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from storage.cleaner import CleanerStats, clean_log, plan_cleaning
from storage.control_batch import ABORT, COMMIT, build_marker_batch, marker_of
from storage.log import Log
from storage.log_manager import LogManager
from storage.record_batch import DELETE_HORIZON_MASK, iter_batches
from storage.records import Record, build_batch, decode_batch
from storage.txn_index import AbortedTxn
from tests.harness.compaction import (
    T0,
    Clock,
    SimulatedCrash,
    abandon,
    compact_config,
    crash_at,
    steps,
)

DAY = 86_400_000
Pairs = list[tuple[bytes, bytes | None]]


@dataclass
class Batch:
    base: int
    last: int
    control: bool
    txn: bool
    pid: int
    epoch: int
    seq: int
    horizon: bool
    records: list[tuple[int, bytes | None, bytes | None]]
    marker: tuple[int, int] | None


def batches(log: Log) -> list[Batch]:
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        views = list(iter_batches(log.read(offset, 1 << 20).read()))
        if not views:
            break
        for v in views:
            d = decode_batch(v)
            out.append(
                Batch(
                    v.base_offset,
                    v.last_offset,
                    v.is_control,
                    v.is_transactional,
                    v.producer_id,
                    v.producer_epoch,
                    v.base_sequence,
                    bool(v.attributes & DELETE_HORIZON_MASK),
                    [(r.offset, r.key, r.value) for r in d.records],
                    marker_of(v),
                )
            )
        offset = views[-1].next_offset
    return out


class TxnLog:
    """A compacted log written as a partition leader would: transactional batches,
    markers, and the abort index entries."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = Clock()
        self.log = Log(tmp_path / "t-0", compact_config(segment_bytes=1 << 20), clock=self.clock)
        self.first: dict[int, int] = {}  # producer id -> first offset of its open txn
        self.seq: dict[int, int] = {}

    def plain(self, pairs: Pairs) -> int:
        records = [Record(v, k, timestamp=T0) for k, v in pairs]
        return self.log.append_as_leader(build_batch(records, now_ms=T0), 0).first_offset

    def txn(self, pid: int, pairs: Pairs) -> int:
        seq = self.seq.get(pid, 0)
        records = [Record(v, k, timestamp=T0) for k, v in pairs]
        batch = build_batch(
            records,
            producer_id=pid,
            producer_epoch=3,
            base_sequence=seq,
            is_transactional=True,
            now_ms=T0,
        )
        self.seq[pid] = seq + len(pairs)
        first = self.log.append_as_leader(batch, 0).first_offset
        self.first.setdefault(pid, first)
        return first

    def end(self, pid: int, commit: bool) -> int:
        marker = build_marker_batch(pid, 3, COMMIT if commit else ABORT, 5, now_ms=T0)
        offset = self.log.append_as_leader(marker, 0).first_offset
        first = self.first.pop(pid)
        if not commit:
            self.log.add_aborted_txn(AbortedTxn(pid, first, offset, self.unstable()))
        return offset

    def unstable(self) -> int:
        return min(self.first.values(), default=self.log.log_end_offset)

    def clean(self, now: int = T0, bound: int | None = -1) -> CleanerStats:
        """-1: bounded by the open transactions; None: the caller knows of none."""
        fuo = self.unstable() if bound == -1 else bound
        plan = plan_cleaning(self.log, self.log.cleaner_checkpoint, None, now, fuo)
        return clean_log(plan, now)


def values(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    return [r for b in batches(log) if not b.control for r in b.records]


def markers(log: Log) -> list[tuple[int, int, bool]]:
    """(offset, control type, has a delete horizon) of every marker."""
    return [(b.base, b.marker[0], b.horizon) for b in batches(log) if b.marker]


def test_aborted_data_goes_and_committed_data_is_compacted(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.plain([(b"k1", b"v0")])  # 0
    t.txn(10, [(b"k1", b"bad"), (b"k2", b"bad")])  # 1-2, aborted below
    t.txn(20, [(b"k3", b"c1"), (b"k1", b"c1")])  # 3-4, committed below
    abort_at = t.end(10, commit=False)  # 5
    commit_at = t.end(20, commit=True)  # 6
    t.log.roll()
    t.plain([(b"k3", b"v7")])  # 7
    t.log.roll()
    stats = t.clean()
    assert stats.completed
    # k1's latest is the committed c1 (the aborted "bad" at 1 was never mapped), k2 only
    # ever existed in the aborted transaction, k3's c1 lost to v7.
    assert values(t.log) == [(4, b"k1", b"c1"), (7, b"k3", b"v7")]
    assert stats.aborted_records_removed == 2
    # Both transactions had data in this pass: the markers stay, without a horizon.
    assert markers(t.log) == [(abort_at, ABORT, False), (commit_at, COMMIT, False)]
    # The abort is still indexed (in the cleaned segment's fresh .txnindex).
    assert t.log.collect_aborted_txns(0, 100) == [AbortedTxn(10, 1, 5, 3)]  # LSO: txn 20
    assert t.log.txn_indexes_ok()


def test_retained_transactional_batches_keep_their_headers(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.txn(20, [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")])  # 0-2
    t.end(20, commit=True)  # 3
    t.plain([(b"b", b"x")])  # 4
    t.log.roll()
    t.clean()
    kept = batches(t.log)[0]
    assert (kept.base, kept.last) == (0, 2)  # offsets stay, a record went from the middle
    assert kept.txn and not kept.control
    assert (kept.pid, kept.epoch, kept.seq) == (20, 3, 0)
    assert kept.records == [(0, b"a", b"1"), (2, b"c", b"3")]


def test_markers_go_one_delete_retention_after_their_data(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.txn(10, [(b"k", b"aborted")])  # 0
    abort_at = t.end(10, commit=False)  # 1
    t.txn(20, [(b"k", b"committed")])  # 2
    commit_at = t.end(20, commit=True)  # 3
    t.log.roll()
    t.clean()  # pass 1: the aborted data goes; the committed stays (latest of k)
    assert values(t.log) == [(2, b"k", b"committed")]
    assert markers(t.log) == [(abort_at, ABORT, False), (commit_at, COMMIT, False)]

    t.plain([(b"k", b"plain")])  # supersedes the committed value
    t.log.roll()
    t.clean(T0 + 1)  # pass 2: the abort has no data left (horizon); the commit's data goes
    assert values(t.log) == [(4, b"k", b"plain")]
    assert markers(t.log) == [(abort_at, ABORT, True), (commit_at, COMMIT, False)]
    # No data of the aborted transaction is left: its index entry is not carried over.
    assert t.log.collect_aborted_txns(0, 100) == []

    t.plain([(b"z", b"1")])
    t.log.roll()
    t.clean(T0 + 2)  # pass 3: the commit's data is gone now: its horizon starts
    assert markers(t.log) == [(abort_at, ABORT, True), (commit_at, COMMIT, True)]

    t.plain([(b"z", b"2")])
    t.log.roll()
    stats = t.clean(T0 + 1 + DAY)  # pass 4: the abort's horizon passed, the commit's not
    assert markers(t.log) == [(commit_at, COMMIT, True)]
    assert stats.markers_removed == 1

    t.plain([(b"z", b"3")])
    t.log.roll()
    t.clean(T0 + 2 + DAY)
    assert markers(t.log) == []
    assert values(t.log) == [(4, b"k", b"plain"), (7, b"z", b"3")]


def test_nothing_at_or_above_the_first_unstable_offset_is_cleaned(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.plain([(b"k", b"old")])  # 0
    t.log.roll()
    t.txn(30, [(b"k", b"open")])  # 1: an open transaction, may still abort
    t.log.roll()
    t.plain([(b"k", b"newer")])  # 2
    t.log.roll()
    before = batches(t.log)
    stats = t.clean()
    # The range ends at the segment holding 1: "old" stays although keys above hide it.
    assert batches(t.log) == before
    assert stats.end_offset <= 1
    assert t.log.cleaner_checkpoint is None or t.log.cleaner_checkpoint <= 1

    t.end(30, commit=False)  # 3: it aborts; now everything may be cleaned
    t.log.roll()
    t.clean()
    assert values(t.log) == [(2, b"k", b"newer")]


def test_an_open_transaction_is_never_taken_for_committed(tmp_path: Path) -> None:
    """Its keys must not hide older values, or an abort would lose them."""
    t = TxnLog(tmp_path)
    t.plain([(b"k", b"old")])  # 0
    t.txn(30, [(b"k", b"open")])  # 1
    t.log.roll()
    t.plain([(b"x", b"1")])
    t.log.roll()
    t.clean()
    assert (0, b"k", b"old") in values(t.log)


def test_without_a_bound_transactional_batches_stay_whole(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.txn(10, [(b"k", b"a")])  # 0
    t.end(10, commit=False)  # 1
    t.plain([(b"k", b"b")])  # 2
    t.log.roll()
    t.plain([(b"k", b"c")])  # 3
    t.log.roll()
    t.clean(bound=None)
    # Without the first unstable offset the cleaner cannot tell open from aborted.
    assert values(t.log) == [(0, b"k", b"a"), (3, b"k", b"c")]
    assert markers(t.log) == [(1, ABORT, False)]


def test_the_log_hook_bounds_the_cleaner(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.plain([(b"k", b"old")])  # 0
    t.log.roll()
    t.txn(30, [(b"k", b"open")])  # 1
    t.log.roll()
    t.plain([(b"k", b"newer")])
    t.log.roll()
    t.log.first_unstable_offset_fn = t.unstable
    plan = plan_cleaning(t.log, None, None, T0)
    assert plan.txn_aware and plan.first_uncleanable_offset == 1


def test_an_abort_spanning_segments_is_cleaned_and_indexed(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.txn(10, [(b"a", b"bad")])  # 0
    t.plain([(b"a", b"good")])  # 1
    t.log.roll()
    t.txn(10, [(b"b", b"bad")])  # 2
    t.log.roll()
    abort_at = t.end(10, commit=False)  # 3, marker in a third segment
    t.plain([(b"c", b"1")])  # 4
    t.log.roll()
    t.clean()
    assert values(t.log) == [(1, b"a", b"good"), (4, b"c", b"1")]
    assert markers(t.log) == [(abort_at, ABORT, False)]
    assert t.log.collect_aborted_txns(0, 100) == [AbortedTxn(10, 0, 3, 4)]
    t.log.close()
    reopened = Log(t.log.dir, t.log.config, clock=Clock(), had_clean_shutdown=True)
    assert reopened.txn_indexes_ok()
    assert reopened.collect_aborted_txns(0, 100) == [AbortedTxn(10, 0, 3, 4)]


def test_an_aborted_marker_past_the_range_still_removes_its_data(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.txn(10, [(b"a", b"bad")])  # 0
    t.plain([(b"a", b"good"), (b"b", b"1")])  # 1-2
    t.log.roll()
    t.end(10, commit=False)  # 3: in the active segment, never cleaned
    t.clean()
    assert values(t.log) == [(1, b"a", b"good"), (2, b"b", b"1")]
    assert t.log.collect_aborted_txns(0, 100) == [AbortedTxn(10, 0, 3, 4)]


def test_no_stale_index_survives_a_swap(tmp_path: Path) -> None:
    """The first replaced segment's .txnindex must not become the cleaned one's."""
    t = TxnLog(tmp_path)
    t.txn(10, [(b"a", b"bad")])  # 0
    t.end(10, commit=False)  # 1
    t.plain([(b"x", b"1")])
    t.log.roll()
    t.plain([(b"x", b"2")])
    t.log.roll()
    t.clean()
    t.plain([(b"x", b"3")])
    t.log.roll()
    t.clean(T0 + 1)  # the abort has no data: its entry goes with the old index
    assert t.log.collect_aborted_txns(0, 100) == []
    assert not list(t.log.dir.glob("00000000000000000000.txnindex*")) or (
        (t.log.dir / "00000000000000000000.txnindex").stat().st_size == 0
    )
    assert not [p for p in t.log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def crash_fixture(path: Path) -> TxnLog:
    t = TxnLog(path)
    for i in range(6):
        t.txn(10 + i, [(b"k%d" % i, b"t%d" % i)])
        t.plain([(b"k%d" % i, b"p%d" % i)])
        t.end(10 + i, commit=i % 2 == 0)
        t.log.roll()
    return t


def test_a_crash_at_any_step_of_a_transactional_swap_recovers(tmp_path: Path) -> None:
    reference = crash_fixture(tmp_path / "reference")
    with crash_at(None) as calls:
        reference.clean()
    aborts = reference.log.collect_aborted_txns(0, 1000)
    assert [a.producer_id for a in aborts] == [11, 13, 15]
    for step in range(len(steps(calls))):
        t = crash_fixture(tmp_path / f"crash-{step}")
        with crash_at(step), pytest.raises(SimulatedCrash):
            t.clean()
        abandon(t.log)
        reopened = Log(t.log.dir, t.log.config, clock=Clock())
        assert reopened.txn_indexes_ok(), step
        assert reopened.collect_aborted_txns(0, 1000) == aborts, step
        t.log = reopened
        t.clean()
        # The same records and markers; a marker whose data went in the crashed pass
        # may now have its delete horizon (and its abort no index entry): two passes.
        assert values(reopened) == values(reference.log), step
        assert [m[:2] for m in markers(reopened)] == [m[:2] for m in markers(reference.log)]
        assert set(reopened.collect_aborted_txns(0, 1000)) <= set(aborts), step
        assert reopened.txn_indexes_ok(), step


def idempotent(t: TxnLog, pid: int, pairs: Pairs) -> int:
    records = [Record(v, k, timestamp=T0) for k, v in pairs]
    batch = build_batch(records, producer_id=pid, producer_epoch=1, base_sequence=0, now_ms=T0)
    return t.log.append_as_leader(batch, 0).first_offset


def test_an_active_producers_last_batch_is_kept_whole(tmp_path: Path) -> None:
    for active in (False, True):
        t = TxnLog(tmp_path / str(active))
        at = idempotent(t, 40, [(b"k", b"old")])  # 0: producer 40's last batch
        t.plain([(b"k", b"new")])  # 1 hides it
        t.log.roll()
        t.log.active_producers_fn = (lambda at=at: {40: (at, 1)}) if active else None
        t.clean()
        kept = [b for b in batches(t.log) if b.pid == 40]
        if active:  # its sequence and epoch stay in the log (Kafka keeps it, emptied)
            assert [(b.base, b.epoch, b.seq) for b in kept] == [(0, 1, 0)]
        else:
            assert kept == []


def test_an_active_producers_last_marker_outlives_its_horizon(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.txn(10, [(b"k", b"a")])  # 0
    at = t.end(10, commit=False)  # 1: producer 10's last entry
    t.log.roll()
    t.log.active_producers_fn = lambda: {10: (-1, 3)}
    for i, now in enumerate((T0, T0 + 1, T0 + 2 * DAY)):
        t.plain([(b"z", b"%d" % i)])
        t.log.roll()
        t.clean(now)
    assert [m[:2] for m in markers(t.log)] == [(at, ABORT)]
    t.log.active_producers_fn = lambda: {10: (-1, 4)}  # a newer epoch: no longer its last
    t.plain([(b"z", b"x")])
    t.log.roll()
    t.clean(T0 + 3 * DAY)
    assert markers(t.log) == []


def test_an_aborted_record_never_hides_an_older_committed_one(tmp_path: Path) -> None:
    t = TxnLog(tmp_path)
    t.plain([(b"k", b"old")])  # 0
    t.txn(10, [(b"k", b"bad")])  # 1: the newest of k, but aborted
    t.end(10, commit=False)  # 2
    t.log.roll()
    t.clean()
    assert values(t.log) == [(0, b"k", b"old")]


def test_a_crash_while_the_loader_completes_a_transactional_swap(tmp_path: Path) -> None:
    reference = crash_fixture(tmp_path / "reference")
    with crash_at(None) as calls:
        reference.clean()
    aborts = reference.log.collect_aborted_txns(0, 1000)
    done = steps(calls)
    # Every step from the swap's commit (.log.cleaned renamed) to its end.
    commit = next(
        i for i, c in enumerate(done) if c.startswith("replace") and c.endswith(".log.cleaned")
    )
    for step in range(commit + 1, len(done)):
        t = crash_fixture(tmp_path / f"crash-{step}")
        with crash_at(step), pytest.raises(SimulatedCrash):
            t.clean()
        abandon(t.log)
        crashed = tmp_path / f"crashed-{step}"
        shutil.copytree(t.log.dir, crashed)
        with crash_at(None) as loader_calls:
            Log(t.log.dir, t.log.config, clock=Clock()).close()
        for second in range(len(steps(loader_calls))):
            copy = tmp_path / f"copy-{step}-{second}" / "t-0"
            shutil.copytree(crashed, copy)
            with crash_at(second), pytest.raises(SimulatedCrash):
                Log(copy, t.log.config, clock=Clock())
            reopened = Log(copy, t.log.config, clock=Clock())
            assert reopened.txn_indexes_ok(), (step, second)
            assert reopened.collect_aborted_txns(0, 1000) == aborts, (step, second)
            assert values(reopened) == values(reference.log), (step, second)


def test_the_log_managers_cleaner_honours_the_log_hooks(tmp_path: Path) -> None:
    """The broker's cleaner thread goes through LogManager.clean_compacted_logs, which
    knows nothing of transactions: the partition layer's hooks on the Log bound it."""
    manager = LogManager([tmp_path], compact_config(segment_bytes=1 << 20), clock=Clock())
    log = manager.get_or_create_log("t", 0)
    t = TxnLog.__new__(TxnLog)
    t.clock, t.log, t.first, t.seq = Clock(), log, {}, {}
    t.plain([(b"k", b"old")])  # 0
    t.log.roll()
    t.txn(30, [(b"k", b"open")])  # 1: open
    t.txn(31, [(b"a", b"bad")])  # 2
    t.end(31, commit=False)  # 3
    t.log.roll()
    t.plain([(b"k", b"newer")])  # 4
    t.log.roll()
    log.first_unstable_offset_fn = t.unstable
    manager.clean_compacted_logs(now_ms=T0)
    assert (0, b"k", b"old") in values(log)  # the open transaction bounds the pass
    assert (2, b"a", b"bad") in values(log)  # above the bound: untouched
    t.end(30, commit=False)  # 5
    t.log.roll()
    manager.clean_compacted_logs(now_ms=T0)
    assert values(log) == [(4, b"k", b"newer")]
    manager.shutdown()
