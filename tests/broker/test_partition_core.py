"""The sans-I/O partition core: HW, pending acks=all, ISR shrink and expansion."""

from __future__ import annotations

from broker.partition import AlterIsr, Partition
from common.errors import Errors

TOPIC, TID = "t", "00000000-0000-0000-0000-000000000001"
REQUEST_TIMED_OUT = 7
LAG = 30_000


def leader(replicas=(1, 2, 3), isr=(1, 2, 3), epoch=0, pepoch=0, leo=0, now=0) -> Partition[str]:
    p: Partition[str] = Partition(TOPIC, 0, TID, 1)
    p.make_leader(replicas, isr, epoch, pepoch, leo, now)
    return p


def test_hw_is_min_leo_over_isr_and_waits_for_unknown_followers() -> None:
    p = leader(epoch=5)
    assert p.add_pending(3, 1, "a") is None
    assert p.on_leader_append(10) == []  # followers have not fetched in epoch 5
    assert p.on_follower_fetch(2, 10, 10, 1) == []
    assert p.high_watermark == 0
    assert p.on_follower_fetch(3, 4, 10, 1) == [("a", 0)]
    assert p.high_watermark == 4
    assert p.on_follower_fetch(3, 10, 10, 2) == []
    assert p.high_watermark == 10


def test_hw_never_moves_back_on_a_leader_and_a_new_epoch_resets_follower_leos() -> None:
    p = leader((1, 2), (1, 2), 1)
    p.on_leader_append(8)
    p.on_follower_fetch(2, 8, 8, 0)
    assert p.high_watermark == 8
    p.on_follower_fetch(2, 3, 8, 1)  # a stale fetch
    assert p.high_watermark == 8
    new_epoch, _ = p.make_leader((1, 2), (1, 2), 2, 1, 8, 5)
    assert new_epoch and p._remote[2].leo == -1  # unknown until it fetches in epoch 2
    same, _ = p.make_leader((1, 2), (1, 2), 2, 2, 8, 6)  # ISR-only change: states kept
    assert not same


def test_an_isr_of_one_commits_at_append_and_followers_outside_the_isr_do_not_count() -> None:
    p = leader((1, 2), (1,))
    assert p.add_pending(2, 1, "x") is None
    assert p.on_leader_append(2) == [("x", 0)]
    assert p.high_watermark == 2


def test_min_isr_is_checked_when_the_hw_passes_and_on_timeout() -> None:
    p = leader((1, 2), (1,))
    assert p.add_pending(2, 2, "x") is None
    assert p.on_leader_append(2) == [("x", Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND)]
    assert p.add_pending(1, 2, "y") == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND  # HW already there
    assert p.timeout_code(2, REQUEST_TIMED_OUT) == Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    assert p.timeout_code(1, REQUEST_TIMED_OUT) == REQUEST_TIMED_OUT


def test_losing_leadership_returns_pending_produces_and_clamps_hw() -> None:
    p = leader((1, 2), (1, 2))
    p.add_pending(1, 1, "a")
    p.add_pending(2, 1, "b")
    assert p.make_follower((1, 2), (2,), 2, 1, 1, local_leo=5) == ["a", "b"]
    p.on_follower_progress(leader_hw=9, local_leo=5)
    assert p.high_watermark == 5
    p.on_truncate(3)
    assert p.high_watermark == 3


# -- shrink -------------------------------------------------------------------------------------


def test_a_follower_that_stops_fetching_is_proposed_out_after_the_lag_window() -> None:
    p = leader(now=1000)
    p.on_leader_append(5)
    p.on_follower_fetch(2, 5, 5, 20_000)
    p.on_follower_fetch(3, 0, 5, 20_000)
    assert p.maybe_shrink_isr(5, 31_000, LAG) is None  # 3 still has its window from 1000
    alter = p.maybe_shrink_isr(5, 31_001, LAG)
    assert alter == AlterIsr((1, 2), 0, 0)
    assert p.pending_isr is alter
    assert p.maybe_shrink_isr(5, 99_000, LAG) is None  # one change in flight at a time
    assert p.isr == (1, 2, 3) and p.maximal_isr == (1, 2, 3)  # HW still waits for 3


def test_a_follower_keeping_up_with_a_moving_leo_is_not_lagging() -> None:
    """Kafka's lastFetchLeaderLogEndOffset rule: never exactly at the LEO, yet in sync."""
    p = leader(isr=(1, 2, 3), now=0)
    leo = 0
    for t in range(0, 100_000, 500):
        old = leo
        leo += 3  # a produce lands between fetches
        p.on_leader_append(leo)
        p.on_follower_fetch(2, old, leo, t)
        p.on_follower_fetch(3, old, leo, t)
    assert p.maybe_shrink_isr(leo, 100_000, LAG) is None


def test_a_follower_at_the_leo_of_an_idle_partition_is_in_sync() -> None:
    p = leader(leo=7, now=0)
    p.on_follower_fetch(2, 7, 7, 0)
    p.on_follower_fetch(3, 7, 7, 0)
    assert p.maybe_shrink_isr(7, 10 * LAG, LAG) is None


def test_a_committed_shrink_lets_the_hw_move_and_completes_acks() -> None:
    p = leader(leo=0, now=0)
    p.on_leader_append(4)
    p.on_follower_fetch(2, 4, 4, 10)
    assert p.add_pending(4, 2, "a") is None
    alter = p.maybe_shrink_isr(4, LAG + 1, LAG)
    assert alter is not None and alter.new_isr == (1, 2)
    assert p.high_watermark == 0  # the pending shrink still counts 3
    done = p.on_alter_isr_answer(alter, 0, (1, 2), 0, 1, 4)
    assert done == [("a", 0)] and p.isr == (1, 2) and p.partition_epoch == 1
    assert p.high_watermark == 4


def test_an_answer_saying_not_applied_drops_the_proposal() -> None:
    p = leader(now=0)
    alter = p.maybe_shrink_isr(0, LAG + 1, LAG)
    assert alter is not None
    p.on_alter_isr_answer(alter, 107, (), -1, -1, 0)  # INELIGIBLE_REPLICA
    assert p.pending_isr is None and p.isr == (1, 2, 3)
    assert p.maybe_shrink_isr(0, LAG + 2, LAG) is not None


def test_a_stale_state_answer_keeps_the_proposal_until_the_metadata_log_ends_it() -> None:
    p = leader(now=0)
    alter = p.maybe_shrink_isr(0, LAG + 1, LAG)
    assert alter is not None
    p.on_alter_isr_answer(alter, 108, (), -1, -1, 0)  # INVALID_UPDATE_VERSION
    assert p.pending_isr is alter and p.alter_isr_to_resend() is None
    p.make_leader((1, 2, 3), (1, 2), 0, 1, 0, LAG + 3)  # the newer state arrives
    assert p.pending_isr is None and p.isr == (1, 2)
    p.on_alter_isr_answer(alter, 0, (1, 3), 0, 2, 0)  # a late answer: ignored
    assert p.isr == (1, 2) and p.partition_epoch == 1


def test_an_expansion_with_an_unknown_outcome_keeps_counting_in_the_hw() -> None:
    """The controller may have committed it: until we know, the HW waits for the new
    member (found by the replication model, an AlterPartition answer lost)."""
    p = leader(isr=(1,), leo=0)
    p.on_follower_fetch(2, 0, 0, 0)
    alter = p.maybe_expand_isr(2, registered_epoch=7)
    assert alter is not None
    p.on_alter_isr_answer(alter, 7, (), -1, -1, 0)  # REQUEST_TIMED_OUT
    assert p.maximal_isr == (1, 2)
    p.on_leader_append(3)
    assert p.high_watermark == 0  # broker 2 has not fetched past 0
    assert p.alter_isr_to_resend() is alter and p.alter_isr_to_resend() is None
    p.on_follower_fetch(2, 3, 3, 1)
    assert p.high_watermark == 3


def test_metadata_older_than_an_applied_answer_is_ignored() -> None:
    p = leader(now=0)
    alter = p.maybe_shrink_isr(0, LAG + 1, LAG)
    assert alter is not None
    p.on_alter_isr_answer(alter, 0, (1,), 0, 1, 0)
    p.make_leader((1, 2, 3), (1, 2, 3), 0, 0, 0, LAG + 2)  # a replay of the old state
    assert p.isr == (1,) and p.partition_epoch == 1


# -- expand -------------------------------------------------------------------------------------


def test_a_follower_joins_once_it_reaches_the_hw_and_the_epoch_start() -> None:
    p = leader(isr=(1, 2), leo=10, epoch=3)  # our epoch starts at 10
    p.on_follower_fetch(2, 10, 10, 0)
    p.on_leader_append(12)
    p.on_follower_fetch(2, 12, 12, 1)
    assert p.high_watermark == 12
    p.on_follower_fetch(3, 9, 12, 1)
    assert p.maybe_expand_isr(3, registered_epoch=7) is None  # below the HW
    p.on_follower_fetch(3, 12, 12, 2)
    assert p.maybe_expand_isr(3, registered_epoch=None) is None  # fenced or shutting down
    alter = p.maybe_expand_isr(3, registered_epoch=7)
    assert alter == AlterIsr((1, 2, 3), 3, 0)
    assert p.maximal_isr == (1, 2, 3)
    # While pending, the HW already waits for 3 (it is in the maximal ISR).
    p.on_leader_append(15)
    p.on_follower_fetch(2, 15, 15, 3)
    assert p.high_watermark == 12
    p.on_follower_fetch(3, 15, 15, 3)
    assert p.high_watermark == 15
    p.on_alter_isr_answer(alter, 0, (1, 2, 3), 3, 1, 15)
    assert p.isr == (1, 2, 3) and p.pending_isr is None


def test_a_new_leader_does_not_add_a_follower_short_of_its_epoch_start() -> None:
    p = leader(isr=(1,), leo=20, epoch=2)
    p.on_follower_fetch(2, 15, 20, 0)  # HW is 0 (never advanced); epoch start is 20
    assert p.maybe_expand_isr(2, registered_epoch=7) is None
    p.on_follower_fetch(2, 20, 20, 1)
    assert p.maybe_expand_isr(2, registered_epoch=7) == AlterIsr((1, 2), 2, 0)


def test_followers_propose_nothing() -> None:
    p: Partition[str] = Partition(TOPIC, 0, TID, 2)
    p.make_follower((1, 2), (1, 2), 1, 0, 0, 0)
    assert p.maybe_shrink_isr(0, 10 * LAG, LAG) is None
    assert p.maybe_expand_isr(3, registered_epoch=7) is None


def test_kip_903_a_dead_incarnation_neither_fetches_nor_joins() -> None:
    """A fetch names its broker epoch: one older than the last seen is refused, and a
    follower joins only if it fetched with the epoch the metadata image registers; the
    proposal carries those epochs for the controller to check again."""
    p = leader(isr=(1,), leo=4)
    p.on_follower_fetch(2, 4, 4, 0, broker_epoch=10)
    assert p.maybe_expand_isr(2, registered_epoch=12) is None  # it registered again since
    assert not p.is_stale_fetch(2, 12)
    p.on_follower_fetch(2, 0, 4, 1, broker_epoch=12)  # the new incarnation, empty
    assert p.is_stale_fetch(2, 10)  # the old one's fetches are refused from now on
    assert not p.is_stale_fetch(2, -1)  # a fetch without an epoch (Fetch < v15) is not
    p.on_follower_fetch(2, 4, 4, 2, broker_epoch=12)
    alter = p.maybe_expand_isr(2, registered_epoch=12)
    assert alter is not None and alter.broker_epochs == (-1, 12)


def test_kip_966_the_hw_stands_still_while_the_committed_isr_is_below_min_isr() -> None:
    p = leader(isr=(1, 2), leo=0)
    p.hw_min_isr = 2
    p.on_leader_append(4)
    p.on_follower_fetch(2, 4, 4, 1)
    assert p.high_watermark == 4
    p.on_leader_append(5)  # 2 stops fetching: it lags
    alter = p.maybe_shrink_isr(5, LAG + 2, LAG)
    assert alter is not None and alter.new_isr == (1,)
    p.on_alter_isr_answer(alter, 0, (1,), 0, 1, 5)
    assert p.isr == (1,)
    # Alone below min ISR: appends no longer commit (2, now an ELR member, has up to 4).
    assert p.add_pending(6, 1, "a") is None
    assert p.on_leader_append(6) == [] and p.high_watermark == 4
    # A pending expansion is not enough: the controller may refuse it.
    p.on_follower_fetch(3, 6, 6, LAG + 3)
    grow = p.maybe_expand_isr(3, registered_epoch=7)
    assert grow is not None and grow.new_isr == (1, 3)
    assert p.on_follower_fetch(3, 6, 6, LAG + 4) == [] and p.high_watermark == 4
    # Committed at min ISR: the HW moves again.
    assert p.on_alter_isr_answer(grow, 0, (1, 3), 0, 2, 6) == [("a", 0)]
    assert p.high_watermark == 6


def test_without_elr_an_isr_of_one_below_min_isr_still_moves_the_hw() -> None:
    p = leader(isr=(1,), leo=0)
    assert p.hw_min_isr == 0
    p.on_leader_append(3)
    assert p.high_watermark == 3
