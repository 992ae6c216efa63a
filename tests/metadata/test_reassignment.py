"""Partition reassignment (KIP-455) on the sans-I/O controller over the real state
machine: the first change (replicas = target + removing, adding, removing), completion
when the leader's AlterPartition brings every adding replica into the ISR, leader moves,
cancel, Kafka's errors, a reassignment over an ongoing one, and a Hypothesis run that
any reassignment ends at its target whatever order the replicas catch up in."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import Errors
from kraft.reassignment import build_change
from metadata_log.controller_api import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    CreatableTopic,
    CreateTopicsRequest,
    ListPartitionReassignmentsRequest,
    ReassignablePartition,
    TopicPartition,
)
from metadata_log.image import PartitionRegistration
from metadata_log.records import NO_LEADER, TOPIC_RESOURCE, ConfigRecord, PartitionChangeRecord
from metadata_log.snapshot import decode_snapshot, encode_snapshot
from tests.metadata.test_controller_managers import Cluster


def cluster_with_topic(brokers: int = 6, assignment: list[int] | None = None) -> Cluster:
    c = Cluster()
    for b in range(1, brokers + 1):
        c.start_broker(b)
    topic = CreatableTopic("t", assignments={0: assignment or [1, 2, 3]})
    assert c.run(CreateTopicsRequest([topic])).topics[0].error_code == Errors.NONE
    return c


def part(c: Cluster) -> PartitionRegistration:
    reg = c.sm.image.topic_by_name("t").partitions[0]  # type: ignore[union-attr]
    return reg


def reassign(c: Cluster, replicas: list[int] | None, topic: str = "t", p: int = 0) -> int:
    req = AlterPartitionReassignmentsRequest([ReassignablePartition(topic, p, replicas)])
    (result,) = c.run(req).results
    return result.error_code


def grow_isr(c: Cluster, broker: int) -> int:
    """The leader adds `broker` to the ISR (it caught up), as AlterPartition."""
    reg = part(c)
    b = c.sm.image.brokers[reg.leader]
    req = AlterPartitionRequest(
        reg.leader,
        b.broker_epoch,
        c.sm.image.topic_ids["t"],
        0,
        reg.leader_epoch,
        reg.partition_epoch,
        [*reg.isr, broker],
    )
    return c.run(req).error_code


def test_a_reassignment_adds_then_completes_when_the_isr_holds_every_target() -> None:
    c = cluster_with_topic()
    before = part(c)
    assert reassign(c, [4, 5, 6]) == Errors.NONE
    reg = part(c)
    assert reg.replicas == (4, 5, 6, 1, 2, 3)
    assert (reg.adding_replicas, reg.removing_replicas) == ((4, 5, 6), (1, 2, 3))
    assert (reg.leader, reg.leader_epoch, reg.isr) == (1, before.leader_epoch, (1, 2, 3))
    listed = c.run(ListPartitionReassignmentsRequest()).reassignments
    assert [(r.topic, r.partition, r.adding_replicas, r.removing_replicas) for r in listed] == [
        ("t", 0, [4, 5, 6], [1, 2, 3])
    ]
    # The snapshot keeps the reassignment (a failover's new controller sees it).
    assert decode_snapshot(encode_snapshot(c.sm.image)) == c.sm.image
    assert grow_isr(c, 4) == Errors.NONE
    assert grow_isr(c, 5) == Errors.NONE
    assert part(c).is_reassigning
    assert grow_isr(c, 6) == Errors.NONE  # the last one: completes in the same batch
    reg = part(c)
    assert reg.replicas == (4, 5, 6)
    assert reg.isr == (4, 5, 6)
    assert reg.leader == 4  # the old leader was removed: the first target replica in the ISR
    assert reg.leader_epoch == before.leader_epoch + 1
    assert not reg.is_reassigning
    assert c.run(ListPartitionReassignmentsRequest()).reassignments == []


def test_a_reordering_completes_at_once_and_keeps_a_leader_that_stays() -> None:
    c = cluster_with_topic()
    assert reassign(c, [3, 2, 1]) == Errors.NONE
    reg = part(c)
    assert (reg.replicas, reg.leader, reg.is_reassigning) == ((3, 2, 1), 1, False)
    assert reassign(c, [3, 2]) == Errors.NONE  # shrinking: only removing, complete at once
    reg = part(c)
    assert (reg.replicas, reg.isr, reg.leader) == ((3, 2), (2, 3), 3)


def test_cancel_reverts_to_the_original_replicas() -> None:
    c = cluster_with_topic()
    assert reassign(c, None) == Errors.NO_REASSIGNMENT_IN_PROGRESS
    assert reassign(c, [1, 4, 5]) == Errors.NONE
    assert grow_isr(c, 4) == Errors.NONE
    reg = part(c)
    assert (reg.replicas, reg.isr) == ((1, 4, 5, 2, 3), (1, 2, 3, 4))
    assert reassign(c, None) == Errors.NONE
    reg = part(c)
    assert (reg.replicas, reg.isr, reg.leader) == ((1, 2, 3), (1, 2, 3), 1)
    assert not reg.is_reassigning


def test_errors_are_kafkas() -> None:
    c = cluster_with_topic(brokers=4)
    assert reassign(c, [4, 4]) == Errors.INVALID_REPLICA_ASSIGNMENT
    assert reassign(c, []) == Errors.INVALID_REPLICA_ASSIGNMENT
    assert reassign(c, [1, 9]) == Errors.INVALID_REPLICA_ASSIGNMENT  # unknown broker
    assert reassign(c, [1, 2], topic="nope") == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert reassign(c, [1, 2], p=7) == Errors.UNKNOWN_TOPIC_OR_PARTITION
    b4 = c.sm.image.brokers[4]
    c.run(BrokerHeartbeatRequest(4, b4.broker_epoch, c.sm.next_offset, want_fence=True))
    assert c.sm.image.brokers[4].fenced
    assert reassign(c, [1, 4]) == Errors.INVALID_REPLICA_ASSIGNMENT  # fenced broker
    # Per partition: one bad partition does not stop the others in the same request.
    req = AlterPartitionReassignmentsRequest(
        [ReassignablePartition("t", 0, [2, 3, 1]), ReassignablePartition("t", 5, [1])]
    )
    codes = [r.error_code for r in c.run(req).results]
    assert codes == [Errors.NONE, Errors.UNKNOWN_TOPIC_OR_PARTITION]
    assert part(c).replicas == (2, 3, 1)


def test_cancel_that_needs_an_unclean_election_is_refused_unless_allowed() -> None:
    # The ISR holds only the replica being added: reverting would lose it.
    c = cluster_with_topic(brokers=4, assignment=[1])
    assert reassign(c, [4]) == Errors.NONE
    assert part(c).replicas == (4, 1) and part(c).isr == (1,)
    # Forge the state: the original replica dropped out of the ISR (it is slow).
    p = part(c)
    tid = c.sm.image.topic_ids["t"]
    forged = PartitionChangeRecord(tid, 0, (4,), 4, p.leader_epoch + 1, p.partition_epoch + 1)
    assert c.append([forged]).status == 0
    assert part(c).is_reassigning
    assert reassign(c, None) == Errors.INVALID_REPLICA_ASSIGNMENT
    assert c.append([ConfigRecord(TOPIC_RESOURCE, "t", "unclean.leader.election.enable", "true")])
    assert reassign(c, None) == Errors.NONE
    assert (part(c).replicas, part(c).isr, part(c).leader) == ((1,), (1,), 1)


def test_a_reassignment_over_an_ongoing_one_removes_what_it_was_adding() -> None:
    c = cluster_with_topic()
    assert reassign(c, [1, 2]) == Errors.NONE  # removing 3: completes at once
    assert reassign(c, [1, 2, 4]) == Errors.NONE
    assert grow_isr(c, 4) == Errors.NONE
    assert part(c).replicas == (1, 2, 4)
    assert reassign(c, [1, 2, 5]) == Errors.NONE
    assert (part(c).adding_replicas, part(c).removing_replicas) == ((5,), (4,))
    assert reassign(c, [1, 2, 3]) == Errors.NONE  # while 5 is still catching up
    reg = part(c)
    assert reg.replicas == (1, 2, 3, 4, 5)
    assert (reg.adding_replicas, reg.removing_replicas) == ((3,), (4, 5))
    assert reassign(c, None) == Errors.NONE  # back to before the last one: 5 stays
    assert part(c).replicas == (1, 2, 4, 5)


# -- the builder, exhaustively-ish ---------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    current=st.permutations(range(1, 7)).map(lambda x: tuple(x[:3])),
    target=st.permutations(range(1, 7)).flatmap(
        lambda x: st.integers(1, 4).map(lambda n: tuple(x[:n]))
    ),
    order=st.permutations(range(1, 7)),
)
def test_any_reassignment_ends_at_its_target(
    current: tuple[int, ...], target: tuple[int, ...], order: list[int]
) -> None:
    usable = set(range(1, 7))
    reg = PartitionRegistration(current, current, current[0], 0, 0)
    removing = tuple(sorted(set(current) - set(target)))
    change = build_change(
        "tid",
        0,
        reg,
        usable,
        replicas=target + removing,
        removing=removing,
        adding=tuple(sorted(set(target) - set(current))),
    )
    steps = 0
    while change is not None:
        reg = PartitionRegistration(
            reg.replicas if change.replicas is None else change.replicas,
            change.isr,
            change.leader,
            change.leader_epoch,
            change.partition_epoch,
            reg.removing_replicas if change.removing_replicas is None else change.removing_replicas,
            reg.adding_replicas if change.adding_replicas is None else change.adding_replicas,
        )
        assert reg.leader in reg.isr and set(reg.isr) <= set(reg.replicas)
        if not reg.is_reassigning:
            break
        # The next adding replica (in `order`) catches up and joins the ISR.
        joiner = next(r for r in order if r in reg.adding_replicas and r not in reg.isr)
        change = build_change("tid", 0, reg, usable, isr=(*reg.isr, joiner))
        steps += 1
        assert steps <= 6
    assert reg.replicas == target
    assert set(reg.isr) == set(target)
    assert reg.leader != NO_LEADER
    assert reg.leader == (current[0] if current[0] in target else target[0])
    assert not reg.is_reassigning


def test_listing_names_partitions_and_skips_the_unknown() -> None:
    c = cluster_with_topic()
    assert reassign(c, [4, 5, 6]) == Errors.NONE
    req = ListPartitionReassignmentsRequest([TopicPartition("t", 0), TopicPartition("x", 1)])
    (only,) = c.run(req).reassignments
    assert (only.replicas, only.adding_replicas) == ([4, 5, 6, 1, 2, 3], [4, 5, 6])
