"""Elections an operator asks for (ElectLeaders) and automatic preferred leader
rebalancing, on the sans-I/O controller: Kafka's per-partition answers, and the balance
check driven by simulated time only."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from common.errors import Errors
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig
from kraft.election import PREFERRED, UNCLEAN, PartitionChange, PartitionView, elect_on_request
from kraft.leader_balance import LeaderBalanceConfig, LeaderBalancer, imbalance_ratios
from metadata_log.controller_api import ElectLeadersRequest, TopicPartition
from metadata_log.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from metadata_log.records import NO_LEADER, PartitionChangeRecord

BROKERS = (1, 2, 3, 4)


@st.composite
def partitions(draw: st.DrawFn) -> PartitionView:
    replicas = tuple(draw(st.permutations(BROKERS))[: draw(st.integers(1, 4))])
    isr = tuple(r for r in replicas if draw(st.booleans())) or replicas[:1]
    leader = draw(st.sampled_from((NO_LEADER, *isr)))
    return PartitionView(replicas, isr, leader, draw(st.integers(0, 9)), draw(st.integers(0, 9)))


@settings(max_examples=300)
@given(partitions(), st.sets(st.sampled_from(BROKERS)), st.sampled_from((PREFERRED, UNCLEAN)))
def test_an_election_follows_kafkas_rules(
    p: PartitionView, usable: set[int], election_type: int
) -> None:
    out = elect_on_request(p, election_type, usable)
    if election_type == PREFERRED:
        preferred = p.replicas[0]
        if p.leader == preferred:
            assert out == Errors.ELECTION_NOT_NEEDED
        elif preferred in p.isr and preferred in usable:
            assert out == PartitionChange(
                p.isr, preferred, p.leader_epoch + 1, p.partition_epoch + 1
            )
        else:
            assert out == Errors.PREFERRED_LEADER_NOT_AVAILABLE
        return
    if p.leader != NO_LEADER:
        assert out == Errors.ELECTION_NOT_NEEDED
    elif not usable & set(p.replicas):
        assert out == Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    else:
        assert isinstance(out, PartitionChange)
        assert out.leader in usable and out.leader in out.isr
        assert out.leader_epoch == p.leader_epoch + 1
        clean = [r for r in p.replicas if r in p.isr and r in usable]
        # A usable ISR member wins over an unclean pick (Kafka tries a clean election first).
        assert out.leader == (clean[0] if clean else next(r for r in p.replicas if r in usable))
        if not clean:
            assert out.isr == (out.leader,)


def broker(b: int, fenced: bool = False) -> BrokerRegistration:
    return BrokerRegistration(b, f"inc-{b}", 10 + b, (), None, fenced)


def image_of(
    parts: dict[int, tuple[tuple[int, ...], tuple[int, ...], int]], fenced: tuple[int, ...] = ()
) -> MetadataImage:
    regs = {p: PartitionRegistration(r, isr, lead, 3, 5) for p, (r, isr, lead) in parts.items()}
    return MetadataImage(
        offset=100,
        brokers={b: broker(b, b in fenced) for b in BROKERS},
        topics={"tid": TopicImage("t", "tid", regs)},
        topic_ids={"t": "tid"},
    )


def controller() -> QuorumController:
    ids = itertools.count()
    return QuorumController(ControllerConfig(), new_topic_id=lambda: f"id-{next(ids)}")


def test_elect_leaders_answers_per_partition_and_omits_unneeded_ones_for_all() -> None:
    image = image_of(
        {
            0: ((1, 2), (1, 2), 2),  # preferred 1 in ISR: elected
            1: ((1, 2), (1, 2), 1),  # already preferred
            2: ((3, 2), (2,), 2),  # preferred out of the ISR
        }
    )
    asked = [TopicPartition("t", p) for p in (0, 1, 2, 7)] + [TopicPartition("nope", 0)]
    decision = controller().decide(image, ElectLeadersRequest(0, asked), 0)
    codes = {(r.topic, r.partition): r.error_code for r in decision.response.results}
    assert codes == {
        ("t", 0): Errors.NONE,
        ("t", 1): Errors.ELECTION_NOT_NEEDED,
        ("t", 2): Errors.PREFERRED_LEADER_NOT_AVAILABLE,
        ("t", 7): Errors.UNKNOWN_TOPIC_OR_PARTITION,
        ("nope", 0): Errors.UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert decision.records == (PartitionChangeRecord("tid", 0, (1, 2), 1, 4, 6),)
    every = controller().decide(image, ElectLeadersRequest(0, None), 0).response.results
    assert {(r.partition, r.error_code) for r in every} == {
        (0, Errors.NONE),
        (2, Errors.PREFERRED_LEADER_NOT_AVAILABLE),
    }


def test_unclean_election_picks_a_live_replica_only_for_a_leaderless_partition() -> None:
    image = image_of({0: ((1, 2, 3), (1,), NO_LEADER), 1: ((1, 2), (1, 2), 2)}, fenced=(1,))
    decision = controller().decide(image, ElectLeadersRequest(1, None), 0)
    assert [(r.partition, r.error_code) for r in decision.response.results] == [(0, Errors.NONE)]
    assert decision.records == (PartitionChangeRecord("tid", 0, (2,), 2, 4, 6),)


# -- automatic preferred leader rebalancing ---------------------------------------------------

INTERVAL = 300_000


def test_the_imbalance_ratio_is_per_preferred_broker() -> None:
    image = image_of({0: ((1, 2), (1, 2), 2), 1: ((1, 2), (1, 2), 1), 2: ((2, 1), (2, 1), 2)})
    ratios = imbalance_ratios(image)
    assert ratios[1] == (0.5, [("tid", 0)])
    assert ratios[2] == (0.0, [])


@settings(max_examples=100)
@given(
    st.lists(st.integers(0, 2 * INTERVAL), min_size=1, max_size=20).map(sorted),
    st.integers(0, 100),
)
def test_the_balancer_elects_only_at_check_times_and_over_the_percentage(
    ticks: list[int], percentage: int
) -> None:
    # Broker 1 is preferred for 4 partitions and leads 1: a 75 % imbalance.
    parts = {p: ((1, 2), (1, 2), 1 if p == 0 else 2) for p in range(4)}
    image = image_of(parts)
    balancer = LeaderBalancer(LeaderBalanceConfig(True, percentage, INTERVAL))
    balancer.activate(0)
    next_check = INTERVAL
    for now in ticks:
        records = balancer.tick(image, now)
        if now < next_check:
            assert records == []
            continue
        next_check = now + INTERVAL
        if percentage >= 75:
            assert records == []
        else:
            assert [(r.partition, r.leader, r.leader_epoch) for r in records] == [
                (1, 1, 4),
                (2, 1, 4),
                (3, 1, 4),
            ]


def test_the_balancer_skips_fenced_or_out_of_sync_preferred_replicas_and_can_be_off() -> None:
    parts = {0: ((1, 2), (2,), 2), 1: ((3, 2), (3, 2), 2), 2: ((4, 2), (4, 2), 2)}
    image = image_of(parts, fenced=(4,))
    balancer = LeaderBalancer(LeaderBalanceConfig(True, 10, INTERVAL))
    # 1 is out of the ISR of partition 0; 4 is fenced: only 3 takes its partition back.
    assert [(r.partition, r.leader) for r in balancer.elections(image)] == [(1, 3)]
    off = LeaderBalancer(LeaderBalanceConfig(False, 10, INTERVAL))
    assert off.tick(image, 10 * INTERVAL) == []


def test_the_controller_tick_balances_once_the_interval_has_passed() -> None:
    c = QuorumController(
        ControllerConfig(leader_imbalance_check_interval_ms=1000), new_topic_id=lambda: "x"
    )
    image = image_of({0: ((1, 2), (1, 2), 2)})
    c.activate(image, 0)  # fresh broker sessions; the first check one interval later
    assert c.tick(image, 999) == []
    assert c.tick(image, 1000) == [PartitionChangeRecord("tid", 0, (1, 2), 1, 4, 6)]
