"""The seams of the controller's managers: a decision as a value (what its response takes
from the append), the one decision that spans two managers (a broker's new state and the
partition changes it causes, in one batch), refusals without an error field, and the
active-controller loop running on an injected clock (sessions expire when the clock says
so, never when real time passes)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from common.clock import ManualClock
from common.errors import Errors
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig, Decision
from kraft.node import ControllerNode
from kraft.service import ControllerApiError
from kraft.state_machine import AppendResult, AppendStatus, MetadataStateMachine
from metadata_log.controller_api import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableTopic,
    CreateTopicsRequest,
    IncrementalAlterConfigsRequest,
)
from metadata_log.records import (
    TOPIC_RESOURCE,
    ControllerEpochRecord,
    Endpoint,
    PartitionChangeRecord,
    Record,
    RegisterBrokerRecord,
    encode_batch,
)

SESSION_MS = 9000


def new_controller() -> QuorumController:
    ids = itertools.count()
    return QuorumController(
        ControllerConfig(session_timeout_ms=SESSION_MS, default_replication_factor=2),
        new_topic_id=lambda: f"topic-{next(ids)}",
    )


def registration(broker: int, incarnation: int = 1) -> BrokerRegistrationRequest:
    return BrokerRegistrationRequest(
        broker, f"inc-{broker}-{incarnation}", [Endpoint("PLAINTEXT", "127.0.0.1", 9092)]
    )


class Cluster:
    """The sans-I/O controller over the real state machine, committed at once."""

    def __init__(self) -> None:
        self.sm = MetadataStateMachine()
        self.seq = itertools.count()
        self.controller = new_controller()
        self.append([ControllerEpochRecord(1, 0)])
        self.controller.activate(self.sm.image, 0)

    def append(self, records: list[Record]) -> AppendResult:
        return self.sm.append_batch(1, "c", next(self.seq), encode_batch(records))

    def run(self, request: Any, now_ms: int = 0) -> Any:
        decision = self.controller.decide(self.sm.image, request, now_ms)
        if not decision.records:
            return decision.respond(None)
        return decision.respond(self.append(list(decision.records)))

    def start_broker(self, broker: int, incarnation: int = 1, now_ms: int = 0) -> int:
        epoch = self.run(registration(broker, incarnation), now_ms).broker_epoch
        hb = BrokerHeartbeatRequest(broker, epoch, self.sm.next_offset)
        assert not self.run(hb, now_ms).is_fenced
        return epoch


def test_response_takes_the_offset_or_the_error_of_the_append() -> None:
    decision = Decision(
        (RegisterBrokerRecord(1, "i", -1, (), None, True),),
        BrokerRegistrationResponse(Errors.NONE),
        BrokerRegistrationResponse(Errors.UNKNOWN_SERVER_ERROR),
        offset_field="broker_epoch",
        error_field="error_message",
    )
    ok = decision.respond(AppendResult(AppendStatus.OK, 41, 41))
    assert ok == BrokerRegistrationResponse(Errors.NONE, broker_epoch=41)
    refused = decision.respond(AppendResult(AppendStatus.INVALID, error="image moved"))
    assert refused == BrokerRegistrationResponse(
        Errors.UNKNOWN_SERVER_ERROR, error_message="image moved"
    )
    assert Decision.answer("as is").respond(None) == "as is"


def test_a_restarted_broker_leaves_its_leaderships_in_its_registration_batch() -> None:
    cluster = Cluster()
    epochs = {broker: cluster.start_broker(broker) for broker in (0, 1)}
    created = cluster.run(CreateTopicsRequest([CreatableTopic("t", 1, 2)]))
    assert created.topics[0].error_code == Errors.NONE
    leader = cluster.sm.image.topic_by_name("t").partitions[0].leader
    other = 1 - leader
    # The leader's old session runs out while the other broker keeps heartbeating.
    cluster.run(BrokerHeartbeatRequest(other, epochs[other], cluster.sm.next_offset), SESSION_MS)
    decision = cluster.controller.decide(cluster.sm.image, registration(leader, 2), SESSION_MS)
    register, change = decision.records
    assert isinstance(register, RegisterBrokerRecord) and register.fenced
    assert isinstance(change, PartitionChangeRecord)
    assert change.leader == other and change.isr == (other,)


def test_alter_configs_refusals_carry_kafka_codes() -> None:
    cluster = Cluster()
    with pytest.raises(ControllerApiError) as unknown_topic:
        cluster.run(IncrementalAlterConfigsRequest(TOPIC_RESOURCE, "nope", {"retention.ms": "1"}))
    assert unknown_topic.value.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION
    cluster.start_broker(0)
    cluster.run(CreateTopicsRequest([CreatableTopic("t", 1, 1)]))
    for bad in ({"no.such.config": "1"}, {"segment.bytes": "lots"}):
        with pytest.raises(ControllerApiError) as invalid:
            cluster.run(IncrementalAlterConfigsRequest(TOPIC_RESOURCE, "t", bad))
        assert invalid.value.error_code == Errors.INVALID_CONFIG
    assert (
        cluster.run(IncrementalAlterConfigsRequest(TOPIC_RESOURCE, "t", {"retention.ms": "5"}))
        is None
    )
    assert cluster.sm.image.topic_config("t")["retention.ms"] == "5"


# -- the active-controller loop on a manual clock -----------------------------------------


class InstantQuorum:
    """A one-voter quorum that commits at once: enough for ControllerNode's loop."""

    def __init__(self) -> None:
        self.sm = MetadataStateMachine()
        self.seq = itertools.count()
        self.is_leader = True
        self.term = 1
        self.leader_id = 0

    def add_state_listener(self, listener: Callable[[], None]) -> None:
        pass

    def image(self) -> Any:
        return self.sm.image

    @property
    def next_offset(self) -> int:
        return self.sm.next_offset

    async def append(self, epoch: int, records: list[Record], timeout_s: float) -> AppendResult:
        return self.sm.append_batch(epoch, "node", next(self.seq), encode_batch(records))


async def advance(clock: ManualClock, ms: int) -> None:
    """Move the clock and let the loop run its tick to the end (and sleep again)."""
    clock.advance(ms)
    for _ in range(20):
        await asyncio.sleep(0)


async def _sessions_expire_on_the_clock() -> None:
    clock = ManualClock()
    quorum = InstantQuorum()
    config: Any = SimpleNamespace(node_id=0, http_address=lambda n: f"127.0.0.1:{n}")
    node = ControllerNode(config, quorum, new_controller(), clock=clock)  # type: ignore[arg-type]
    await node.start()
    try:
        await advance(clock, 0)  # the loop is asleep on the clock
        assert not node.active
        await advance(clock, 250)  # the first tick claims the controller epoch
        assert node.active
        reg = await node.register_broker(registration(0))
        await node.heartbeat(BrokerHeartbeatRequest(0, reg.broker_epoch, quorum.next_offset))
        assert not quorum.image().brokers[0].fenced
        await asyncio.sleep(0.3)  # real time passing moves nothing
        for _ in range(SESSION_MS // 250 - 1):
            await advance(clock, 250)
        assert not quorum.image().brokers[0].fenced
        await advance(clock, 500)  # past the session: this tick fences
        assert quorum.image().brokers[0].fenced
    finally:
        await node.stop()


def test_sessions_expire_on_the_injected_clock() -> None:
    asyncio.run(_sessions_expire_on_the_clock())
