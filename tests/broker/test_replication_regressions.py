"""Every failure tests/broker/test_replication_model.py found, frozen as a plain test: each
replays the shrunk steps on the model and checks every invariant, then heals."""

from __future__ import annotations

from typing import Any

from tests.harness.replication_model import ReplicationModel


def replay(*steps: tuple[str, tuple[Any, ...]]) -> ReplicationModel:
    m = ReplicationModel()
    m.start()
    m.replication_invariants()
    for name, args in steps:
        getattr(m, name)(*args)
        m.replication_invariants()
    return m


def test_a_leader_that_never_appended_in_its_epoch_drops_it_when_it_follows() -> None:
    """Broker 2 led epoch 1 without appending, was killed, and came back as a follower
    naming epoch 1 as its last fetched epoch: the leader answered "diverging at (0, 1)",
    the truncation to 1 was a no-op at its LEO, and it kept the epoch 1 entry, so it
    diverged forever and never rejoined the ISR. Kafka's truncateTo drops such an epoch
    even when it truncates nothing; so does ours now."""
    m = replay(
        ("produce", (1, False, 0)),
        ("settle", ()),
        ("fault", (1, "sigkill")),
        ("tick", (500,)),
        ("tick", (500,)),
        ("fault", (2, "sigkill")),
    )
    try:
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()


def test_an_empty_follower_drops_the_epoch_it_led_without_appending() -> None:
    """The same with an empty log (make test-long found it): broker 3 led epoch 1 with
    nothing in its log, then followed broker 1, whose log had a record of epoch 0. Broker
    1 answered "diverging at (0, 1)"; the truncation to 0 was a no-op that kept epoch 1,
    because an empty log was exempt from dropping it, and broker 3 never caught up. The
    exemption is gone, as in Kafka."""
    m = replay(
        ("fault", (1, "pause")),
        ("fault", (2, "sigkill")),
        ("tick", (10_000,)),
        ("recover_all", ()),
        ("sync_metadata", (3,)),
        ("tick", (10_000,)),
        ("produce", (1, False, 0)),
    )
    try:
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()


def test_a_registering_broker_does_not_hand_its_isr_place_to_dead_brokers() -> None:
    """Broker 3 lost an acknowledged record in a machine crash; brokers 1 and 2 were then
    killed. When all three came back, broker 1's registration moved the leadership to
    brokers 2 and 3, whose sessions had expired but whom the controller had not fenced
    yet; broker 2's registration then left broker 3, the one without the record, as the
    only ISR member, and it led. Brokers with an expired session are unusable for
    elections now, fenced or not."""
    m = replay(
        ("produce", (1, False, -1)),
        ("settle", ()),
        ("fault", (3, "machine")),
        ("fault", (1, "sigkill")),
        ("fault", (2, "sigkill")),
    )
    assert m.acked
    try:
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()


def test_a_restarted_broker_is_not_the_isr_member_kept_when_all_are_gone() -> None:
    """Leader 1 lost an acknowledged record in a machine crash and restarted; a 10 s gap
    without heartbeats expired everyone's session. Its registration took the partition
    offline and kept broker 1 itself as the only ISR member, so it led again without
    the record. Now the ISR member kept is one that did not restart."""
    m = replay(
        ("produce", (1, False, -1)),
        ("settle", ()),
        ("fault", (1, "machine")),
        ("recover", (1,)),
        ("tick", (10_000,)),
        ("sync_metadata", (1,)),
    )
    assert m.acked
    try:
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()


def test_a_lost_answer_to_an_isr_expansion_keeps_the_hw_waiting_for_the_new_member() -> None:
    """The controller committed ISR (1, 2) but its answer was lost; the leader dropped
    the pending expansion, computed its HW over (1,) and committed a record broker 2,
    an ISR member, did not have. Now a lost answer keeps the change pending (and sent
    again) as in Kafka."""
    replay(
        ("tick", (10_000,)),
        ("tick", (100,)),
        ("deliver", (0,)),
        ("deliver", (0,)),
        ("replicate", (2,)),
        ("deliver", (0,)),
        ("drop", (0,)),
        ("produce", (1, False, 0)),
    ).teardown()


def test_a_fetch_sent_before_a_machine_crash_does_not_count_for_the_new_incarnation() -> None:
    """CI found broker 3, out of the ISR, send a fetch at offset 11, lose its whole log
    in a machine crash, and the leader then serve that fetch and add it to the ISR: an
    ISR member without the committed records. Before it registers again that is
    Kafka's window too (the model keeps it "not intact" until then). Here the stale
    fetch arrives after the new incarnation registered: KIP-903's broker epoch in the
    fetch keeps it out of the ISR."""
    m = replay(
        ("produce", (1, False, -1)),
        ("produce", (1, False, -1)),
        ("settle", ()),
        ("send_fetch", (3,)),  # at offset 2: it holds both records, unflushed
        ("fault", (3, "machine")),
        ("tick", (10_000,)),  # its session expires: fenced, out of the ISR
        ("recover", (3,)),  # the new incarnation registers with an empty log
        ("tick", (100,)),  # and is unfenced
        ("sync_metadata", (1,)),  # the leader learns the ISR is (1, 2)
        ("deliver", (0,)),  # the dead incarnation's fetch reaches the leader
    )
    assert 3 not in m.reg.isr
    m.deliver_all()
    m.replication_invariants()
    assert 3 not in m.reg.isr, m.reg
    m.teardown()


def test_a_machine_crashed_follower_stays_suspect_until_it_registers_again() -> None:
    """The CI failure itself: the fetch arrives before broker 3 restarts, so it rejoins
    the ISR (as in Kafka); brokers 1 and 2 still hold every committed record, and the
    model no longer counts broker 3 as intact until its new incarnation registers."""
    m = replay(
        ("produce_three", (1,)),
        ("settle", ()),
        ("send_fetch", (3,)),
        ("fault", (3, "machine")),
        ("deliver_all", ()),
        ("produce", (1, True, -1)),
        ("settle", ()),
    )
    try:
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()
