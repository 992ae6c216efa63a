"""Property: however transactional and plain writes, rolls and cleaner passes (at any
times) interleave, a read_committed reader (Kafka's consumer logic over the aborted
transactions list) sees the latest committed value of every key, and never a record of
an aborted or open transaction. Real files; Hypothesis draws the histories."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storage.control_batch import ABORT
from storage.log import Log
from storage.record_batch import iter_batches
from storage.records import decode_batch
from tests.harness.compaction import T0
from tests.storage.test_txn_cleaner import TxnLog

DAY = 86_400_000
KEYS = [b"a", b"b"]
PIDS = [10, 11]

op = st.one_of(
    st.tuples(st.just("plain"), st.sampled_from(KEYS)),
    st.tuples(st.just("txn"), st.sampled_from(PIDS), st.sampled_from(KEYS)),
    st.tuples(st.just("end"), st.sampled_from(PIDS), st.booleans()),
    st.tuples(st.just("roll")),
    st.tuples(st.just("clean"), st.integers(0, 3)),
)


def read_committed(log: Log, lso: int) -> list[tuple[int, bytes, bytes]]:
    """Kafka's consumer: aborted transactions by first offset; a producer is skipped
    from its aborted transaction's first offset until its ABORT marker."""
    pending = sorted(
        log.collect_aborted_txns(log.log_start_offset, lso), key=lambda a: a.first_offset
    )
    aborting: set[int] = set()
    out = []
    offset = log.log_start_offset
    while offset < lso:
        views = list(iter_batches(log.read(offset, 1 << 20, max_offset=lso).read()))
        if not views:
            break
        for v in views:
            while pending and pending[0].first_offset <= v.last_offset:
                aborting.add(pending.pop(0).producer_id)
            d = decode_batch(v)
            if v.is_control:
                if d.records[0].key and d.records[0].key[2:4] == ABORT.to_bytes(2, "big"):
                    aborting.discard(v.producer_id)
                continue
            if v.is_transactional and v.producer_id in aborting:
                continue
            out += [(r.offset, r.key, r.value) for r in d.records if r.offset >= offset]
        offset = views[-1].next_offset
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(op, min_size=5, max_size=30))
def test_read_committed_view_survives_cleaning(ops: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = TxnLog(Path(tmp))
        now = T0
        committed: dict[bytes, tuple[int, bytes]] = {}  # key -> (offset, value)
        pending: dict[int, list[tuple[int, bytes, bytes]]] = {pid: [] for pid in PIDS}
        aborted_values: set[bytes] = set()
        n = 0
        for o in ops:
            n += 1
            if o[0] == "plain":
                value = b"p%d" % n
                offset = t.plain([(o[1], value)])
                committed[o[1]] = (offset, value)
            elif o[0] == "txn":
                value = b"t%d" % n
                offset = t.txn(o[1], [(o[2], value)])
                pending[o[1]].append((offset, o[2], value))
            elif o[0] == "end":
                pid = o[1]
                if pid not in t.first:
                    continue
                t.end(pid, commit=o[2])
                for offset, key, value in pending[pid]:
                    if o[2]:
                        if committed.get(key, (-1, b""))[0] < offset:
                            committed[key] = (offset, value)
                    else:
                        aborted_values.add(value)
                pending[pid] = []
            elif o[0] == "roll":
                t.log.roll()
            else:  # a pass over everything written so far that may be cleaned
                now += o[1] * DAY
                t.log.roll()
                t.clean(now)
        lso = t.unstable()
        seen = read_committed(t.log, lso)
        open_values = {v for recs in pending.values() for _o, _k, v in recs}
        assert not {v for _o, _k, v in seen} & (aborted_values | open_values)
        latest: dict[bytes, tuple[int, bytes]] = {}
        for offset, key, value in seen:
            latest[key] = (offset, value)
        # Committed records at or above the LSO are not visible yet.
        expected = {k: ov for k, ov in committed.items() if ov[0] < lso}
        for key, (offset, value) in expected.items():
            assert latest.get(key) == (offset, value), key
        assert t.log.txn_indexes_ok()
