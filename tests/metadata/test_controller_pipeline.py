"""Pipelined group commit (kraft/pipeline.py): several Raft entries in flight, each
decided on the projection of those before it.

A deterministic simulation drives the sans-I/O core against the real state machine:
entries are proposed while others are in flight and land in Raft order, interleaved in
any order Hypothesis picks with commits, foreign writes that move the image under the
pipeline, entries lost to a leader change, and a new controller's barrier. Without
interference the pipeline must answer and land exactly as one request at a time; with
it, no entry decided after one that did not apply may land or be answered."""

from __future__ import annotations

import asyncio
import itertools
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from common.errors import Errors
from kraft.group_commit import plan_entry
from kraft.node import ControllerNode
from kraft.pipeline import Entry, Outcome, Pipeline
from kraft.state_machine import AppendResult, AppendStatus, MetadataStateMachine
from metadata_log.controller_api import (
    AlterPartitionItem,
    AlterPartitionsRequest,
    AlterPartitionTopic,
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from metadata_log.records import (
    ControllerEpochRecord,
    NoOpRecord,
    PartitionChangeRecord,
    Record,
    encode_batch,
)
from tests.metadata.test_controller_batching import cluster_with, make_request, request_lists
from tests.metadata.test_controller_managers import (
    InstantQuorum,
    new_controller,
    registration,
)
from tests.metadata.test_quorum_adapter import elected, start_quorums

# More requests than the group-commit tests: enough for several entries in flight.
MANY_REQUESTS = request_lists(4, 24)

# -- the state machine's rule --------------------------------------------------------------------


def test_a_batch_decided_after_another_lands_only_if_that_one_applied() -> None:
    sm = MetadataStateMachine()
    noop = encode_batch([NoOpRecord()])
    assert sm.append_batch(1, "w", 0, encode_batch([ControllerEpochRecord(1, 0)])).status == 0
    assert sm.append_batch(1, "w", 1, noop, after=0).status == AppendStatus.OK
    # Not seen yet (Raft reordered a retry): refused, and so is the one after it.
    assert sm.append_batch(1, "w", 3, noop, after=2).status == AppendStatus.INVALID
    assert sm.append_batch(1, "w", 4, noop, after=3).status == AppendStatus.INVALID
    # Another writer's seq 1 is not ours.
    assert sm.append_batch(1, "x", 5, noop, after=1).status == AppendStatus.INVALID
    # A retry is answered with its first outcome, whatever landed since.
    assert sm.append_batch(1, "w", 3, noop, after=1).status == AppendStatus.INVALID
    assert sm.append_batch(1, "w", 2, noop, after=1).status == AppendStatus.OK
    assert sm.next_offset == 3


# -- the simulation ------------------------------------------------------------------------------

STEPS = st.lists(
    st.tuples(
        # Proposals outnumber commits, so several entries are in flight at once.
        st.sampled_from(["propose"] * 6 + ["commit"] * 3 + ["sneak", "lose", "fence"]),
        st.integers(1, 4),  # requests per group / partition moved by a sneak
    ),
    min_size=12,
    max_size=60,
)


def _alone(c: Any, requests: list[Any]) -> list[Any]:
    out = []
    for req in requests:
        try:
            out.append(c.run(req, 5))
        except Exception as exc:  # noqa: BLE001 - a raised refusal is an answer too
            out.append(repr(exc))
    return out


def _simulate(
    requests: list[Any], steps: list[tuple[str, int]], max_inflight: int, interfere: bool
) -> tuple[Any, list[Any], dict[int, tuple[int | None, AppendResult | None]]]:
    """Run the pipeline core to the end; (cluster, answers, outcome of each entry)."""
    c = cluster_with(6, brokers=4)[0]
    pipe: Pipeline[int] = Pipeline(max_inflight)
    queue = list(range(len(requests)))
    raft: list[tuple[Entry[int], list[Record]]] = []  # proposed, not applied: log order
    answers: dict[int, Any] = {}
    outcomes: dict[int, tuple[int | None, AppendResult | None]] = {}  # by seq
    epoch = 1
    foreign = itertools.count()
    fenced = False

    def propose(n: int) -> None:
        if not (queue and pipe.has_room()):
            return
        group = queue[:n]
        view = pipe.view(c.sm.image, c.sm.next_offset)
        if view is None:  # the newest entry will be refused: wait for it
            return
        image, first, after = view
        planned, projection = plan_entry(
            c.controller, image, first, [requests[i] for i in group], 5
        )
        del queue[: len(planned)]
        group = group[: len(planned)]
        records = [r for p in planned for r in p.records]
        if not records:
            answer(group, planned, None)
            return
        entry = pipe.add(Entry(group, planned, next(c.seq), after, projection))
        raft.append((entry, records))

    def answer(group: list[int], planned: list[Any], result: AppendResult | None) -> None:
        for i, p in zip(group, planned, strict=True):
            assert i not in answers, "answered twice"
            answers[i] = repr(p.error) if p.error else p.answer(result)[0]

    def settle(entry: Entry[int], result: AppendResult | None) -> None:
        outcomes[entry.seq] = (entry.after, result)  # type: ignore[index]
        outcome = pipe.settle(entry, result)
        if outcome is Outcome.ANSWER:
            answer(entry.waiters, entry.planned, result)
        elif outcome in (Outcome.UNKNOWN, Outcome.STALE):
            for i in entry.waiters:
                answers[i] = outcome.value
        redo()

    def redo() -> None:
        for i in pipe.take_redo():
            assert i not in answers, "answered twice"
            answers[i] = "stale" if fenced else _alone(c, [requests[i]])[0]

    def commit() -> None:
        if raft:
            entry, records = raft.pop(0)
            batch = encode_batch(records)
            settle(entry, c.sm.append_batch(epoch, "c", entry.seq, batch, entry.after))

    for kind, n in steps:
        if kind == "propose":
            propose(n)
        elif kind == "commit" or not interfere:
            commit()
        elif kind == "sneak":  # someone else's change of partition n lands first
            tid = c.sm.image.topic_ids["t"]
            reg = c.sm.image.topics[tid].partitions[n]
            change = PartitionChangeRecord(
                tid, n, reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch + 1
            )
            c.sm.append_batch(epoch, "other", next(foreign), encode_batch([change]))
        elif kind == "lose" and raft:  # a leader change discarded the oldest entry
            settle(raft.pop(0)[0], None)
        elif kind == "fence" and not fenced:  # a new controller's barrier commits
            fenced = True
            c.sm.append_batch(2, "new", 0, encode_batch([ControllerEpochRecord(2, 1)]))
    while queue or raft:
        propose(len(queue))
        commit()
    redo()
    assert not pipe.in_flight and not pipe.take_redo()
    return c, [answers[i] for i in range(len(requests))], outcomes


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=MANY_REQUESTS, steps=STEPS, max_inflight=st.integers(1, 4))
def test_pipelined_entries_answer_and_land_as_one_request_at_a_time(
    ops: list[tuple[str, int, int]], steps: list[tuple[str, int]], max_inflight: int
) -> None:
    one = cluster_with(6, brokers=4)[0]
    requests = [make_request(one, *op) for op in ops]  # built before any lands
    alone = _alone(one, requests)
    c, answers, outcomes = _simulate(requests, steps, max_inflight, interfere=False)
    assert answers == alone
    assert c.sm.image == one.sm.image
    assert all(r is not None and r.status == AppendStatus.OK for _, r in outcomes.values())


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=MANY_REQUESTS, steps=STEPS, max_inflight=st.integers(1, 4))
# Two entries in flight, the first lost to a leader change: the second must not land.
@example(
    ops=[("config", 0, 0), ("config", 0, 1), ("config", 0, 2)],
    steps=[("propose", 1), ("propose", 1), ("lose", 1), ("commit", 1)],
    max_inflight=2,
)
# The image moves under the first of three entries that change partition 1.
@example(
    ops=[("shrink", 0, 1), ("config", 0, 1), ("grow", 0, 1)],
    steps=[("propose", 1)] * 3 + [("sneak", 1)] + [("commit", 1)] * 3,
    max_inflight=3,
)
def test_no_entry_decided_after_a_failed_one_lands_or_is_answered(
    ops: list[tuple[str, int, int]], steps: list[tuple[str, int]], max_inflight: int
) -> None:
    one = cluster_with(6, brokers=4)[0]
    requests = [make_request(one, *op) for op in ops]
    _, answers, outcomes = _simulate(requests, steps, max_inflight, interfere=True)
    assert len(answers) == len(requests)  # each answered exactly once (asserted inside)
    # The chain: an entry that applied follows one that applied (or nothing); so every
    # entry after one that failed failed too, and was answered only from a new decision.
    for after, result in outcomes.values():
        if result is not None and result.status == AppendStatus.OK and after is not None:
            prev = outcomes[after][1]
            assert prev is not None and prev.status == AppendStatus.OK


# -- the node over a quorum that keeps entries in flight -----------------------------------------


class PipelinedQuorum(InstantQuorum):
    """Appends stay in flight for a few loop turns and apply in the order they started
    (Raft's log order); `sneak` lands just before the next one (a foreign write)."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = 0
        self.peak = 0
        self.sneak: list[Record] | None = None
        self._last: asyncio.Future[None] | None = None
        self.results: list[AppendResult] = []

    def new_seq(self) -> int:
        return next(self.seq)

    async def append(  # type: ignore[override]
        self,
        epoch: int,
        records: list[Record],
        timeout_s: float,
        seq: int | None = None,
        after: int | None = None,
    ) -> AppendResult:
        seq = next(self.seq) if seq is None else seq
        prev, done = self._last, asyncio.get_running_loop().create_future()
        self._last = done
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            if prev is not None:
                await prev
            sneak, self.sneak = self.sneak, None
            if sneak is not None:
                self.sm.append_batch(epoch, "other", seq, encode_batch(sneak))
            result = self.sm.append_batch(epoch, "node", seq, encode_batch(records), after)
            self.results.append(result)
            return result
        finally:
            self.in_flight -= 1
            done.set_result(None)


async def _active_node(quorum: PipelinedQuorum, clock: ManualClock) -> ControllerNode:
    config: Any = SimpleNamespace(node_id=0, http_address=lambda n: f"127.0.0.1:{n}")
    node = ControllerNode(config, quorum, new_controller(), clock=clock, max_inflight=4)  # type: ignore[arg-type]
    await node.start()
    for _ in range(50):  # ticks until the barrier committed (a bounded wait)
        if node.active:
            break
        clock.advance(250)
        for _ in range(20):
            await asyncio.sleep(0)
    assert node.active
    return node


async def _many_entries_in_flight() -> None:
    quorum, clock = PipelinedQuorum(), ManualClock()
    node = await _active_node(quorum, clock)
    try:
        writes = []
        for i in range(40):  # arriving over time: each loop turn's arrivals form a group
            writes.append(
                asyncio.ensure_future(
                    node.alter_configs(IncrementalAlterConfigsRequest(4, "", {f"k{i}": str(i)}))
                )
            )
            await asyncio.sleep(0)
        await asyncio.gather(*writes)
        assert quorum.peak > 1  # entries were pipelined...
        assert quorum.peak <= 4  # ...within the bound
        assert all(r.status == AppendStatus.OK for r in quorum.results)
        assert {f"k{i}": str(i) for i in range(40)}.items() <= quorum.image().configs[
            (4, "")
        ].items()
    finally:
        await node.stop()


def test_the_node_keeps_several_entries_in_flight_within_the_bound() -> None:
    asyncio.run(_many_entries_in_flight())


async def _entries_after_a_failed_one_are_redecided() -> None:
    quorum, clock = PipelinedQuorum(), ManualClock()
    node = await _active_node(quorum, clock)
    try:
        epochs = {}
        for b in (0, 1):
            epochs[b] = (await node.register_broker(registration(b))).broker_epoch
            await node.heartbeat(BrokerHeartbeatRequest(b, epochs[b], quorum.next_offset))
        await node.create_topics(CreateTopicsRequest([CreatableTopic("t", 2, 2)]))
        image = quorum.image()
        tid = image.topic_ids["t"]
        reg = image.topics[tid].partitions[0]
        # Someone else's change of partition 0 lands before our first entry.
        quorum.sneak = [
            PartitionChangeRecord(
                tid, 0, reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch + 1
            )
        ]
        item = AlterPartitionItem(0, reg.leader_epoch, reg.partition_epoch, [reg.leader])
        req = AlterPartitionsRequest(
            reg.leader, epochs[reg.leader], [AlterPartitionTopic(tid, [item])]
        )
        shrink = asyncio.ensure_future(node.alter_partitions(req))
        await asyncio.sleep(0)  # proposed: the config write is the next entry, after it
        conf = asyncio.ensure_future(
            node.alter_configs(IncrementalAlterConfigsRequest(4, "", {"x": "1"}))
        )
        resp, _ = await asyncio.gather(shrink, conf)
        assert quorum.peak > 1
        refused = [r.error for r in quorum.results if r.status == AppendStatus.INVALID]
        assert any("partition epoch" in e for e in refused)
        assert any("did not apply" in e for e in refused)  # the entry after it
        # Both decided again alone: the change is refused, the config lands.
        assert resp.results[0].error_code == Errors.INVALID_UPDATE_VERSION
        assert quorum.image().configs[(4, "")]["x"] == "1"
    finally:
        await node.stop()


def test_an_entry_after_one_that_did_not_apply_is_decided_again() -> None:
    asyncio.run(_entries_after_a_failed_one_are_redecided())


# -- through real pysyncobj voters ---------------------------------------------------------------


def test_pipelined_appends_through_raft_land_in_order_and_a_broken_chain_stops(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        quorums = await start_quorums(tmp_path)
        try:
            leader = await elected(quorums)
            term = leader.term
            barrier = await leader.append(term, [ControllerEpochRecord(term, leader.node_id)])
            assert barrier.status == AppendStatus.OK
            # 20 entries in flight at once, each decided after the one before it.
            seqs = [leader.new_seq() for _ in range(20)]
            results = await asyncio.gather(
                *(
                    leader.append(term, [NoOpRecord()], seq=s, after=prev)
                    for s, prev in zip(seqs, [None, *seqs[:-1]], strict=True)
                )
            )
            assert [r.status for r in results] == [AppendStatus.OK] * 20
            assert [r.first_offset for r in results] == sorted(r.first_offset for r in results)
            # The first of a chain is refused (a stale epoch): every later one is too.
            seqs = [leader.new_seq() for _ in range(5)]
            epochs = [term - 1] + [term] * 4
            broken = await asyncio.gather(
                *(
                    leader.append(e, [NoOpRecord()], seq=s, after=prev)
                    for e, s, prev in zip(epochs, seqs, [None, *seqs[:-1]], strict=True)
                )
            )
            assert broken[0].status == AppendStatus.STALE_CONTROLLER_EPOCH
            assert all(r.status == AppendStatus.INVALID for r in broken[1:])
            end = results[-1].last_offset + 1
            for q in quorums:  # the same outcome on every voter
                assert await q.wait_for_offset(end - 1, 5)
                assert q.next_offset == end
        finally:
            for q in quorums:
                await q.stop()

    asyncio.run(main())
