"""A Hypothesis state machine over one transactional partition with real files: a
leader (replicas 1, 2) takes transactional and plain batches from a few producers,
COMMIT and ABORT markers, follower fetches that move the HW, segment rolls, and
restarts (clean, with a producer snapshot, or after a crash, without one). After every
step a read_committed reader that filters by the aborted lists the fetches return, as
Kafka's consumers do, must see exactly the model's committed records below the LSO, and
the LSO must never pass an open transaction or one whose marker is above the HW.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.hosted import HostedPartition
from broker.producer_state import marker_of
from broker.replica_manager import ReplicaManager
from storage.log_manager import LogManager
from storage.record_batch import iter_batches
from storage.records import Record, build_batch, decode_batch
from tests.harness.replicas import TOPIC, Metadata, broker_config, checked, fp, topic

PIDS = (11, 12, 13)


def manager(root: Path) -> ReplicaManager:
    cfg = broker_config(root, 1)
    lm = LogManager(cfg.log_dirs, cfg.log_config, cfg.log_manager_config)
    lm.startup()
    return ReplicaManager(cfg, lm)


def read_committed(rm: ReplicaManager) -> tuple[int, list[bytes]]:
    """(LSO, values) as a read_committed consumer sees them from offset 0."""
    out: list[bytes] = []
    offset = 0
    lso = -1
    while True:
        r = rm.fetch(fp(offset, max_bytes=1 << 20), -1, 1)
        assert r.error_code == 0, r
        lso = r.last_stable_offset
        raw = r.records.read() if r.records is not None and hasattr(r.records, "read") else b""
        if not raw:
            return lso, out
        pending = sorted(r.aborted or (), key=lambda a: a.first_offset)
        active: set[int] = set()
        for b in iter_batches(raw):
            while pending and pending[0].first_offset <= b.last_offset:
                active.add(pending.pop(0).producer_id)
            if b.is_control:
                m = marker_of(b)
                if m is not None and m[0] == 0:
                    active.discard(b.producer_id)
            elif not (b.is_transactional and b.producer_id in active):
                out.extend(rec.value for rec in decode_batch(b).records if rec.value)
            offset = b.last_offset + 1
        assert offset <= lso, "read past the LSO"


class TxnPartition(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="txn-model-"))
        self.md = Metadata()
        self.rm = manager(self.root)
        asyncio.run(self.rm.on_metadata_update(*self.md.update(*topic(replicas=(1, 2)))))
        self.seq = dict.fromkeys(PIDS, 0)
        self.n = 0
        self.open: dict[int, tuple[int, list[bytes]]] = {}  # pid -> (first offset, values)
        self.closed: list[tuple[int, int]] = []  # (first offset, marker offset)
        self.committed: list[tuple[int, bytes]] = []  # (offset, value) visible once stable

    @property
    def h(self) -> HostedPartition:
        h = self.rm.partition(TOPIC, 0)
        assert h is not None
        return h

    def teardown(self) -> None:
        self.rm.log_manager.shutdown()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(pid=st.sampled_from(PIDS), n=st.integers(1, 3), txn=st.booleans())
    def produce(self, pid: int, n: int, txn: bool) -> None:
        txn = txn or pid in self.open  # a plain batch inside a transaction is refused
        values = [f"{pid}-{self.n + i}".encode() for i in range(n)]
        self.n += n
        raw = build_batch(
            [Record(value=v) for v in values],
            producer_id=pid,
            producer_epoch=0,
            base_sequence=self.seq[pid],
            is_transactional=txn,
        )
        result, _last = self.h.append_as_leader(checked(raw))
        assert result.error_code == 0, result
        self.seq[pid] += n
        offsets = range(result.base_offset, result.base_offset + n)
        if txn:
            first, held = self.open.get(pid, (result.base_offset, []))
            self.open[pid] = (first, held + list(zip(offsets, values, strict=True)))  # type: ignore[arg-type]
        else:
            self.committed.extend(zip(offsets, values, strict=True))

    @precondition(lambda self: bool(self.open))
    @rule(data=st.data(), commit=st.booleans())
    def end(self, data: st.DataObject, commit: bool) -> None:
        pid = data.draw(st.sampled_from(sorted(self.open)))
        result, last = self.h.append_marker(pid, 0, commit, 0)
        assert result.error_code == 0, result
        first, held = self.open.pop(pid)
        self.closed.append((first, last))
        if commit:
            self.committed.extend(held)  # type: ignore[arg-type]

    @rule()
    def follower_fetches(self) -> None:
        h = self.h
        h.serve_follower_fetch(2, h.log.log_end_offset, -1, 1 << 20, 0, None)

    @rule()
    def roll(self) -> None:
        self.h.log.roll()

    @rule(clean=st.booleans())
    def restart(self, clean: bool) -> None:
        if clean:
            self.rm.snapshot_producer_states()
        self.rm.log_manager.shutdown()
        self.rm = manager(self.root)
        asyncio.run(self.rm.on_metadata_update(*self.md.snapshot()))

    @invariant()
    def lso_and_committed_view(self) -> None:
        h = self.h
        hw = h.core.high_watermark
        lso, values = read_committed(self.rm)
        assert lso == h.last_stable_offset <= hw
        for first, _held in self.open.values():
            assert lso <= first, (lso, first)
        for first, marker in self.closed:
            if marker >= hw:
                assert lso <= first, (lso, first, marker, hw)
        assert values == [v for o, v in sorted(self.committed) if o < lso]


TxnPartition.TestCase.settings = settings(max_examples=40, stateful_step_count=25, deadline=None)
test_txn_partition_model = TxnPartition.TestCase
