"""Transactions in the producer state core (broker/producer_state.py), driven directly:
open transactions, markers closing them, the first unstable offset and the LSO, the
fencing of markers and the transactional batch rules, verification guards, snapshot
entries; and a Hypothesis model checking that the LSO never passes an open transaction.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.producer_state import (
    ABORT,
    COMMIT,
    BatchHeader,
    ProducerStateError,
    ProducerStateManager,
    marker_of,
)
from common.errors import Errors
from storage.control_batch import build_marker_batch
from storage.producer_snapshot import SnapshotEntry
from storage.record_batch import RecordBatchView
from storage.records import Record, build_batch


def data(pid: int, epoch: int, seq: int, n: int = 1, txn: bool = True) -> BatchHeader:
    raw = build_batch(
        [Record(key=None, value=b"v")] * n,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
        now_ms=1,
    )
    return BatchHeader.of(RecordBatchView(raw))


def marker(pid: int, epoch: int, commit: bool, coordinator_epoch: int = 0) -> BatchHeader:
    raw = build_marker_batch(pid, epoch, COMMIT if commit else ABORT, coordinator_epoch, now_ms=1)
    return BatchHeader.of(RecordBatchView(raw))


def test_marker_of_reads_the_type_and_coordinator_epoch() -> None:
    raw = build_marker_batch(7, 2, ABORT, 9, now_ms=1)
    assert marker_of(RecordBatchView(raw)) == (ABORT, 9)
    raw = build_marker_batch(7, 2, COMMIT, 3, now_ms=1)
    h = BatchHeader.of(RecordBatchView(raw))
    assert h.is_control and h.is_transactional and h.marker == (COMMIT, 3)
    # A header-only view (a rebuild's first look) has no marker.
    assert BatchHeader.of(RecordBatchView(raw[:61])).marker is None


def test_transaction_opens_closes_and_stays_unstable_until_the_hw_passes_the_marker() -> None:
    ps = ProducerStateManager()
    assert ps.record([data(1, 0, 0, 3)], first_offset=10) == []  # offsets 10..12
    assert ps.has_ongoing_txn(1)
    assert ps.first_unstable_offset(13) == 10
    assert ps.last_stable_offset(13) == 10
    done = ps.record([marker(1, 0, commit=False, coordinator_epoch=4)], first_offset=13)
    assert [(t.producer_id, t.first_offset, t.last_offset, t.aborted) for t in done] == [
        (1, 10, 13, True)
    ]
    assert done[0].last_stable_offset == 14  # no other open transaction: after the marker
    assert not ps.has_ongoing_txn(1)
    assert ps.entry(1).coordinator_epoch == 4
    # The marker at 13 is not below the HW yet: the transaction is still unstable.
    assert ps.last_stable_offset(13) == 10
    assert ps.last_stable_offset(14) == 14
    assert ps.first_unstable_offset(10) is None  # completed once passed, for good


def test_aborted_lso_is_the_next_open_transaction_of_another_producer() -> None:
    ps = ProducerStateManager()
    ps.record([data(1, 0, 0)], first_offset=0)
    ps.record([data(2, 0, 0)], first_offset=1)
    done = ps.record([marker(1, 0, commit=False)], first_offset=2)
    assert done[0].last_stable_offset == 1
    assert ps.last_stable_offset(100) == 1  # producer 2 still open


def test_commit_of_an_empty_transaction_yields_nothing() -> None:
    ps = ProducerStateManager()
    assert ps.record([marker(5, 0, commit=True)], first_offset=0) == []
    assert ps.first_unstable_offset(1) is None


def test_non_transactional_batch_during_a_transaction_is_invalid_txn_state() -> None:
    ps = ProducerStateManager()
    ps.record([data(1, 0, 0)], first_offset=0)
    with pytest.raises(ProducerStateError) as exc:
        ps.check([data(1, 0, 1, txn=False)])
    assert exc.value.error_code == Errors.INVALID_TXN_STATE
    assert ps.check([data(1, 0, 1)]) is None  # transactional: fine


def test_markers_are_fenced_by_producer_and_coordinator_epochs() -> None:
    ps = ProducerStateManager()
    ps.record([data(1, 3, 0)], first_offset=0)
    ps.record([marker(1, 3, commit=True, coordinator_epoch=5)], first_offset=1)
    with pytest.raises(ProducerStateError) as old_epoch:
        ps.check_marker(1, 2, 5)
    assert old_epoch.value.error_code == Errors.INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as zombie:
        ps.check_marker(1, 3, 4)
    assert zombie.value.error_code == Errors.TRANSACTION_COORDINATOR_FENCED
    ps.check_marker(1, 4, 5)  # a bumped epoch (a timed-out abort) is fine
    ps.check_marker(99, 0, 0)  # unknown producer: nothing to fence


def test_abort_with_a_bumped_epoch_fences_the_old_producer() -> None:
    ps = ProducerStateManager()
    ps.record([data(1, 0, 0)], first_offset=0)
    ps.record([marker(1, 1, commit=False)], first_offset=1)  # coordinator's timeout abort
    with pytest.raises(ProducerStateError) as exc:
        ps.check([data(1, 0, 1)])
    assert exc.value.error_code == Errors.INVALID_PRODUCER_EPOCH


def test_verification_guard_must_still_be_current() -> None:
    ps = ProducerStateManager()
    first = data(1, 0, 0)
    with pytest.raises(ProducerStateError) as exc:
        ps.check([first], guard=None, verify=True)
    assert exc.value.error_code == Errors.INVALID_TXN_STATE
    guard = ps.start_verification(1)
    assert ps.check([first], guard=guard, verify=True) is None
    # A marker in between (the transaction the answer was about ended): refused.
    ps.record([marker(1, 0, commit=False)], first_offset=0)
    with pytest.raises(ProducerStateError):
        ps.check([first], guard=guard, verify=True)
    guard = ps.start_verification(1)
    ps.record([first], first_offset=1)  # opens the transaction, drops the guard
    assert ps.check([data(1, 0, 1)], guard=None, verify=True) is None  # ongoing: no guard


def test_snapshot_entries_round_trip_with_the_open_transaction() -> None:
    ps = ProducerStateManager()
    ps.record([data(1, 2, 0, 3)], first_offset=5)
    ps.record([data(2, 0, 0, txn=False)], first_offset=8)
    ps.record([marker(3, 0, commit=True, coordinator_epoch=7)], first_offset=9)
    entries = ps.snapshot_entries()
    assert all(isinstance(e, SnapshotEntry) for e in entries)
    by_pid = {e.producer_id: e for e in entries}
    assert by_pid[1] == SnapshotEntry(1, 2, 2, 7, 2, by_pid[1].timestamp, -1, 5)
    assert by_pid[3].coordinator_epoch == 7 and by_pid[3].last_offset == -1
    restored = ProducerStateManager()
    restored.load_snapshot(entries)
    assert restored.first_unstable_offset(100) == 5
    assert restored.check([data(1, 2, 3)]) is None  # continues the sequence
    dup = restored.check([data(1, 2, 0, 3)])
    assert dup is not None and dup.first_offset == 5  # the retried last batch


def test_rebuild_from_views_returns_the_aborted_transactions() -> None:
    raws = []
    for offset, raw in enumerate((
        build_batch([Record(None, b"a")], producer_id=1, producer_epoch=0, base_sequence=0,
                    is_transactional=True, now_ms=1),
        build_marker_batch(1, 0, ABORT, 0, now_ms=1),
        build_batch([Record(None, b"b")], producer_id=2, producer_epoch=0, base_sequence=0,
                    is_transactional=True, now_ms=1),
    )):  # fmt: skip
        buf = bytearray(raw)
        buf[0:8] = offset.to_bytes(8, "big")
        raws.append(bytes(buf))
    ps = ProducerStateManager()
    aborted = ps.rebuild(RecordBatchView(r) for r in raws)
    assert [(t.producer_id, t.first_offset, t.last_offset) for t in aborted] == [(1, 0, 1)]
    assert ps.ongoing_txns() == {2: 2}


# -- the model: the LSO never passes an open transaction ------------------------------------

ops = st.lists(
    st.tuples(
        st.sampled_from(["data", "txn", "commit", "abort", "hw"]),
        st.integers(min_value=1, max_value=3),  # producer id
        st.integers(min_value=1, max_value=3),  # records, or how far the HW moves
    ),
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ops)
def test_lso_never_passes_an_open_or_unreplicated_transaction(steps: list) -> None:
    ps = ProducerStateManager()
    leo, hw = 0, 0
    seqs: dict[int, int] = {}
    open_first: dict[int, int] = {}  # the model: pid -> first offset of its open transaction
    closed: list[tuple[int, int]] = []  # (first offset, marker offset) closed
    for op, pid, n in steps:
        if op in ("data", "txn"):
            txn = op == "txn" or pid in open_first  # a data batch would be refused
            h = data(pid, 0, seqs.get(pid, 0), n, txn=txn)
            assert ps.check([h]) is None
            ps.record([h], first_offset=leo)
            seqs[pid] = seqs.get(pid, 0) + n
            if txn and pid not in open_first:
                open_first[pid] = leo
            leo += n
        elif op in ("commit", "abort"):
            h = dataclasses.replace(marker(pid, 0, op == "commit"))
            done = ps.record([h], first_offset=leo)
            if pid in open_first:
                assert [t.first_offset for t in done] == [open_first[pid]]
                closed.append((open_first.pop(pid), leo))
            else:
                assert done == []
            leo += 1
        else:
            hw = min(leo, hw + n)
        lso = ps.last_stable_offset(hw)
        assert lso <= hw
        for first in open_first.values():
            assert lso <= first
        for first, marker_offset in closed:
            if marker_offset >= hw:
                assert lso <= first
        bound = [*open_first.values(), *(f for f, m in closed if m >= hw)]
        assert lso == min([hw, *bound])
