"""A Hypothesis model of one partition with three replicas, built from the real cores.

Each replica is a real `HostedPartition` (the sans-I/O `Partition` core, a real `Log`
on disk, producer state): the very methods the broker's request handlers and fetchers
call. The controller is the real sans-I/O `QuorumController` over the real replicated
state machine. Only the wires are modelled: follower fetches, their answers and
AlterPartition requests travel through a network that delivers them in any order, drops
and duplicates them; brokers learn metadata whenever a rule says so (possibly late, so
zombie leaders exist); there is one explicit clock.

The glue around those cores is the broker's own too (broker/replica_core.py): which
fetch a leader answers, the periodic ISR check, what an AlterPartition answer does.

Rules: produce (acks 0, 1, all) to any broker that thinks it leads; a follower sends a
fetch; deliver, drop or duplicate a message; sync a broker's metadata; tick the clock
(live brokers heartbeat, sessions expire, leaders shrink lagging ISRs); flush a log;
checkpoint a HW; pause and resume a broker (no heartbeats, no message handling); crash
a broker (a SIGKILL keeps what reached the page cache; a machine crash loses the
unflushed tail) and restart it (it registers again; the controller takes it out of the
ISR); no rule elects directly: the controller elects on fencing and registration.

A machine crash may lose acknowledged records on that machine. Without KIP-966's
unclean-shutdown flag and unclean recovery, Kafka only promises they survive on the
other ISR members, and only while the controller does not drop those members in favour
of the crashed one. So the model allows a machine crash only while the other two
replicas are up, unpaused, in the ISR and intact, and no other fault until the crashed
replica has left the ISR: one machine at a time. Otherwise SIGKILLs and pauses are
unlimited. With `DOUBLE_CRASHES` (and eligible leader replicas, KIP-966, `ELR`) machine
crashes may hit more than one replica, as tests/harness/replication_faults.py says.

Invariants after every step (shared/notes/reliability.md): HW <= LEO everywhere; the
HW never decreases on a leader within its epoch; leader in the ISR, ISR a non-empty
subset of the replicas; every intact ISR member holds every record below the leader's
HW; the leader holds every acknowledged record; any two replicas' logs match below the
smaller HW; nothing below a replica's HW is ever truncated or changed (so a consumed
offset never changes value); batch epochs never decrease along a log nor exceed the
controller's leader epoch; an acks=all acknowledgement finds the record on at least
min.insync.replicas logs. At the end the cluster is healed (restart, resume, sync,
fetch, tick) and must converge: one leader, ISR of 3, identical logs, HW = LEO, every
acknowledged record present once on every replica.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from broker.alter_partition import alter_partition_request
from broker.fetcher import FollowerData
from broker.hosted import HostedPartition, log_headers, start_leader_epoch
from broker.partition import AlterIsr, Partition
from broker.producer_state import ProducerStateManager
from broker.replica_core import apply_alter_answer, fetch_epoch_error, isr_change_due
from common.errors import Errors
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig, Decision
from kraft.state_machine import AppendStatus, MetadataStateMachine
from metadata_log.controller_api import (
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    CreatableTopic,
    CreateTopicsRequest,
)
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import ControllerEpochRecord, Endpoint, encode_batch
from storage.log import Log
from storage.record_batch import validate_records
from storage.records import Record, build_batch
from tests.harness.replication_checks import ReplicationChecks
from tests.harness.replication_faults import CrashRules
from tests.harness.replication_model_parts import (
    BROKERS,
    LAG_MS,
    LOG_CONFIG,
    MIN_ISR,
    SESSION_MS,
    TOPIC,
    TOPIC_ID,
    Ack,
    AlterReq,
    AlterResp,
    Broker,
    FetchReq,
    FetchResp,
    Message,
    entries,
    event,
)


class ReplicationModel(CrashRules, ReplicationChecks, RuleBasedStateMachine):
    # eligible.leader.replicas.enable (KIP-966) on the controller and the brokers.
    ELR = True
    # Machine crashes on more than one replica (tests/harness/replication_faults.py).
    DOUBLE_CRASHES = False

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(tempfile.mkdtemp(prefix="replication-model-"))
        self.now = 0
        self.sm = MetadataStateMachine(max_tail_records=10**9)
        self.seq = itertools.count()
        self.value_ids = itertools.count(1)
        self.net: list[Message] = []
        self.acked: dict[int, int] = {}  # value id -> offset, acks=all acknowledged
        self.shadow_elr: set[int] = set()  # the ELR as the model keeps it (CrashRules)
        self.max_leader_epoch = 0
        self.brokers = {b: Broker(b, self.root / f"broker-{b}") for b in BROKERS}
        self.controller = QuorumController(
            ControllerConfig(
                session_timeout_ms=SESSION_MS,
                default_replication_factor=3,
                eligible_leader_replicas_enable=self.ELR,
            ),
            new_topic_id=lambda: TOPIC_ID,
        )

    # -- plumbing ----------------------------------------------------------------------------

    def run(self, decision: Decision) -> Any:
        if not decision.records:
            return decision.respond(None)
        before = self.reg if self.image.topic_by_name(TOPIC) is not None else None
        result = self.sm.append_batch(1, "c", next(self.seq), encode_batch(decision.records))
        assert result.status == AppendStatus.OK, result
        if before is not None:
            self.track_elr(before, self.reg)
        return decision.respond(result)

    def append(self, records: list) -> None:
        if records:
            self.run(Decision(tuple(records)))

    @property
    def image(self) -> MetadataImage:
        return self.sm.image

    @property
    def reg(self) -> PartitionRegistration:
        t = self.image.topic_by_name(TOPIC)
        assert t is not None
        return t.partitions[0]

    def register(self, b: Broker) -> bool:
        """A (re)started broker registers; while its old incarnation's session lives the
        controller refuses (DUPLICATE_BROKER_REGISTRATION) and it tries again later.
        Every restart here follows a crash (no clean-shutdown marker): it says its last
        shutdown was unclean (previous_broker_epoch -1), as the broker does."""
        req = BrokerRegistrationRequest(
            b.id,
            f"inc-{b.id}-{b.incarnation}",
            [Endpoint("PLAINTEXT", "127.0.0.1", 9000 + b.id)],
            previous_broker_epoch=-1,
        )
        resp = self.run(self.controller.decide(self.image, req, self.now))
        if resp.error_code == Errors.DUPLICATE_BROKER_REGISTRATION:
            return False
        assert resp.error_code == Errors.NONE, resp
        self.unclean_restart(b.id)
        b.broker_epoch = resp.broker_epoch
        b.registered = True
        return True

    def heartbeat(self, b: Broker) -> None:
        req = BrokerHeartbeatRequest(b.id, b.broker_epoch, b.metadata_offset)
        self.run(self.controller.decide(self.image, req, self.now))

    def open_replica(self, b: Broker) -> None:
        lg = Log(b.dir / f"{TOPIC}-0", LOG_CONFIG)
        producers = ProducerStateManager()
        producers.rebuild(log_headers(lg))
        core: Partition[Any] = Partition(TOPIC, 0, TOPIC_ID, b.id)
        core.high_watermark = min(b.checkpoint_hw, lg.log_end_offset)
        core.hw_min_isr = MIN_ISR if self.ELR else 0  # as ReplicaManager sets it
        b.h = HostedPartition(core, lg, producers)  # type: ignore[arg-type]
        b.leader_hw = None

    def send(self, msg: Message) -> None:
        self.net.append(msg)

    # -- set-up ------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.append([ControllerEpochRecord(1, 0)])
        self.controller.activate(self.image, self.now)
        for b in self.brokers.values():
            self.register(b)
        for b in self.brokers.values():
            b.metadata_offset = self.sm.next_offset - 1
            self.heartbeat(b)
        req = CreateTopicsRequest(
            [
                CreatableTopic(
                    TOPIC, assignments={0: list(BROKERS)}, configs={"min.insync.replicas": "2"}
                )
            ]
        )
        resp = self.run(self.controller.decide(self.image, req, self.now))
        assert resp.topics[0].error_code == Errors.NONE, resp
        for b in self.brokers.values():
            self.open_replica(b)
            self.sync(b)

    def teardown(self) -> None:
        try:
            if getattr(self, "_healable", False):
                self.heal_and_check()
        finally:
            for b in self.brokers.values():
                if b.h is not None and b.up:
                    b.h.log.close()
            shutil.rmtree(self.root, ignore_errors=True)

    # -- metadata ----------------------------------------------------------------------------

    def sync(self, b: Broker) -> None:
        """The broker applies the latest metadata (as ReplicaManager.on_metadata_update)."""
        h = b.h
        assert h is not None
        reg, core = self.reg, h.core
        b.metadata_offset = self.sm.next_offset - 1
        leads = reg.leader == b.id
        if leads and (not core.is_leader or reg.leader_epoch != core.leader_epoch):
            start_leader_epoch(h.log, reg.leader_epoch)
        h.install(reg, self.now)

    @rule(broker=st.sampled_from(BROKERS))
    def sync_metadata(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.active:
            self.sync(b)

    @rule(ms=st.sampled_from([100, 500, 2_000, 10_000]))
    def tick(self, ms: int) -> None:
        """Time passes: live brokers heartbeat, the controller fences expired sessions
        and elects, leaders run their ISR shrink check."""
        self.now += ms
        for b in self.brokers.values():
            if b.active:
                self.heartbeat(b)
        for b in self.brokers.values():
            if b.up and not b.paused and not b.registered and self.register(b):
                self.sync(b)
                self.heartbeat(b)
        self.append(self.controller.tick(self.image, self.now))
        for b in self.brokers.values():
            if b.active and b.h is not None:
                due = isr_change_due(b.h, self.now, LAG_MS)
                if due is not None:
                    self.send_alter(b, due[0])

    def send_alter(self, b: Broker, alter: AlterIsr) -> None:
        assert b.h is not None
        req = alter_partition_request(b.id, b.broker_epoch, b.h.core.topic_id, 0, alter)
        self.send(AlterReq(b.id, alter, req, b.incarnation))

    # -- produce -----------------------------------------------------------------------------

    @rule(
        broker=st.sampled_from(BROKERS),
        to_leader=st.booleans(),
        acks=st.sampled_from([0, 1, -1, -1]),
    )
    def produce(self, broker: int, to_leader: bool, acks: int) -> None:
        """To the controller's leader (a client with fresh metadata), or to any broker
        that thinks it leads (a client with stale metadata, maybe a zombie leader)."""
        b = self.brokers[self.reg.leader if to_leader and self.reg.leader > 0 else broker]
        if not b.active or b.h is None or not b.h.core.is_leader:
            return
        vid = next(self.value_ids)
        records = build_batch([Record(b"v", timestamp=vid)], now_ms=vid)
        ack = Ack(self, vid, -1)
        result, required = b.h.produce(validate_records(records), acks, MIN_ISR, ack)  # type: ignore[arg-type]
        if result.error_code == 0:
            ack.offset = result.base_offset
            if required is None and acks == -1:
                self.on_ack(ack, 0)

    def on_ack(self, ack: Ack, code: int) -> None:
        event(f"acks=all answered {code}")
        if code != 0:
            return
        assert ack.offset >= 0
        copies = [
            b.id
            for b in self.brokers.values()
            if b.h is not None
            and any(
                e[0] == ack.offset and e[2] == ack.value_id
                for e in (entries(b.h.log) if b.up else b.last_entries)
            )
        ]
        # A follower may fetch the record, then lose it in a machine crash before the
        # leader hears of the crash: the copy it counted is gone (Kafka acknowledges it
        # too). Only machine crashes on more than one replica make that reachable.
        gone = [b.id for b in self.brokers.values() if not b.intact and b.id not in copies]
        counted = len(copies) + (len(gone) if self.DOUBLE_CRASHES else 0)
        assert counted >= MIN_ISR, f"acks=all for {ack.value_id} with copies on {copies}"
        self.acked[ack.value_id] = ack.offset

    @rule(acks=st.sampled_from([1, -1]))
    def produce_three(self, acks: int) -> None:
        """Three produces to the leader the controller names, back to back."""
        for _ in range(3):
            self.produce(self.reg.leader if self.reg.leader > 0 else 1, True, acks)

    # -- replication -------------------------------------------------------------------------

    @rule(broker=st.sampled_from(BROKERS))
    def send_fetch(self, broker: int) -> None:
        b = self.brokers[broker]
        if not b.active or b.h is None or b.h.core.is_leader or b.h.core.leader < 0:
            return
        self.send(FetchReq(b.id, b.h.core.leader, b.h.fetch_state(), b.incarnation, b.broker_epoch))

    def handle(self, msg: Message) -> None:
        if isinstance(msg, AlterReq):
            resp = self.run(self.controller.decide(self.image, msg.req, self.now))
            self.send(AlterResp(msg.src, msg.alter, resp, msg.src_incarnation))
            return
        b = self.brokers[msg.dst]
        if not b.up or b.h is None or not b.registered:
            return  # a broker opens its listener once registered and caught up
        h, core = b.h, b.h.core
        if isinstance(msg, FetchReq):
            st_ = msg.sent
            code = fetch_epoch_error(h, st_.leader_epoch)
            if code != Errors.NONE:
                data = FollowerData(code)
            else:
                # Usability as the controller sees it now (the leader's own view may be
                # later; the controller checks again when the proposal arrives).
                result, expand = h.serve_follower_fetch(
                    msg.src,
                    st_.fetch_offset,
                    st_.last_fetched_epoch,
                    1 << 20,
                    self.now,
                    self.image.usable_broker_epoch(msg.src),
                    msg.broker_epoch,
                )
                recs = result.records
                raw = recs.read() if recs is not None and hasattr(recs, "read") else recs
                data = FollowerData(
                    result.error_code,
                    result.high_watermark,
                    result.log_start_offset,
                    bytes(raw) if raw else None,  # type: ignore[arg-type]
                    result.diverging_epoch,
                )
                if expand is not None:
                    self.send_alter(b, expand)
            self.send(FetchResp(msg.src, msg.sent, data, msg.src_incarnation))
        elif msg.dst_incarnation != b.incarnation:
            return  # an answer to a process that is gone: its connection closed
        elif isinstance(msg, FetchResp):
            if not core.is_leader:
                leo = h.log.log_end_offset
                h.apply_leader_answer_now(msg.sent, msg.data)
                if h.log.log_end_offset < leo:
                    event("a follower truncated")
        else:
            for token, code in apply_alter_answer(h, msg.alter, msg.resp):
                token.set_result(code)

    @rule(broker=st.sampled_from(BROKERS))
    def replicate(self, broker: int) -> None:
        """A fetch round trip on a quiet network: the request and its answer at once."""
        self.send_fetch(broker)
        if self.net and isinstance(self.net[-1], FetchReq) and self.net[-1].src == broker:
            self.handle(self.net.pop())
            if self.net and isinstance(self.net[-1], FetchResp):
                self.handle(self.net.pop())

    @rule()
    def settle(self) -> None:
        """A calm moment on the network: everything in flight arrives in order (except
        to paused brokers), then every follower makes two fetch round trips (the HW
        moves on the second) and the ISR changes they cause reach the controller and
        come back."""
        self.deliver_all()
        for b in self.brokers.values():
            if b.active:
                self.sync(b)
        for _ in range(2):
            for broker in BROKERS:
                self.replicate(broker)
        self.deliver_all()

    def deliver_all(self) -> None:
        held: list[Message] = []
        while self.net:
            msg = self.net.pop(0)
            if not isinstance(msg, AlterReq) and self.brokers[msg.dst].paused:
                held.append(msg)
            else:
                self.handle(msg)
        self.net = held

    @precondition(lambda self: self.net)
    @rule(i=st.integers(0, 1 << 16))
    def deliver(self, i: int) -> None:
        msg = self.net.pop(i % len(self.net))
        dst = msg.dst if not isinstance(msg, AlterReq) else None
        if dst is not None and self.brokers[dst].paused:
            self.net.append(msg)  # it waits in the socket buffer
            return
        self.handle(msg)

    @precondition(lambda self: self.net)
    @rule(i=st.integers(0, 1 << 16))
    def drop(self, i: int) -> None:
        self.lose(self.net.pop(i % len(self.net)))

    def lose(self, msg: Message) -> None:
        """A lost fetch is just lost. A lost AlterPartition request or answer is what the
        broker's channel turns into an error after its retries and deadline: the leader
        hears REQUEST_TIMED_OUT (whether or not the controller applied it)."""
        if isinstance(msg, AlterReq):
            msg = AlterResp(msg.src, msg.alter, AlterPartitionResponse(7), msg.src_incarnation)
        if isinstance(msg, AlterResp) and msg.resp.error_code == Errors.NONE:
            msg = AlterResp(msg.dst, msg.alter, AlterPartitionResponse(7), msg.dst_incarnation)
        if isinstance(msg, AlterResp):
            self.handle(msg)

    @precondition(lambda self: self.net)
    @rule(i=st.integers(0, 1 << 16))
    def duplicate(self, i: int) -> None:
        self.net.append(self.net[i % len(self.net)])
