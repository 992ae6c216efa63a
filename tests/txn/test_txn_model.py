"""A Hypothesis state machine of transactions end to end, from the sans-I/O cores only:
the transaction coordinator (`broker/txn/coordinator.py`) and, for each data partition,
the partition's producer state (`broker/producer_state.py`) over an in-memory log.

Hypothesis drives two transactional producers (InitProducerId, AddPartitionsToTxn,
transactional appends, EndTxn commit or abort), the coordinator's writes to
`__transaction_state` (each succeeds or fails, in any order), its marker sends (in any
order, possibly after a failover), the HW of each partition, time (timeouts abort with
an epoch bump) and coordinator failovers (unload, then load from the log with the next
coordinator epoch, which sends the markers of prepared transactions again).

After every step:
- a read_committed reader (Kafka's consumer algorithm: records below the LSO, skipping a
  producer's batches from an aborted transaction's first offset to its abort marker, and
  control batches) sees only records whose transaction committed;
- the LSO never passes the first offset of an open transaction;
- a transaction the coordinator completed has its marker on every partition it wrote to;
- a transactional id's producer epoch never goes back (for the same producer id).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.group.messages import Append, Reply
from broker.producer_state import (
    BatchHeader,
    CompletedTxn,
    ProducerStateError,
    ProducerStateManager,
)
from broker.txn.config import TxnConfig
from broker.txn.coordinator import TransactionCoordinatorCore
from broker.txn.messages import SendMarkers
from broker.txn.state import TransactionState
from common.errors import Errors
from storage.control_batch import ABORT, COMMIT

TOPIC = "t"
PARTS = (0, 1)
TIDS = ("a", "b")
TIMEOUT_MS = 5_000
S = TransactionState


@dataclass
class Entry:
    offset: int
    producer_id: int
    last_offset: int
    marker: int | None = None  # ABORT or COMMIT for a control batch


class PartitionModel:
    """One data partition: its producer state and log, a single replica whose HW the
    test moves up to the LEO (so completed transactions stay unreplicated a while)."""

    def __init__(self) -> None:
        self.state = ProducerStateManager()
        self.entries: list[Entry] = []
        self.leo = 0
        self.hw = 0
        self.aborted: list[CompletedTxn] = []

    def append(self, header: BatchHeader, marker: int | None = None) -> None:
        done = self.state.record([header], self.leo)
        self.aborted += [c for c in done if c.aborted]
        last = self.leo + header.last_offset_delta
        self.entries.append(Entry(self.leo, header.producer_id, last, marker))
        self.leo = last + 1

    def lso(self) -> int:
        return self.state.last_stable_offset(self.hw)

    def outcome(self, e: Entry) -> int | None:
        """The marker that closed the transaction of data entry `e` (None: open)."""
        for later in self.entries:
            if later.offset > e.offset and later.producer_id == e.producer_id and (
                later.marker is not None
            ):
                return later.marker
        return None

    def read_committed(self) -> list[Entry]:
        """Kafka's consumer: below the LSO, with the aborted list the fetch returns."""
        lso = self.lso()
        pending = sorted((c for c in self.aborted if c.first_offset < lso),
                         key=lambda c: c.first_offset)
        aborting: set[int] = set()
        seen: list[Entry] = []
        for e in self.entries:
            if e.offset >= lso:
                break
            while pending and pending[0].first_offset <= e.last_offset:
                aborting.add(pending.pop(0).producer_id)
            if e.marker is not None:
                if e.marker == ABORT:
                    aborting.discard(e.producer_id)
                continue
            if e.producer_id not in aborting:
                seen.append(e)
        return seen


@dataclass
class Client:
    producer_id: int = -1
    epoch: int = -1
    seq: dict[int, int] = field(default_factory=dict)
    added: set[int] = field(default_factory=set)


class TxnMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        pids = itertools.count(1000)
        config = TxnConfig(num_partitions=1, abort_check_interval_ms=500,
                           remove_check_interval_ms=10**12, id_expiration_ms=10**12)
        self.core: TransactionCoordinatorCore[int] = TransactionCoordinatorCore(
            config, lambda: next(pids), lambda group: ("__consumer_offsets", 0))
        self.coordinator_epoch = 0
        self.txn_log: list[tuple[bytes | None, bytes | None]] = []
        self.appends: list[Append] = []
        self.markers: list[SendMarkers] = []
        self.handlers: dict[int, Callable[[Any], None]] = {}
        self.tokens = itertools.count()
        self.parts = {p: PartitionModel() for p in PARTS}
        self.clients = {tid: Client() for tid in TIDS}
        self.epochs: dict[str, tuple[int, int]] = {}
        self.completed_checked: dict[str, tuple[int, int, S]] = {}
        self._process(self.core.begin_load(0, self.coordinator_epoch))
        outs, _bad = self.core.load(0, [], self.now)
        self._process(outs)

    # -- plumbing -------------------------------------------------------------------------

    def _token(self, handler: Callable[[Any], None]) -> int:
        t = next(self.tokens)
        self.handlers[t] = handler
        return t

    def _process(self, outs: list[Any]) -> None:
        for o in outs:
            if isinstance(o, Reply):
                handler = self.handlers.pop(o.token, None)
                if handler is not None:
                    handler(o.result)
            elif isinstance(o, Append):
                self.appends.append(o)
            else:
                assert isinstance(o, SendMarkers)
                self.markers.append(o)

    # -- the producers --------------------------------------------------------------------

    @rule(tid=st.sampled_from(TIDS))
    def init_producer_id(self, tid: str) -> None:
        c = self.clients[tid]

        def done(result: Any) -> None:
            if result.error_code == Errors.NONE:
                c.producer_id, c.epoch = result.producer_id, result.producer_epoch
                c.seq, c.added = {}, set()

        self._process(self.core.init_producer_id(
            self._token(done), tid, TIMEOUT_MS, -1, -1, self.now))

    def _with_pid(self) -> list[str]:
        return [t for t, c in self.clients.items() if c.producer_id >= 0]

    @precondition(lambda self: self._with_pid())
    @rule(data=st.data(), p=st.sampled_from(PARTS))
    def add_partition(self, data: st.DataObject, p: int) -> None:
        tid = data.draw(st.sampled_from(self._with_pid()))
        c = self.clients[tid]
        pid, epoch = c.producer_id, c.epoch

        def done(result: Any) -> None:
            if result.get((TOPIC, p)) == Errors.NONE and (c.producer_id, c.epoch) == (pid, epoch):
                c.added.add(p)

        self._process(self.core.add_partitions(
            self._token(done), tid, pid, epoch, [(TOPIC, p)], self.now))

    @precondition(lambda self: any(c.added for c in self.clients.values()))
    @rule(data=st.data(), n=st.integers(1, 3))
    def produce(self, data: st.DataObject, n: int) -> None:
        # a client writes only to partitions its AddPartitionsToTxn added
        tid = data.draw(st.sampled_from([t for t, c in self.clients.items() if c.added]))
        c = self.clients[tid]
        p = data.draw(st.sampled_from(sorted(c.added)))
        part = self.parts[p]
        seq = c.seq.get(p, 0)
        h = BatchHeader(c.producer_id, c.epoch, seq, n - 1, 0, False, self.now, True)
        try:
            part.state.check([h])
        except ProducerStateError:
            return  # fenced or out of order: refused, nothing written
        part.append(h)
        c.seq[p] = seq + n

    @precondition(lambda self: self._with_pid())
    @rule(data=st.data(), commit=st.booleans())
    def end_txn(self, data: st.DataObject, commit: bool) -> None:
        tid = data.draw(st.sampled_from(self._with_pid()))
        c = self.clients[tid]

        def done(code: int) -> None:
            if code == Errors.NONE:
                c.added = set()

        self._process(self.core.end_txn(
            self._token(done), tid, c.producer_id, c.epoch, commit, self.now))

    # -- the coordinator's I/O ------------------------------------------------------------

    @precondition(lambda self: self.appends)
    @rule(data=st.data(), ok=st.booleans())
    def finish_append(self, data: st.DataObject, ok: bool) -> None:
        a = self.appends.pop(data.draw(st.integers(0, len(self.appends) - 1)))
        if ok:
            self.txn_log += list(a.records)
        code = Errors.NONE if ok else Errors.NOT_ENOUGH_REPLICAS
        self._process(self.core.on_append_done(a.write_id, code, self.now))

    @precondition(lambda self: self.appends)
    @rule()
    def finish_every_append(self) -> None:
        """The common case: the coordinator's writes in flight all succeed, in order."""
        while self.appends:
            a = self.appends.pop(0)
            self.txn_log += list(a.records)
            self._process(self.core.on_append_done(a.write_id, Errors.NONE, self.now))

    @precondition(lambda self: self.markers)
    @rule(data=st.data())
    def write_markers(self, data: st.DataObject) -> None:
        m = self.markers.pop(data.draw(st.integers(0, len(self.markers) - 1)))
        written = True
        for topic, p in m.partitions:
            if topic != TOPIC:
                continue
            part = self.parts[p]
            try:
                part.state.check_marker(m.producer_id, m.producer_epoch, m.coordinator_epoch)
            except ProducerStateError:
                written = False  # fenced: the channel abandons it, as Kafka's does
                continue
            kind = COMMIT if m.commit else ABORT
            part.append(BatchHeader(m.producer_id, m.producer_epoch, -1, 0, 0, True, self.now,
                                    True, (kind, m.coordinator_epoch)), kind)
        self._process(self.core.on_markers_done(
            m.transactional_id, m.producer_id, m.producer_epoch, m.coordinator_epoch, written,
            self.now))

    @rule(p=st.sampled_from(PARTS))
    def replicate(self, p: int) -> None:
        self.parts[p].hw = self.parts[p].leo

    @rule(ms=st.sampled_from([100, 1_000, 6_000]))
    def advance_time(self, ms: int) -> None:
        self.now += ms
        self._process(self.core.tick(self.now))

    @rule()
    def failover(self) -> None:
        """The coordinator's partition gets a new leader: writes in flight fail, the new
        coordinator epoch loads the log and finishes prepared transactions."""
        self.coordinator_epoch += 1
        self._process(self.core.begin_load(0, self.coordinator_epoch))
        for a in self.appends:
            self._process(self.core.on_append_done(a.write_id, Errors.NOT_LEADER_OR_FOLLOWER,
                                                   self.now))
        self.appends = []
        outs, bad = self.core.load(0, list(self.txn_log), self.now)
        assert bad == 0
        self._process(outs)

    # -- what must always hold ------------------------------------------------------------

    @invariant()
    def read_committed_sees_only_committed_records(self) -> None:
        for p, part in self.parts.items():
            for e in part.read_committed():
                assert part.outcome(e) == COMMIT, (
                    f"partition {p}: read_committed returned offset {e.offset} of producer "
                    f"{e.producer_id}, whose transaction is "
                    f"{'open' if part.outcome(e) is None else 'aborted'}")

    @invariant()
    def lso_never_passes_an_open_transaction(self) -> None:
        for p, part in self.parts.items():
            open_firsts = [e.offset for e in part.entries
                           if e.marker is None and part.outcome(e) is None]
            if open_firsts:
                assert part.lso() <= min(open_firsts), (p, part.lso(), open_firsts)

    @invariant()
    def completed_transactions_have_every_marker(self) -> None:
        for tid, md in self.core.txns.items():
            if md.state not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT) or md.pending is not None:
                continue
            for p, part in self.parts.items():
                open_data = [e.offset for e in part.entries if e.producer_id == md.producer_id
                             and e.marker is None and part.outcome(e) is None]
                assert not open_data, (
                    f"{tid} is {md.state.name} but partition {p} has no marker after "
                    f"offsets {open_data}")

    @invariant()
    def epochs_never_go_back(self) -> None:
        for tid, md in self.core.txns.items():
            before = self.epochs.get(tid)
            if before is not None and before[0] == md.producer_id:
                assert md.producer_epoch >= before[1], (tid, before, md.producer_epoch)
            self.epochs[tid] = (md.producer_id, md.producer_epoch)


TxnMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50,
                                        deadline=None)
test_transactions_model = TxnMachine.TestCase
