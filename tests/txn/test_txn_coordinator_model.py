"""A Hypothesis state machine drives the transaction coordinator core: producers
initialise, add partitions, commit and abort (with current or stale epochs), appends to
`__transaction_state` succeed or fail in log order, markers are acknowledged in any
order, time passes (timeouts abort), and the coordinator fails over (a new coordinator
epoch loads what the log holds; writes in flight are lost).

Checked after every step:
- epochs never go back: each id's (producer id, epoch) only grows, and so do the
  epochs the clients were given;
- the in-memory state of every id with no write in flight is what loading the log
  again gives (the log is the truth a failover sees);
- markers: their kind is the Prepare state's and their partitions the transaction's; a
  Complete state is only written after the markers of its Prepare state, at the
  current coordinator epoch, were acknowledged;
- an EndTxn(commit) answered NONE is followed by COMMIT markers for that epoch;
- a transaction aborted by its timeout is aborted at an epoch above the producer's.
"""

from __future__ import annotations

import itertools
import os

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from broker.txn import records as rec
from broker.txn.coordinator import TransactionCoordinatorCore
from broker.txn.messages import Append, InitResult, Reply, SendMarkers, TxnConfig
from broker.txn.state import TransactionState as S
from common.errors import Errors

IDS = ("a", "b")
TPS = [("t", 0), ("t", 1), ("u", 0)]
TIMEOUT = 1_000


class CoordinatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        pids = itertools.count(1)
        self.config = TxnConfig(num_partitions=1, abort_check_interval_ms=100)
        self.new_core = lambda: TransactionCoordinatorCore(
            self.config, lambda: next(pids), lambda g: ("__consumer_offsets", 0)
        )
        self.core: TransactionCoordinatorCore[object] = self.new_core()
        self.coord_epoch = 1
        self.core.begin_load(0, self.coord_epoch)
        self.core.load(0, [], 0)
        self.now = 0
        self.log: list[tuple[bytes, bytes | None]] = []
        self.appends: list[Append] = []
        self.markers: list[SendMarkers] = []
        self.clients: dict[str, tuple[int, int]] = {}  # id -> (pid, epoch) last given
        self.seen: dict[str, tuple[int, int]] = {}
        self.acked: set[tuple[str, int, int, int]] = set()  # markers acked (current epoch)
        self.tokens = itertools.count()
        self.waiting: dict[int, tuple[str, str, tuple[int, int]]] = {}  # token -> request

    # -- plumbing -----------------------------------------------------------------------------

    def run(self, outs: list) -> None:
        self.committed: list[tuple[str, int, int]] = []
        self.step_markers: list[SendMarkers] = []
        self._run(outs)
        for tid, pid, epoch in self.committed:  # once every intent of the step is known
            sent = any(
                m.commit
                and (m.transactional_id, m.producer_id, m.producer_epoch) == (tid, pid, epoch)
                for m in self.step_markers
            )
            # else a retry of an EndTxn that completed already
            assert sent or self.core.txns[tid].state == S.COMPLETE_COMMIT, (tid, pid, epoch)

    def _run(self, outs: list) -> None:
        for o in outs:
            if isinstance(o, Reply):
                self.answer(o.token, o.result)
            elif isinstance(o, SendMarkers):
                md = self.core.txns[o.transactional_id]
                assert set(o.partitions) == md.partitions
                assert md.state == (S.PREPARE_COMMIT if o.commit else S.PREPARE_ABORT)
                self.markers.append(o)
                self.step_markers.append(o)
            else:
                self.appends.append(o)

    def answer(self, token: object, result: object) -> None:
        tid, what, (pid, epoch) = self.waiting.pop(token)  # type: ignore[call-overload]
        if what == "init" and isinstance(result, InitResult) and result.error_code == 0:
            given = (result.producer_id, result.producer_epoch)
            assert given >= self.clients.get(tid, (0, -1)), (tid, given, self.clients)
            self.clients[tid] = given
        if what == "commit" and result == Errors.NONE:
            self.committed.append((tid, pid, epoch))

    def ask(self, tid: str, what: str, ids: tuple[int, int]) -> int:
        token = next(self.tokens)
        self.waiting[token] = (tid, what, ids)
        return token

    # -- rules --------------------------------------------------------------------------------

    @rule(tid=st.sampled_from(IDS), long=st.booleans())
    def init(self, tid: str, long: bool) -> None:
        t = self.ask(tid, "init", (-1, -1))
        timeout = TIMEOUT * 100 if long else TIMEOUT
        self.run(self.core.init_producer_id(t, tid, timeout, -1, -1, self.now))

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), stale=st.booleans())
    def add(self, data: st.DataObject, stale: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.clients)))
        pid, epoch = self.clients[tid]
        epoch -= int(stale)
        tps = data.draw(st.lists(st.sampled_from(TPS), min_size=1, max_size=3))
        t = self.ask(tid, "add", (pid, epoch))
        self.run(self.core.add_partitions(t, tid, pid, epoch, tps, self.now))

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), commit=st.booleans(), stale=st.booleans())
    def end(self, data: st.DataObject, commit: bool, stale: bool) -> None:
        tid = data.draw(st.sampled_from(sorted(self.clients)))
        pid, epoch = self.clients[tid]
        epoch -= int(stale)
        t = self.ask(tid, "commit" if commit else "abort", (pid, epoch))
        self.run(self.core.end_txn(t, tid, pid, epoch, commit, self.now))

    @precondition(lambda self: self.appends)
    @rule(ok=st.booleans())
    def complete_append(self, ok: bool) -> None:
        a = self.appends.pop(0)  # one partition: appends complete in log order
        if ok:
            for key, value in a.records:
                if value is not None:
                    v = rec.decode_value(value)
                    if v.state in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
                        tid = rec.decode_key(key)
                        k = (tid, v.producer_id, v.producer_epoch, self.coord_epoch)
                        assert k in self.acked, f"{v.state} of {tid} before its markers"
            self.log.extend(a.records)
        code = Errors.NONE if ok else Errors.NOT_ENOUGH_REPLICAS
        self.run(self.core.on_append_done(a.write_id, code, self.now))

    @precondition(lambda self: self.markers)
    @rule(data=st.data())
    def ack_markers(self, data: st.DataObject) -> None:
        m = self.markers.pop(data.draw(st.integers(0, len(self.markers) - 1)))
        if m.coordinator_epoch == self.coord_epoch:
            self.acked.add((m.transactional_id, m.producer_id, m.producer_epoch, self.coord_epoch))
        self.run(self.core.on_markers_done(
            m.transactional_id, m.producer_id, m.producer_epoch, m.coordinator_epoch, True,
            self.now,
        ))  # fmt: skip

    @rule()
    def settle(self) -> None:
        """Every append in flight succeeds (the common case, in one step)."""
        while self.appends:
            self.complete_append(True)

    @precondition(lambda self: self.clients)
    @rule(data=st.data(), commit=st.booleans())
    def whole_transaction(self, data: st.DataObject, commit: bool) -> None:
        """AddPartitionsToTxn then EndTxn with the current epoch, appends succeeding."""
        self.add(data, False)
        self.settle()
        self.end(data, commit, False)
        self.settle()

    @precondition(lambda self: self.clients)
    @rule(data=st.data())
    def open_transaction(self, data: st.DataObject) -> None:
        """AddPartitionsToTxn with the current epoch, its append succeeding: Ongoing."""
        self.add(data, False)
        self.settle()

    @rule(ms=st.sampled_from([1, 60, TIMEOUT // 2, TIMEOUT + 100, 3 * TIMEOUT]))
    def tick(self, ms: int) -> None:
        self.now += ms
        outs = self.core.tick(self.now)
        self.run(outs)
        for a in outs:  # timeouts abort at a bumped epoch: the producer is fenced
            for key, value in a.records if isinstance(a, Append) else ():
                v = None if value is None else rec.decode_value(value)
                if v is not None and v.state == S.PREPARE_ABORT:
                    event("a transaction timed out")
                    assert v.producer_epoch > self.clients[rec.decode_key(key)][1], v

    @rule()
    def failover(self) -> None:
        """Writes in flight are lost; the new coordinator epoch loads the log."""
        for a in self.appends:
            self.run(self.core.on_append_done(a.write_id, Errors.NOT_LEADER_OR_FOLLOWER, self.now))
        self.appends.clear()
        self.run(self.core.unload(0))
        for token in list(self.waiting):  # unanswered requests die with the connection
            self.waiting.pop(token)
        self.coord_epoch += 1
        self.run(self.core.begin_load(0, self.coord_epoch))
        outs, bad = self.core.load(0, list(self.log), self.now)
        assert bad == 0
        self.run(outs)

    # -- invariants ---------------------------------------------------------------------------

    @invariant()
    def epochs_never_go_back(self) -> None:
        for tid, md in self.core.txns.items():
            now = (md.producer_id, md.producer_epoch)
            assert now >= self.seen.get(tid, (0, -1)), (tid, now, self.seen[tid])
            self.seen[tid] = now

    @invariant()
    def memory_is_what_the_log_says(self) -> None:
        replay = self.new_core()
        replay.begin_load(0, self.coord_epoch)
        replay.load(0, list(self.log), self.now)
        for tid, md in self.core.txns.items():
            if md.pending is not None:
                continue
            r = replay.txns.get(tid)
            if r is None:  # created in memory by InitProducerId, its first write failed
                assert md.producer_epoch == -1 and md.state == S.EMPTY
                continue
            assert (r.state, r.producer_id, r.producer_epoch, r.partitions, r.timeout_ms) == (
                md.state, md.producer_id, md.producer_epoch, md.partitions, md.timeout_ms,
            ), tid  # fmt: skip


CoordinatorMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("TXN_FSM_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestCoordinatorMachine = CoordinatorMachine.TestCase
