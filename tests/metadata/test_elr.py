"""Eligible leader replicas (KIP-966) on the sans-I/O controller: the ELR kept by
AlterPartition and fencing, the election order ISR, ELR, unclean, unclean-shutdown
registrations, the switch, and the records' compatibility with logs written before."""

from __future__ import annotations

import itertools
from typing import Any

import msgspec

from common.errors import Errors
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig
from kraft.election import ElrPolicy, PartitionView, elect
from kraft.state_machine import MetadataStateMachine
from metadata_log.controller_api import (
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreateTopicsRequest,
)
from metadata_log.image import PartitionRegistration
from metadata_log.records import (
    NO_LEADER,
    ControllerEpochRecord,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    decode,
    encode_batch,
)
from metadata_log.snapshot import decode_snapshot, encode_snapshot

SESSION_MS = 9000
ON = ElrPolicy(True, 2)


class Cluster:
    """Three brokers and topic "t" (replicas 1, 2, 3; min.insync.replicas 2), committed
    at once on the real state machine."""

    def __init__(self, elr: bool = True, unclean: bool = False) -> None:
        self.sm = MetadataStateMachine()
        self.seq = itertools.count()
        self.now = 0
        self.controller = QuorumController(
            ControllerConfig(session_timeout_ms=SESSION_MS, eligible_leader_replicas_enable=elr),
            new_topic_id=lambda: "tid",
        )
        self.sm.append_batch(1, "c", next(self.seq), encode_batch([ControllerEpochRecord(1, 0)]))
        self.controller.activate(self.sm.image, 0)
        self.epochs = {b: self.register(b, 1) for b in (1, 2, 3)}
        for b in (1, 2, 3):
            self.heartbeat(b)
        configs = {"min.insync.replicas": "2"}
        if unclean:
            configs["unclean.leader.election.enable"] = "true"
        topic = CreatableTopic("t", assignments={0: [1, 2, 3]}, configs=configs)
        assert self.run(CreateTopicsRequest([topic])).topics[0].error_code == Errors.NONE

    def run(self, request: Any) -> Any:
        decision = self.controller.decide(self.sm.image, request, self.now)
        if not decision.records:
            return decision.respond(None)
        batch = encode_batch(list(decision.records))
        return decision.respond(self.sm.append_batch(1, "c", next(self.seq), batch))

    def register(self, b: int, incarnation: int, previous_epoch: int = -1) -> int:
        req = BrokerRegistrationRequest(
            b,
            f"inc-{b}-{incarnation}",
            [Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b)],
            previous_broker_epoch=previous_epoch,
        )
        resp = self.run(req)
        assert resp.error_code == Errors.NONE, resp
        return resp.broker_epoch

    def heartbeat(self, b: int) -> None:
        self.run(BrokerHeartbeatRequest(b, self.epochs[b], self.sm.next_offset))

    @property
    def reg(self) -> PartitionRegistration:
        return self.sm.image.topics["tid"].partitions[0]

    def shrink(self, isr: tuple[int, ...]) -> None:
        reg = self.reg
        req = AlterPartitionRequest(
            reg.leader,
            self.epochs[reg.leader],
            "tid",
            0,
            reg.leader_epoch,
            reg.partition_epoch,
            list(isr),
            [self.epochs[r] for r in isr],
        )
        assert self.run(req).error_code == Errors.NONE

    def expire(self, *dead: int) -> None:
        """Time passes; every broker but `dead` heartbeats; the controller fences."""
        self.now += SESSION_MS + 1
        for b in (1, 2, 3):
            if b not in dead and not self.sm.image.brokers[b].fenced:
                self.heartbeat(b)
        records = self.controller.tick(self.sm.image, self.now)
        if records:
            self.sm.append_batch(1, "c", next(self.seq), encode_batch(records))


def test_the_isr_shrinking_below_min_isr_fills_the_elr_and_reaching_it_empties_it() -> None:
    c = Cluster()
    assert c.reg.leader == 1 and c.reg.isr == (1, 2, 3)
    c.shrink((1, 2))  # still at min ISR: no ELR
    assert c.reg.elr == () and c.reg.last_known_elr == ()
    c.shrink((1,))
    assert c.reg.isr == (1,) and c.reg.elr == (2,)
    c.shrink((1, 3))  # back at min ISR: emptied
    assert c.reg.isr == (1, 3) and c.reg.elr == () and c.reg.last_known_elr == ()


def test_a_lost_leader_is_replaced_by_an_unfenced_elr_member_that_leads_alone() -> None:
    c = Cluster()
    c.shrink((1, 2))
    c.shrink((1,))
    c.expire(1)  # the only ISR member dies
    reg = c.reg
    assert reg.leader == 2 and reg.isr == (2,), reg
    assert reg.elr == (1,), reg  # fenced, it stays eligible (it was in sync at the HW)


def test_a_fenced_last_isr_member_leaves_the_isr_for_the_elr_and_leads_again() -> None:
    c = Cluster()
    c.shrink((1, 2))
    c.shrink((1,))
    c.expire(1, 2)  # 1 and 2 both die: nobody usable is eligible
    reg = c.reg
    assert reg.leader == NO_LEADER and reg.isr == () and reg.elr == (1, 2), reg
    assert 3 not in reg.elr  # it left the ISR at min ISR: not known to hold the HW
    # 2 comes back after a clean shutdown: it stays eligible, and leads once unfenced.
    c.epochs[2] = c.register(2, 2, previous_epoch=c.epochs[2])
    assert c.reg.elr == (1, 2) and c.reg.leader == NO_LEADER
    c.heartbeat(2)
    assert c.reg.leader == 2 and c.reg.isr == (2,) and c.reg.elr == (1,), c.reg


def test_an_unclean_shutdown_takes_the_broker_out_of_every_elr() -> None:
    c = Cluster()
    c.shrink((1, 2))
    c.shrink((1,))
    c.expire(1, 2)
    c.epochs[2] = c.register(2, 2, previous_epoch=-1)  # its log may have lost records
    assert c.reg.elr == (1,) and c.reg.leader == NO_LEADER, c.reg
    c.heartbeat(2)
    # Unfenced but not eligible, and no unclean election: the partition waits for 1.
    assert c.reg.leader == NO_LEADER and 2 not in c.reg.elr + c.reg.last_known_elr, c.reg
    c.epochs[1] = c.register(1, 2, previous_epoch=c.epochs[1])
    c.heartbeat(1)
    assert c.reg.leader == 1 and c.reg.isr == (1,), c.reg


def test_a_wrong_previous_epoch_counts_as_unclean() -> None:
    c = Cluster()
    c.shrink((1, 2))
    c.shrink((1,))
    c.expire(1, 2)
    c.epochs[1] = c.register(1, 2, previous_epoch=c.epochs[1] + 1000)
    assert c.reg.elr == (2,) and c.reg.last_known_elr == (1,), c.reg


def test_with_nobody_eligible_the_last_known_leader_leads_again() -> None:
    """Every broker killed: all come back from an unclean shutdown, so the ELR empties,
    and the last leader (kept in last_known_elr) is the one that leads (Kafka's
    balanced recovery) rather than the partition staying offline for good."""
    c = Cluster()
    c.shrink((1, 2))
    c.expire(1, 2, 3)
    reg = c.reg
    assert reg.isr == () and reg.elr == (1, 2) and reg.last_known_elr == (1,), reg
    for b in (3, 2):
        c.epochs[b] = c.register(b, 2, previous_epoch=-1)
        c.heartbeat(b)
    assert c.reg.leader == NO_LEADER and c.reg.elr == (1,), c.reg  # 1 may return cleanly
    c.epochs[1] = c.register(1, 2, previous_epoch=-1)
    assert c.reg.elr == () and c.reg.last_known_elr == (1,), c.reg
    c.heartbeat(1)
    reg = c.reg
    assert reg.leader == 1 and reg.isr == (1,) and reg.last_known_elr == (), reg


def test_unclean_election_comes_after_the_elr_and_clears_it() -> None:
    c = Cluster(unclean=True)
    c.shrink((1, 2))
    c.shrink((1,))
    c.expire(1, 2)
    reg = c.reg
    assert reg.leader == 3 and reg.isr == (3,), reg  # allowed by the topic: unclean
    assert reg.elr == () and reg.last_known_elr == (), reg


def test_with_elr_off_the_last_isr_member_stays_and_no_elr_is_kept() -> None:
    c = Cluster(elr=False)
    c.shrink((1, 2))
    c.shrink((1,))
    assert c.reg.elr == ()
    c.expire(1)
    reg = c.reg
    assert reg.leader == NO_LEADER and reg.isr == (1,) and reg.elr == (), reg
    # 1 returns from an unclean shutdown and leads again, with whatever its log kept:
    # what KIP-966 prevents (2 held every committed record).
    c.epochs[1] = c.register(1, 2, previous_epoch=-1)
    c.heartbeat(1)
    assert c.reg.leader == 1


def test_election_order_is_isr_then_unfenced_elr_in_replica_order() -> None:
    p = PartitionView((3, 1, 2), (), NO_LEADER, 4, 7, elr=(1, 2))
    change = elect(p, {1, 2}, unclean_allowed=True, policy=ON)
    assert change is not None and change.leader == 1 and change.isr == (1,)
    assert change.elr == (2,) and change.leader_epoch == 5 and change.partition_epoch == 8
    assert elect(p, {2}, unclean_allowed=False, policy=ON).leader == 2  # type: ignore[union-attr]
    # Only a replica outside ISR and ELR is usable: offline unless unclean is allowed.
    assert elect(p, {3}, unclean_allowed=False, policy=ON) is None
    unclean = elect(p, {3}, unclean_allowed=True, policy=ON)
    assert unclean is not None and unclean.leader == 3 and unclean.elr == ()
    # A usable ISR member beats every ELR member.
    q = PartitionView((1, 2, 3), (3,), NO_LEADER, 0, 0, elr=(1, 2))
    assert elect(q, {1, 2, 3}, unclean_allowed=False, policy=ON).leader == 3  # type: ignore[union-attr]


def test_records_without_the_elr_fields_still_load() -> None:
    old_partition = {
        "type": "partition",
        "topic_id": "tid",
        "partition": 0,
        "replicas": [1, 2],
        "isr": [1, 2],
        "leader": 1,
    }
    rec = decode(msgspec.msgpack.encode(old_partition))
    assert isinstance(rec, PartitionRecord) and rec.elr == () and rec.last_known_elr == ()
    old_change = {k: v for k, v in old_partition.items() if k != "replicas"}
    old_change |= {"type": "partition_change", "leader_epoch": 1, "partition_epoch": 1}
    change = decode(msgspec.msgpack.encode(old_change))
    assert isinstance(change, PartitionChangeRecord)
    assert change.elr is None and change.last_known_elr is None  # unchanged


def test_a_snapshot_keeps_the_elr() -> None:
    c = Cluster()
    c.shrink((1, 2))
    c.shrink((1,))
    c.expire(1, 2)
    back = decode_snapshot(encode_snapshot(c.sm.image))
    assert back.topics["tid"].partitions[0] == c.reg
    assert c.reg.elr == (1, 2)


def test_turning_elr_off_keeps_an_elr_member_as_the_last_isr_member() -> None:
    """An ISR that emptied while ELR was on: with ELR off an ELR member is the ISR member
    kept (so it can lead when back), and the ELR fields are cleared."""
    p = PartitionView((1, 2, 3), (), NO_LEADER, 3, 9, elr=(2, 3), last_known_elr=(1,))
    change = elect(p, set(), unclean_allowed=False, restarted=frozenset({2}))
    assert change is not None and change.leader == NO_LEADER and change.isr == (3,)
    assert change.elr == () and change.last_known_elr == ()
    bare = PartitionView((1, 2), (), NO_LEADER, 0, 0, last_known_elr=(1,))
    cleared = elect(bare, set(), unclean_allowed=False)
    assert cleared is not None and cleared.isr == () and cleared.last_known_elr == ()


def test_reassignment_keeps_the_elr_within_the_replicas_and_out_of_the_isr() -> None:
    """The stateful controller test found reassignment changes (built without ELR) that
    left a replica in both the ISR and the ELR, or an ELR beside an ISR at min ISR."""
    from kraft.reassignment import build_change, start_change

    on = ElrPolicy(enabled=True, min_isr=1)
    # Broker 0 fenced, the partition offline with 0 as its ELR and last known leader;
    # moved to broker 1 (usable).
    reg = PartitionRegistration((0,), (), -1, 1, 1, elr=(0,), last_known_elr=(0,))
    change = start_change("t", 0, reg, [1], {1}, on)
    assert change is not None
    replicas = change.replicas or reg.replicas
    elr = reg.elr if change.elr is None else change.elr
    last_known = reg.last_known_elr if change.last_known_elr is None else change.last_known_elr
    assert set(elr) <= set(replicas) and not set(elr) & set(change.isr)
    assert not set(last_known) & set(change.isr)
    # A reassignment completing with an ISR at min ISR: no ELR is left beside it.
    moving = PartitionRegistration(
        (1, 0), (1,), 1, 2, 3, removing_replicas=(0,), adding_replicas=(), elr=(0,)
    )
    done = build_change("t", 0, moving, {1}, policy=on)
    assert done is not None and done.elr == () and done.isr == (1,)
