"""The fast-fencing rule of the cluster control manager (kraft/cluster_control.py), sans-I/O:
a sign that a broker's process is gone (`BrokerUnreachableRequest`: its controller
connections dropped, or a follower was refused) shrinks its session to
`broker.disconnect.fence.grace.ms` counted from its last heartbeat; the controller's own
probe finding every listener refusing (`confirmed_dead`) fences it at the next tick; a
heartbeat after the sign clears both; silence alone keeps the full session timeout."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import Errors
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig
from kraft.state_machine import AppendStatus, MetadataStateMachine
from metadata_log.controller_api import (
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerUnreachableRequest,
    CreatableTopic,
    CreateTopicsRequest,
)
from metadata_log.records import ControllerEpochRecord, Endpoint, Record, encode_batch

SESSION_MS = 9000
GRACE_MS = 3000
HEARTBEAT_MS = 2000


class Cluster:
    """The sans-I/O controller over the real state machine, committed at once."""

    def __init__(self, grace_ms: int = GRACE_MS) -> None:
        self.sm = MetadataStateMachine()
        self.seq = itertools.count()
        ids = itertools.count()
        self.controller = QuorumController(
            ControllerConfig(
                session_timeout_ms=SESSION_MS,
                disconnect_grace_ms=grace_ms,
                default_replication_factor=3,
            ),
            new_topic_id=lambda: f"topic-{next(ids)}",
        )
        self.append([ControllerEpochRecord(1, 0)])
        self.controller.activate(self.sm.image, 0)
        self.epochs: dict[int, int] = {}

    def append(self, records: list[Record]) -> None:
        result = self.sm.append_batch(1, "c", next(self.seq), encode_batch(records))
        assert result.status == AppendStatus.OK, result

    def run(self, request: Any, now_ms: int) -> Any:
        decision = self.controller.decide(self.sm.image, request, now_ms)
        if not decision.records:
            return decision.respond(None)
        result = self.sm.append_batch(1, "c", next(self.seq), encode_batch(decision.records))
        return decision.respond(result)

    def tick(self, now_ms: int) -> None:
        records = self.controller.tick(self.sm.image, now_ms)
        if records:
            self.append(records)

    def start(self, brokers: range, now_ms: int = 0) -> None:
        for b in brokers:
            req = BrokerRegistrationRequest(
                b, f"inc-{b}", [Endpoint("PLAINTEXT", "127.0.0.1", 9092 + b)]
            )
            self.epochs[b] = self.run(req, now_ms).broker_epoch
        for b in brokers:
            assert not self.heartbeat(b, now_ms).is_fenced
        created = self.run(CreateTopicsRequest([CreatableTopic("t", 6, 3)]), now_ms)
        assert created.topics[0].error_code == Errors.NONE

    def heartbeat(self, broker: int, now_ms: int, **kw: Any) -> Any:
        req = BrokerHeartbeatRequest(broker, self.epochs[broker], self.sm.next_offset, **kw)
        return self.run(req, now_ms)

    def signal(
        self, broker: int, now_ms: int, reason: str = "refused", epoch: int | None = None
    ) -> Any:
        epoch = self.epochs[broker] if epoch is None else epoch
        req = BrokerUnreachableRequest(broker, epoch, 9, reason)  # type: ignore[arg-type]
        return self.run(req, now_ms)

    def confirm(self, broker: int, epoch: int | None = None) -> bool:
        epoch = self.epochs[broker] if epoch is None else epoch
        return self.controller.cluster.confirmed_dead(self.sm.image, broker, epoch)

    def fenced(self, broker: int) -> bool:
        return self.sm.image.brokers[broker].fenced

    def leads(self, broker: int) -> int:
        return sum(r.leader == broker for r in self.sm.image.topic_by_name("t").partitions.values())


def test_a_dead_broker_is_fenced_a_grace_after_its_last_heartbeat_and_leaves_leaderships() -> None:
    c = Cluster()
    c.start(range(3))
    assert c.leads(0) == 2
    c.heartbeat(0, 1000)  # its last heartbeat
    assert c.signal(0, 1500, "disconnected").error_code == Errors.NONE
    c.tick(1000 + GRACE_MS - 1)
    assert not c.fenced(0)  # the grace is a heartbeat's chance to prove it alive
    c.tick(1000 + GRACE_MS)
    assert c.fenced(0)
    assert c.leads(0) == 0  # in the same batch: no committed image has a fenced leader


def test_a_sign_long_after_the_last_heartbeat_fences_at_the_next_tick() -> None:
    c = Cluster()
    c.start(range(3))
    c.signal(1, 5000)
    c.tick(5000)
    assert c.fenced(1) and c.leads(1) == 0


def test_a_heartbeat_after_the_sign_clears_it_and_restores_the_full_session() -> None:
    c = Cluster()
    c.start(range(3))
    c.signal(2, 100, "disconnected")  # e.g. its long-poll reconnected elsewhere
    c.heartbeat(2, 1900)
    c.tick(1900 + GRACE_MS + 1)
    assert not c.fenced(2)
    assert not c.controller.cluster.is_suspected(2)
    c.tick(1900 + SESSION_MS - 1)
    assert not c.fenced(2)
    c.tick(1900 + SESSION_MS)
    assert c.fenced(2)  # silence: the session timeout, as in Kafka


def test_a_confirmed_sign_fences_at_the_next_tick_without_waiting_the_grace() -> None:
    c = Cluster()
    c.start(range(3))
    c.heartbeat(0, 1000)
    c.signal(0, 1100, "disconnected")
    assert c.confirm(0)  # its listeners refused the controller's probe
    c.tick(1150)
    assert c.fenced(0) and c.leads(0) == 0


def test_a_probe_result_without_a_standing_sign_confirms_nothing() -> None:
    c = Cluster()
    c.start(range(3))
    assert not c.confirm(1)  # never suspected
    c.signal(1, 100)
    c.heartbeat(1, 200)  # alive after all: the sign is cleared...
    assert not c.confirm(1)  # ...and a late probe answer does not bring it back
    c.signal(2, 100)
    assert not c.confirm(2, epoch=c.epochs[2] + 1)  # another incarnation's probe
    c.tick(300)
    assert not any(c.fenced(b) for b in range(3))


def test_silence_alone_keeps_the_session_timeout() -> None:
    c = Cluster()
    c.start(range(3))
    c.tick(SESSION_MS - 1)
    assert not any(c.fenced(b) for b in range(3))
    c.tick(SESSION_MS)
    assert all(c.fenced(b) for b in range(3))


def test_signs_that_do_not_count() -> None:
    c = Cluster()
    c.start(range(3))
    epoch0 = c.epochs[0]
    # Another incarnation's connections closing: the registered one is not suspected.
    assert c.signal(0, 10, epoch=epoch0 + 1).error_code == Errors.STALE_BROKER_EPOCH
    # Unknown broker.
    unknown = c.run(BrokerUnreachableRequest(7, -1, 1, "refused"), 10)
    assert unknown.error_code == Errors.BROKER_ID_NOT_REGISTERED
    # A broker in controlled shutdown leaves on its own path.
    c.heartbeat(1, 20, want_shutdown=True)
    assert c.sm.image.brokers[1].in_controlled_shutdown
    c.signal(1, 30)
    # A broker reporting itself.
    c.run(BrokerUnreachableRequest(2, c.epochs[2], 2, "refused"), 30)
    c.tick(GRACE_MS + 100)
    assert not any(c.fenced(b) for b in range(3))
    assert not any(c.controller.cluster.is_suspected(b) for b in range(3))


def test_a_new_active_controller_forgets_signs() -> None:
    c = Cluster()
    c.start(range(3))
    c.signal(0, 100)
    c.controller.activate(c.sm.image, 200)  # failover: the new active controller
    c.tick(200 + GRACE_MS)
    assert not c.fenced(0)


def test_grace_zero_turns_fast_fencing_off() -> None:
    c = Cluster(grace_ms=0)
    c.start(range(3))
    c.signal(0, 100)
    c.tick(SESSION_MS - 1)
    assert not c.fenced(0)


# -- any interleaving ------------------------------------------------------------------------

# One broker's life as seen by the controller: heartbeats (whose gaps are the broker's
# pace), signs (true or spurious), and ticks, each at some ms after the previous event.
EVENTS = st.lists(
    st.tuples(st.sampled_from(["heartbeat", "signal", "confirm", "tick"]), st.integers(0, 4000)),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(events=EVENTS)
def test_fenced_exactly_when_the_rule_says(events: list[tuple[str, int]]) -> None:
    """Model: fenced at a tick at `now` iff `now - last heartbeat` reached the session
    timeout, or reached the grace with a sign since the last heartbeat, or a probe confirmed
    a sign since the last heartbeat."""
    c = Cluster()
    c.start(range(3))
    now, last_hb, suspected, confirmed = 0, 0, False, False
    for kind, gap in events:
        now += gap
        # The other brokers stay alive: only broker 0's fate is under test.
        for b in (1, 2):
            c.heartbeat(b, now)
        if c.fenced(0):
            break
        if kind == "heartbeat":
            c.heartbeat(0, now)
            last_hb, suspected, confirmed = now, False, False
        elif kind == "signal":
            c.signal(0, now)
            suspected = True
        elif kind == "confirm":
            assert c.confirm(0) == suspected
            confirmed = suspected
        else:
            c.tick(now)
            silent = now - last_hb
            expect = silent >= SESSION_MS or (suspected and silent >= GRACE_MS) or confirmed
            assert c.fenced(0) == expect, (now, last_hb, suspected)
            if expect:
                assert c.leads(0) == 0


@settings(max_examples=200, deadline=None)
@given(
    gaps=st.lists(st.integers(1, GRACE_MS - 1), min_size=1, max_size=30),
    signs=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_a_live_broker_is_never_fenced_whatever_the_signs(
    gaps: list[int], signs: list[bool]
) -> None:
    """A broker heartbeating within the grace survives any spurious sign."""
    c = Cluster()
    c.start(range(3))
    now = 0
    for gap, sign in zip(gaps, signs, strict=False):
        if sign:
            c.signal(0, now + gap // 2, "disconnected")
        c.tick(now + gap - 1)
        now += gap
        c.heartbeat(0, now)
        for b in (1, 2):
            c.heartbeat(b, now)
        assert not c.fenced(0)
