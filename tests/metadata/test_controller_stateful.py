"""Hypothesis drives the sans-I/O controller through the real replicated state machine:
broker registrations (new incarnations too), heartbeats (caught up or not, controlled
shutdown), clock advances with ticks (session expiry), topic creates and deletes, new
partitions, alter-partition requests (valid and stale in every field), leader elections,
partition reassignments and their cancellation (KIP-455), and controller failovers (a
new active controller with fresh sessions; the old one's writes are fenced by its stale
epoch).

After every step: leader in ISR; ISR a non-empty subset of replicas; no fenced broker
in an ISR of size > 1; a leader is never fenced; leader and partition epochs never
decrease; a partition without a leader has no usable ISR member left (it is reported
offline); a reassigning partition's replicas are its target then the replicas being
removed, the adding ones among the target; and replaying the records from any earlier
snapshot equals the live image.
"""

from __future__ import annotations

import itertools

import msgspec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from common.errors import Errors
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig, Decision
from kraft.state_machine import AppendStatus, MetadataStateMachine
from metadata_log.controller_api import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    ReassignablePartition,
)
from metadata_log.delta import replay
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ControllerEpochRecord,
    Endpoint,
    decode,
    encode_batch,
)
from metadata_log.snapshot import decode_snapshot, encode_snapshot

BROKERS = st.integers(0, 4)
TOPICS = st.sampled_from(["a", "b", "c"])
SESSION_MS = 9000


class ControllerMachine(RuleBasedStateMachine):
    ELR = True  # eligible.leader.replicas.enable (KIP-966)

    def __init__(self) -> None:
        super().__init__()
        self.sm = MetadataStateMachine(max_tail_records=10**9)
        self.now = 0
        self.epoch = 0
        self.seq = itertools.count()
        ids = itertools.count()
        self.new_id = lambda: f"00000000-0000-0000-0000-{next(ids):012d}"
        self.incarnations: dict[int, int] = {}
        self.max_epochs: dict[tuple[str, int], tuple[int, int]] = {}
        self.snapshots: list[bytes] = []
        self.controller: QuorumController

    @initialize()
    def start(self) -> None:
        self._failover()

    # -- plumbing ----------------------------------------------------------------------------

    def _failover(self) -> None:
        self.epoch += 1
        barrier = [ControllerEpochRecord(self.epoch, self.epoch % 3)]
        result = self.sm.append_batch(self.epoch, "c", next(self.seq), encode_batch(barrier))
        assert result.status == AppendStatus.OK
        self.controller = QuorumController(
            ControllerConfig(
                session_timeout_ms=SESSION_MS,
                default_replication_factor=2,
                eligible_leader_replicas_enable=self.ELR,
            ),
            new_topic_id=self.new_id,
        )
        self.controller.activate(self.sm.image, self.now)

    def _run(self, decision: Decision) -> object:
        if not decision.records:
            return decision.respond(None)
        result = self.sm.append_batch(
            self.epoch, "c", next(self.seq), encode_batch(decision.records)
        )
        # A decision taken on the latest image always applies: the controller is serial.
        assert result.status == AppendStatus.OK, result
        return decision.respond(result)

    @property
    def image(self) -> MetadataImage:
        return self.sm.image

    # -- brokers -----------------------------------------------------------------------------

    @rule(broker=BROKERS, new_incarnation=st.booleans())
    def register(self, broker: int, new_incarnation: bool) -> None:
        if new_incarnation or broker not in self.incarnations:
            self.incarnations[broker] = self.incarnations.get(broker, 0) + 1
        req = BrokerRegistrationRequest(
            broker,
            f"inc-{broker}-{self.incarnations[broker]}",
            [Endpoint("PLAINTEXT", "127.0.0.1", 9092 + broker)],
            rack=f"r{broker % 2}",
        )
        resp = self._run(self.controller.decide(self.image, req, self.now))
        if resp.error_code == Errors.NONE:
            assert self.image.brokers[broker].broker_epoch == resp.broker_epoch
        else:
            assert resp.error_code == Errors.DUPLICATE_BROKER_REGISTRATION
            assert self.image.brokers[broker].incarnation_id != req.incarnation_id

    @rule(broker=BROKERS, caught_up=st.booleans(), shutdown=st.booleans(), stale=st.booleans())
    def heartbeat(self, broker: int, caught_up: bool, shutdown: bool, stale: bool) -> None:
        b = self.image.brokers.get(broker)
        epoch = (b.broker_epoch if b else 0) - (1 if stale else 0)
        offset = self.sm.next_offset if caught_up else max(0, epoch - 1)
        req = BrokerHeartbeatRequest(broker, epoch, offset, want_shutdown=shutdown and not stale)
        resp = self._run(self.controller.decide(self.image, req, self.now))
        if b is None:
            assert resp.error_code == Errors.BROKER_ID_NOT_REGISTERED
        elif stale:
            assert resp.error_code == Errors.STALE_BROKER_EPOCH
        else:
            assert resp.error_code == Errors.NONE
            if caught_up and not shutdown:
                assert not self.image.brokers[broker].fenced

    @rule(ms=st.integers(0, 2 * SESSION_MS))
    def advance_and_tick(self, ms: int) -> None:
        self.now += ms
        records = self.controller.tick(self.image, self.now)
        if records:
            result = self.sm.append_batch(self.epoch, "c", next(self.seq), encode_batch(records))
            assert result.status == AppendStatus.OK, result
        # After a tick, nothing is left for a tick to do, and expired sessions are fenced.
        assert self.controller.tick(self.image, self.now) == []
        for b in self.image.brokers.values():
            if not self.controller.cluster.session_alive(b.broker_id, self.now):
                assert b.fenced

    @rule(n=st.integers(1, 5))
    def bootstrap(self, n: int) -> None:
        """Brokers 0..n-1 registered and caught up: the usual healthy cluster."""
        for broker in range(n):
            if broker not in self.image.brokers:
                self.register(broker, new_incarnation=False)
            self.heartbeat(broker, caught_up=True, shutdown=False, stale=False)

    @rule(broker=BROKERS)
    def isolate(self, broker: int) -> None:
        """`broker` stops heartbeating while the others go on: its session expires."""
        half = SESSION_MS // 2 + 1
        self.advance_and_tick(half)
        for other in sorted(self.image.brokers):
            if other != broker and not self.image.brokers[other].in_controlled_shutdown:
                self.heartbeat(other, caught_up=True, shutdown=False, stale=False)
        self.advance_and_tick(half)
        if broker in self.image.brokers:
            assert self.image.brokers[broker].fenced

    @rule()
    def controller_failover(self) -> None:
        stale = self.controller
        self._failover()
        # The old active controller's decisions are refused by its stale epoch.
        topic = CreatableTopic("stale-topic", 1, 1)
        d = stale.decide(self.image, CreateTopicsRequest([topic]), self.now)
        if d.records:
            res = self.sm.append_batch(self.epoch - 1, "old", 0, encode_batch(d.records))
            assert res.status == AppendStatus.STALE_CONTROLLER_EPOCH

    # -- topics ------------------------------------------------------------------------------

    @rule(name=TOPICS, partitions=st.integers(1, 4), rf=st.integers(1, 3), unclean=st.booleans())
    def create_topic(self, name: str, partitions: int, rf: int, unclean: bool) -> None:
        cfg = {"unclean.leader.election.enable": "true"} if unclean else {}
        req = CreateTopicsRequest([CreatableTopic(name, partitions, rf, configs=cfg)])
        resp = self._run(self.controller.decide(self.image, req, self.now))
        (res,) = resp.topics
        live = len([b for b in self.image.live_brokers() if not b.in_controlled_shutdown])
        if res.error_code == Errors.NONE:
            topic = self.image.topic_by_name(name)
            assert topic is not None and len(topic.partitions) == partitions
            assert all(len(set(p.replicas)) == rf for p in topic.partitions.values())
        elif name in self.image.topic_ids:
            assert res.error_code == Errors.TOPIC_ALREADY_EXISTS
        else:
            assert res.error_code == Errors.INVALID_REPLICATION_FACTOR and rf > live

    @rule(name=TOPICS)
    def delete_topic(self, name: str) -> None:
        existed = name in self.image.topic_ids
        resp = self._run(self.controller.decide(self.image, DeleteTopicsRequest([name]), self.now))
        assert resp.topics[0].error_code == (
            Errors.NONE if existed else Errors.UNKNOWN_TOPIC_OR_PARTITION
        )
        assert name not in self.image.topic_ids

    @rule(name=TOPICS, more=st.integers(1, 2))
    def add_partitions(self, name: str, more: int) -> None:
        topic = self.image.topic_by_name(name)
        count = len(topic.partitions) + more if topic else more
        req = CreatePartitionsRequest([CreatePartitionsTopic(name, count)])
        resp = self._run(self.controller.decide(self.image, req, self.now))
        if resp.topics[0].error_code == Errors.NONE:
            assert len(self.image.topic_by_name(name).partitions) == count

    @rule(data=st.data(), unclean=st.booleans())
    def elect_leaders(self, data: st.DataObject, unclean: bool) -> None:
        req = ElectLeadersRequest(1 if unclean else 0)
        self._run(self.controller.decide(self.image, req, self.now))

    # -- alter partition ---------------------------------------------------------------------

    @rule(data=st.data())
    def alter_partition(self, data: st.DataObject) -> None:
        parts = [
            (t.topic_id, p, reg)
            for t in self.image.topics.values()
            for p, reg in t.partitions.items()
        ]
        if not parts:
            return
        topic_id, p, reg = data.draw(st.sampled_from(sorted(parts, key=lambda x: x[:2])))
        requester = reg.leader if reg.leader >= 0 else reg.replicas[0]
        b = self.image.brokers.get(requester)
        flaw = data.draw(
            st.sampled_from(
                [
                    "none",
                    "leader_epoch",
                    "partition_epoch",
                    "broker_epoch",
                    "not_leader",
                    "member_epoch",  # an added member fetched as an older incarnation
                ]
            )
        )
        new_isr = data.draw(
            st.lists(st.sampled_from(reg.replicas), min_size=1, unique=True), label="isr"
        )
        if requester not in new_isr:
            new_isr = [requester, *new_isr]
        if flaw == "not_leader":
            others = [r for r in reg.replicas if r != reg.leader]
            if not others:
                return
            requester = others[0]
            b = self.image.brokers.get(requester)
        added = [r for r in new_isr if r not in reg.isr]
        if flaw == "member_epoch" and not added:
            flaw = "none"
        epochs = [
            (m.broker_epoch if (m := self.image.brokers.get(r)) else -1)
            - (flaw == "member_epoch" and r == added[0])
            for r in new_isr
        ]
        req = AlterPartitionRequest(
            requester,
            (b.broker_epoch if b else 0) - (flaw == "broker_epoch"),
            topic_id,
            p,
            reg.leader_epoch - (flaw == "leader_epoch"),
            reg.partition_epoch - (flaw == "partition_epoch"),
            new_isr,
            epochs,
        )
        resp = self._run(self.controller.decide(self.image, req, self.now))
        after = self.image.partition(topic_id, p)
        if resp.error_code == Errors.NONE:
            assert flaw == "none" and reg.leader == requester
            if reg.is_reassigning and not after.is_reassigning:  # completed in the batch
                assert set(after.isr) == set(new_isr) - set(reg.removing_replicas)
                assert after.replicas == reg.target_replicas
            else:
                assert set(after.isr) == set(new_isr)
            assert all(self.image.is_usable(r) for r in added)
        else:
            assert after == reg, "a refused AlterPartition changed the partition"
            if flaw in ("none", "member_epoch") and reg.leader == requester and b is not None:
                assert resp.error_code == Errors.INELIGIBLE_REPLICA

    # -- reassignments ---------------------------------------------------------------------

    @rule(data=st.data())
    def reassign(self, data: st.DataObject) -> None:
        parts = [
            (t.name, p, reg) for t in self.image.topics.values() for p, reg in t.partitions.items()
        ]
        if not parts:
            return
        name, p, reg = data.draw(st.sampled_from(sorted(parts, key=lambda x: x[:2])))
        usable = sorted(b for b in self.image.brokers if self.image.is_usable(b))
        # Mostly usable brokers (a valid target), sometimes any (refused when not usable).
        pool = st.sampled_from(usable) if usable and data.draw(st.booleans()) else BROKERS
        target = data.draw(
            st.none() | st.lists(pool, min_size=1, max_size=3, unique=True), label="target"
        )
        req = AlterPartitionReassignmentsRequest([ReassignablePartition(name, p, target)])
        (result,) = self._run(self.controller.decide(self.image, req, self.now)).results
        after = self.image.topic_by_name(name).partitions[p]
        if result.error_code != Errors.NONE:
            assert after == reg, "a refused reassignment changed the partition"
            if target is None:
                assert result.error_code in (
                    Errors.NO_REASSIGNMENT_IN_PROGRESS,
                    Errors.INVALID_REPLICA_ASSIGNMENT,  # reverting would be unclean
                )
                assert reg.is_reassigning or result.error_code == Errors.NO_REASSIGNMENT_IN_PROGRESS
            else:
                assert result.error_code == Errors.INVALID_REPLICA_ASSIGNMENT
                assert any(not self.image.is_usable(r) for r in target)
        elif target is None:
            assert not after.is_reassigning and after.replicas == reg.original_replicas
        else:
            assert after.target_replicas == tuple(target)

    @rule(data=st.data())
    def catch_up(self, data: st.DataObject) -> None:
        """The leader of a reassigning partition adds a caught-up replica to the ISR."""
        img = self.image
        cands = [
            (t.topic_id, p, reg, r)
            for t in img.topics.values()
            for p, reg in t.partitions.items()
            if reg.is_reassigning and reg.leader >= 0 and img.is_usable(reg.leader)
            for r in reg.replicas
            if r not in reg.isr and img.is_usable(r)
        ]
        if not cands:
            return
        topic_id, p, reg, r = data.draw(st.sampled_from(sorted(cands, key=lambda c: c[:2])))
        epochs = [img.brokers[m].broker_epoch for m in (*reg.isr, r)]
        req = AlterPartitionRequest(
            reg.leader,
            img.brokers[reg.leader].broker_epoch,
            topic_id,
            p,
            reg.leader_epoch,
            reg.partition_epoch,
            [*reg.isr, r],
            epochs,
        )
        resp = self._run(self.controller.decide(img, req, self.now))
        assert resp.error_code == Errors.NONE, resp
        after = self.image.partition(topic_id, p)
        target = set(reg.target_replicas)
        if target <= set(reg.isr) - set(reg.removing_replicas) | {r}:
            assert not after.is_reassigning and after.replicas == reg.target_replicas, after
            assert after.leader in target, after
        else:
            assert after.is_reassigning and r in after.isr

    @rule()
    def take_snapshot(self) -> None:
        self.snapshots.append(encode_snapshot(self.image))

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def partitions_are_sane(self) -> None:
        img = self.image
        for t in img.topics.values():
            for p, reg in t.partitions.items():
                # With ELR (KIP-966) a fenced last member leaves the ISR too: it may empty.
                elr_on = self.controller.config.eligible_leader_replicas_enable
                assert (reg.isr or elr_on) and set(reg.isr) <= set(reg.replicas), reg
                assert len(set(reg.isr)) == len(reg.isr)
                assert not set(reg.elr) & set(reg.isr) and set(reg.elr) <= set(reg.replicas), reg
                # The last known ELR is the last leader, kept while there is none.
                assert len(reg.last_known_elr) <= 1 and not set(reg.last_known_elr) & set(reg.isr)
                if not elr_on or len(reg.isr) >= 1:  # min.insync.replicas is 1 here
                    assert not reg.elr, reg
                if not elr_on or reg.leader != -1:
                    assert not reg.last_known_elr, reg
                if reg.leader != -1:
                    assert reg.leader in reg.isr, reg
                    assert not img.brokers[reg.leader].fenced, reg
                if len(reg.isr) > 1:
                    assert all(not img.brokers[r].fenced for r in reg.isr), reg
                else:
                    pass  # the last ISR member stays, fenced or not (KIP-841)
                if reg.leader == -1:  # offline: nobody usable could lead
                    assert not any(img.is_usable(r) for r in reg.isr + reg.elr), reg
                key = (t.topic_id, p)
                old = self.max_epochs.get(key, (-1, -1))
                assert reg.leader_epoch >= old[0] and reg.partition_epoch >= old[1]
                self.max_epochs[key] = (reg.leader_epoch, reg.partition_epoch)
                if reg.is_reassigning:
                    assert not set(reg.adding_replicas) & set(reg.removing_replicas), reg
                    assert set(reg.removing_replicas) <= set(reg.replicas), reg
                    assert set(reg.adding_replicas) <= set(reg.target_replicas), reg
                    assert reg.replicas == reg.target_replicas + reg.removing_replicas, reg
        assert img.offline_partitions() == sum(
            1 for t in img.topics.values() for r in t.partitions.values() if r.leader == -1
        )

    @invariant()
    def replay_from_snapshots_equals_live(self) -> None:
        records = self.sm.records_from(0, 10**9)
        assert records is not None
        decoded = [(off, decode(data)) for off, data in records]
        assert replay(MetadataImage(), decoded) == self.image
        for snap in self.snapshots[-3:]:
            base = decode_snapshot(snap)
            tail = [(o, r) for o, r in decoded if o > base.offset]
            assert replay(base, tail) == self.image
        assert decode_snapshot(encode_snapshot(self.image)) == self.image

    @invariant()
    def broker_epochs_are_registration_offsets(self) -> None:
        records = dict(self.sm.records_from(0, 10**9) or [])
        for b in self.image.brokers.values():
            rec = decode(records[b.broker_epoch])
            assert msgspec.structs.asdict(rec)["broker_id"] == b.broker_id


ControllerMachine.TestCase.settings = settings(
    max_examples=300,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestControllerStateMachine = ControllerMachine.TestCase


class ControllerMachineWithoutElr(ControllerMachine):
    ELR = False


ControllerMachineWithoutElr.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestControllerStateMachineWithoutElr = ControllerMachineWithoutElr.TestCase
