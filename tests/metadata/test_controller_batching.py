"""The controller's batching: AlterPartition across partitions (one decision per
partition, one batch), group commit (many decisions in one entry, each answered as if
alone), and the partitions-by-broker index that replaces walks of every partition
(checked against those walks with Hypothesis)."""

from __future__ import annotations

import asyncio
import itertools
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common.clock import ManualClock
from common.errors import Errors
from kraft.cluster_control import BrokerTransition
from kraft.election import PartitionView, elect
from kraft.group_commit import plan_group
from kraft.node import ControllerNode
from kraft.partition_index import PartitionIndex
from kraft.state_machine import AppendStatus
from metadata_log.controller_api import (
    AlterPartitionItem,
    AlterPartitionsRequest,
    AlterPartitionTopic,
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from metadata_log.image import MetadataImage
from metadata_log.records import NO_LEADER, PartitionChangeRecord, Record
from tests.metadata.test_controller_managers import (
    SESSION_MS,
    Cluster,
    InstantQuorum,
    new_controller,
    registration,
)


def cluster_with(partitions: int, brokers: int = 3) -> tuple[Cluster, str]:
    c = Cluster()
    for b in range(brokers):
        c.start_broker(b)
    assignments = {p: [p % brokers, (p + 1) % brokers] for p in range(partitions)}
    created = c.run(CreateTopicsRequest([CreatableTopic("t", assignments=assignments)]))
    assert created.topics[0].error_code == Errors.NONE
    return c, c.sm.image.topic_ids["t"]


def shrink(c: Cluster, topic_id: str, p: int, **over: Any) -> AlterPartitionItem:
    """The leader of `p` drops its follower from the ISR."""
    reg = c.sm.image.topics[topic_id].partitions[p]
    fields = dict(
        partition=p,
        leader_epoch=reg.leader_epoch,
        partition_epoch=reg.partition_epoch,
        new_isr=[reg.leader],
    )
    fields.update(over)
    return AlterPartitionItem(**fields)  # type: ignore[arg-type]


def batch(c: Cluster, broker: int, topic_id: str, items: list[AlterPartitionItem]) -> Any:
    epoch = c.sm.image.brokers[broker].broker_epoch
    return AlterPartitionsRequest(broker, epoch, [AlterPartitionTopic(topic_id, items)])


# -- AlterPartition across partitions ----------------------------------------------------------


def test_each_partition_is_decided_alone_and_the_changes_share_one_batch() -> None:
    c, tid = cluster_with(6)
    led = sorted(p for p, r in c.sm.image.topics[tid].partitions.items() if r.leader == 0)
    good, fenced, stale, dup = led[0], led[1], 1, led[0]
    assert c.sm.image.topics[tid].partitions[stale].leader != 0
    items = [
        shrink(c, tid, good),
        shrink(c, tid, fenced, leader_epoch=7),
        shrink(c, tid, stale),  # broker 0 does not lead it
        shrink(c, tid, dup),
    ]
    before = c.sm.next_offset
    resp = c.run(batch(c, 0, tid, items))
    assert resp.error_code == Errors.NONE
    codes = [(r.partition, r.error_code) for r in resp.results]
    assert codes == [
        (good, Errors.NONE),
        (fenced, Errors.FENCED_LEADER_EPOCH),
        (stale, Errors.INVALID_REQUEST),
        (dup, Errors.INVALID_REQUEST),
    ]
    assert c.sm.next_offset == before + 1  # the one accepted change, one batch
    assert c.sm.image.topics[tid].partitions[good].isr == (0,)
    assert resp.results[0].isr == [0] and resp.results[0].partition_epoch == 1


def test_many_changes_commit_in_one_batch_and_a_stale_epoch_refuses_the_request() -> None:
    c, tid = cluster_with(60)
    led = [p for p, r in c.sm.image.topics[tid].partitions.items() if r.leader == 0]
    before = c.sm.next_offset
    resp = c.run(batch(c, 0, tid, [shrink(c, tid, p) for p in led]))
    assert [r.error_code for r in resp.results] == [Errors.NONE] * len(led)
    assert c.sm.next_offset == before + len(led)
    assert c.sm.image.offset == c.sm.next_offset - 1
    again = c.run(batch(c, 0, tid, [shrink(c, tid, led[0], partition_epoch=0)]))
    assert again.results[0].error_code == Errors.INVALID_UPDATE_VERSION
    stale = AlterPartitionsRequest(0, 12345, [AlterPartitionTopic(tid, [shrink(c, tid, 0)])])
    assert c.run(stale).error_code == Errors.STALE_BROKER_EPOCH


# -- group commit ------------------------------------------------------------------------------


def test_a_group_is_decided_on_the_projection_of_the_decisions_before() -> None:
    c = Cluster()
    image, first = c.sm.image, c.sm.next_offset
    planned = plan_group(c.controller, image, first, [registration(1), registration(2)], 0)
    records: list[Record] = [r for p in planned for r in p.records]
    result = c.append(records)
    answers = [p.answer(result)[0] for p in planned]
    # Each registration's broker epoch is its own offset in the shared entry.
    assert [a.broker_epoch for a in answers] == [first, first + 1]
    assert [c.sm.image.brokers[b].broker_epoch for b in (1, 2)] == [first, first + 1]


def test_two_changes_of_one_partition_in_a_group_the_second_is_refused() -> None:
    c, tid = cluster_with(2)
    leader = c.sm.image.topics[tid].partitions[0].leader
    req = batch(c, leader, tid, [shrink(c, tid, 0)])
    planned = plan_group(c.controller, c.sm.image, c.sm.next_offset, [req, req], 0)
    first, second = planned
    assert first.records and not second.records  # decided on the projected image
    result = c.append([r for p in planned for r in p.records])
    assert result.status == AppendStatus.OK
    assert first.answer(result)[0].results[0].error_code == Errors.NONE
    assert second.answer(result)[0].results[0].error_code == Errors.INVALID_UPDATE_VERSION


def test_a_decision_that_does_not_apply_is_answered_alone_and_left_out() -> None:
    class Stale:
        def decide(self, image: MetadataImage, request: Any, now_ms: int) -> Any:
            return c.controller.decide(base, request, now_ms)  # always the old image

    c, tid = cluster_with(2)
    base = c.sm.image
    leader = base.topics[tid].partitions[0].leader
    req = batch(c, leader, tid, [shrink(c, tid, 0)])
    conf = IncrementalAlterConfigsRequest(4, "", {"x": "1"})
    planned = plan_group(Stale(), base, c.sm.next_offset, [req, req, conf], 0)
    assert planned[0].records and planned[1].invalid and not planned[1].records
    result = c.append([r for p in planned for r in p.records])
    assert result.status == AppendStatus.OK
    assert planned[2].answer(result)[1] == type(result)(
        AppendStatus.OK, result.last_offset, result.last_offset
    )
    resp, own = planned[1].answer(result)
    assert own is not None and own.status == AppendStatus.INVALID
    assert resp.results[0].error_code == Errors.INVALID_UPDATE_VERSION


class CountingQuorum(InstantQuorum):
    def __init__(self) -> None:
        super().__init__()
        self.appends = 0

    async def append(self, epoch: int, records: list[Record], timeout_s: float) -> Any:
        self.appends += 1
        await asyncio.sleep(0)  # in flight: the next writes queue meanwhile
        return await super().append(epoch, records, timeout_s)


async def _concurrent_writes_share_entries() -> None:
    clock = ManualClock()
    quorum = CountingQuorum()
    config: Any = SimpleNamespace(node_id=0, http_address=lambda n: f"127.0.0.1:{n}")
    node = ControllerNode(config, quorum, new_controller(), clock=clock)  # type: ignore[arg-type]
    await node.start()
    try:
        for _ in range(50):  # ticks until the barrier committed (a bounded wait)
            if node.active:
                break
            clock.advance(250)
            for _ in range(20):
                await asyncio.sleep(0)
        assert node.active
        appends = quorum.appends
        writes = [
            node.alter_configs(IncrementalAlterConfigsRequest(4, "", {f"k{i}": str(i)}))
            for i in range(50)
        ]
        await asyncio.gather(*writes)
        assert quorum.appends - appends < 5  # 50 writes, a handful of entries
        assert {f"k{i}": str(i) for i in range(50)}.items() <= quorum.image().configs[
            (4, "")
        ].items()
    finally:
        await node.stop()


def test_concurrent_writes_are_committed_in_few_entries() -> None:
    asyncio.run(_concurrent_writes_share_entries())


# -- the partitions-by-broker index --------------------------------------------------------------


def brute_index(image: MetadataImage) -> tuple[dict, dict, set, set]:
    hosted: dict[int, set] = {}
    led: dict[int, set] = {}
    offline, reassigning = set(), set()
    for tid, t in image.topics.items():
        for p, reg in t.partitions.items():
            for r in reg.replicas:
                hosted.setdefault(r, set()).add((tid, p))
            if reg.leader == NO_LEADER:
                offline.add((tid, p))
            else:
                led.setdefault(reg.leader, set()).add((tid, p))
            if reg.is_reassigning:
                reassigning.add((tid, p))
    return hosted, led, offline, reassigning


def check_index(index: PartitionIndex, image: MetadataImage) -> None:
    hosted, led, offline, reassigning = brute_index(image)
    index.refresh(image)
    brokers = set(hosted) | set(led) | {0, 1, 2, 3, 4}
    assert {b: set(index.hosted_by(b)) for b in brokers} == {
        b: hosted.get(b, set()) for b in brokers
    }
    assert {b: set(index.led_by(b)) for b in brokers} == {b: led.get(b, set()) for b in brokers}
    assert index.offline == offline and index.reassigning == reassigning


def full_rebalance(c: Cluster, transition: BrokerTransition, now_ms: int) -> list[Record]:
    """What rebalance did before the index: every partition walked."""
    image = c.sm.image
    rc = c.controller.replication
    usable = {
        b
        for b in image.brokers
        if image.is_usable(b)
        and b not in transition.unusable
        and c.controller.cluster.session_alive(b, now_ms)
    } | transition.newly_usable
    out = []
    for tid in sorted(image.topics):
        for p, reg in sorted(image.topics[tid].partitions.items()):
            policy = rc._configuration.elr_policy(image, image.topics[tid].name)
            change = elect(
                PartitionView.of(reg),
                usable,
                False,
                transition.restarted,
                policy,
                transition.unclean_shutdown,
            )
            if change is not None:
                out.append((tid, p))
    changed = [(r.topic_id, r.partition) for r in rc.rebalance(image, transition, now_ms)]
    assert changed == out
    return out


OPS = st.lists(
    st.tuples(
        st.sampled_from(["fence", "unfence", "shutdown", "restart", "expire", "shrink", "topic"]),
        st.integers(0, 4),
        st.integers(0, 40),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, probe=st.sets(st.integers(0, 4)))
def test_the_index_and_the_rebalance_on_it_match_a_walk_of_every_partition(
    ops: list[tuple[str, int, int]], probe: set[int]
) -> None:
    c = Cluster()
    for b in range(5):
        c.start_broker(b)
    c.run(CreateTopicsRequest([CreatableTopic("t0", 12, 3)]))
    incarnations = itertools.count(2)
    now = 0
    index = c.controller.index
    for op, b, n in ops:
        image = c.sm.image
        reg_b = image.brokers[b]
        if op in ("fence", "unfence", "shutdown"):
            hb = BrokerHeartbeatRequest(
                b,
                reg_b.broker_epoch,
                c.sm.next_offset,
                want_fence=op == "fence",
                want_shutdown=op == "shutdown",
            )
            c.run(hb, now)
        elif op == "restart":
            c.run(registration(b, next(incarnations)), now + SESSION_MS)
        elif op == "expire":
            now += SESSION_MS // 2
            for other in range(5):
                if other != b:
                    other_epoch = c.sm.image.brokers[other].broker_epoch
                    c.run(BrokerHeartbeatRequest(other, other_epoch, c.sm.next_offset), now)
            records = c.controller.tick(c.sm.image, now)
            if records:
                c.append(records)
        elif op == "shrink":
            topic = c.sm.image.topic_by_name("t0")
            assert topic is not None
            p = n % 12
            reg = topic.partitions[p]
            if reg.leader != NO_LEADER and len(reg.isr) > 1:
                item = shrink(c, topic.topic_id, p)
                c.run(batch(c, reg.leader, topic.topic_id, [item]), now)
        else:
            c.run(CreateTopicsRequest([CreatableTopic(f"t{n}", 1 + n % 4, 1 + b % 3)]), now)
        check_index(index, c.sm.image)
        # Every committed image is a fixpoint of the full walk (so skipping partitions
        # of usable brokers loses nothing), and the indexed rebalance equals the walk.
        full_rebalance(c, BrokerTransition(), now)
        full_rebalance(c, BrokerTransition(unusable=frozenset(probe)), now)
        full_rebalance(c, BrokerTransition(newly_usable=frozenset(probe)), now)
    # An index that jumps back to an older image follows it too.
    check_index(index, MetadataImage())


def test_a_full_group_leaves_the_rest_for_the_next_one() -> None:
    c = Cluster()
    reqs = [IncrementalAlterConfigsRequest(4, "", {f"k{i}": "v"}) for i in range(5)]
    planned = plan_group(c.controller, c.sm.image, c.sm.next_offset, reqs, 0, max_records=2)
    assert len(planned) == 2 and [len(p.records) for p in planned] == [1, 1]


class MovingQuorum(CountingQuorum):
    """Before the first group's entry lands, another change of the same partition lands
    (as a late append whose outcome was unknown would): the entry no longer applies."""

    def __init__(self) -> None:
        super().__init__()
        self.sneak: list[Record] | None = None

    async def append(self, epoch: int, records: list[Record], timeout_s: float) -> Any:
        sneak, self.sneak = self.sneak, None
        if sneak is not None:
            await super().append(epoch, sneak, timeout_s)
        return await super().append(epoch, records, timeout_s)


async def _group_that_does_not_apply_is_retaken() -> None:
    clock = ManualClock()
    quorum = MovingQuorum()
    config: Any = SimpleNamespace(node_id=0, http_address=lambda n: f"127.0.0.1:{n}")
    node = ControllerNode(config, quorum, new_controller(), clock=clock)  # type: ignore[arg-type]
    await node.start()
    try:
        for _ in range(50):
            if node.active:
                break
            clock.advance(250)
            for _ in range(20):
                await asyncio.sleep(0)
        epochs = {}
        for b in (0, 1):
            epochs[b] = (await node.register_broker(registration(b))).broker_epoch
            await node.heartbeat(BrokerHeartbeatRequest(b, epochs[b], quorum.next_offset))
        await node.create_topics(CreateTopicsRequest([CreatableTopic("t", 2, 2)]))
        image = quorum.image()
        tid = image.topic_ids["t"]
        reg = image.topics[tid].partitions[0]
        other = next(r for r in reg.replicas if r != reg.leader)
        # Someone else's change: the follower leaves the ISR of partition 0 first.
        quorum.sneak = [
            PartitionChangeRecord(
                tid, 0, (reg.leader,), reg.leader, reg.leader_epoch, reg.partition_epoch + 1
            )
        ]
        item = AlterPartitionItem(0, reg.leader_epoch, reg.partition_epoch, [reg.leader])
        req = AlterPartitionsRequest(
            reg.leader, epochs[reg.leader], [AlterPartitionTopic(tid, [item])]
        )
        conf = IncrementalAlterConfigsRequest(4, "", {"x": "1"})
        resp, _ = await asyncio.gather(node.alter_partitions(req), node.alter_configs(conf))
        # Taken again alone on the new image: the partition epoch moved, and the config
        # write that shared the entry still lands.
        assert resp.results[0].error_code == Errors.INVALID_UPDATE_VERSION
        assert quorum.image().configs[(4, "")]["x"] == "1"
        assert quorum.image().topics[tid].partitions[0].isr == (reg.leader,)
        assert other not in quorum.image().topics[tid].partitions[0].isr
    finally:
        await node.stop()


def test_a_group_that_no_longer_applies_is_decided_again_request_by_request() -> None:
    asyncio.run(_group_that_does_not_apply_is_retaken())


# -- a group is the same as one request at a time -----------------------------------------------


def request_lists(min_size: int, max_size: int) -> st.SearchStrategy[list[tuple[str, int, int]]]:
    """Lists of (kind, broker, n) for `make_request`."""
    return st.lists(
        st.tuples(
            st.sampled_from(
                ["hb", "fence", "shutdown", "register", "config", "shrink", "grow", "topic"]
            ),
            st.integers(0, 3),
            st.integers(0, 7),
        ),
        min_size=min_size,
        max_size=max_size,
    )


REQUESTS = request_lists(1, 12)


def make_request(c: Cluster, kind: str, b: int, n: int) -> Any:
    image = c.sm.image
    epoch = image.brokers[b].broker_epoch if b in image.brokers else 0
    if kind in ("hb", "fence", "shutdown"):
        return BrokerHeartbeatRequest(
            b, epoch, c.sm.next_offset, want_fence=kind == "fence", want_shutdown=kind == "shutdown"
        )
    if kind == "register":
        return registration(b, 2 + n)
    if kind == "config":
        return IncrementalAlterConfigsRequest(4, "", {f"k{n % 3}": str(n)})
    if kind == "topic":
        return CreateTopicsRequest([CreatableTopic(f"n{n % 4}", 1 + n % 3, 2)])
    tid = image.topic_ids["t"]
    reg = image.topics[tid].partitions[n % 6]
    isr = [reg.leader] if kind == "shrink" else list(reg.replicas)
    item = AlterPartitionItem(n % 6, reg.leader_epoch, reg.partition_epoch, isr)
    return AlterPartitionsRequest(max(reg.leader, 0), epoch, [AlterPartitionTopic(tid, [item])])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=REQUESTS)
def test_a_group_answers_and_lands_as_the_same_requests_one_at_a_time(
    ops: list[tuple[str, int, int]],
) -> None:
    one, group = cluster_with(6, brokers=4)[0], cluster_with(6, brokers=4)[0]
    assert one.sm.image == group.sm.image
    # Requests are built on the image before the group (as they arrive at the controller).
    requests = [make_request(one, *op) for op in ops]
    alone = []
    for req in requests:
        try:
            alone.append(one.run(req, 5))
        except Exception as exc:  # noqa: BLE001 - a raised refusal is an answer too
            alone.append(repr(exc))
    planned = plan_group(group.controller, group.sm.image, group.sm.next_offset, requests, 5)
    records = [r for p in planned for r in p.records]
    result = group.append(records) if records else None
    assert result is None or result.status == AppendStatus.OK
    together = [repr(p.error) if p.error else p.answer(result)[0] for p in planned]
    assert together == alone
    assert group.sm.image == one.sm.image
