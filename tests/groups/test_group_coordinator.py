"""The group coordinator core, request by request (Kafka's classic group protocol)."""

from __future__ import annotations

from broker.group import messages as m
from broker.group.config import partition_for
from broker.group.group import GroupState
from broker.group.records import (
    GroupKey,
    OffsetKey,
    OffsetValue,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_offset_value,
)
from common.errors import Errors
from tests.harness.group_harness import Harness

G = "g"


def result(h: Harness, token: str) -> m.JoinResult:
    r = h.answers[token]
    assert isinstance(r, m.JoinResult), r
    return r


def stable_group(h: Harness, n: int) -> list[tuple[str, int]]:
    """n members joined and synced; returns (member id, generation) for each."""
    tokens = [h.join_until_member(G) for _ in range(n)]
    for _ in range(10):  # the initial delay (when set) ends the join phase
        if all(t in h.answers for t, _ in tokens):
            break
        h.tick(h.core.config.initial_rebalance_delay_ms)
    joined = [result(h, t) for t, _ in tokens]
    assert all(j.error_code == Errors.NONE for j in joined), joined
    gen = joined[0].generation_id
    leader = joined[0].leader
    ids = [j.member_id for j in joined]
    for mid in ids:
        if mid != leader:
            h.sync(G, mid, gen)
    h.sync(G, leader, gen, [(x, x.encode()) for x in ids])
    assert h.core.groups[G].state == GroupState.STABLE
    return [(x, gen) for x in ids]


def test_partition_for_matches_kafka() -> None:
    # Utils.abs("my-group".hashCode) % 50 on the JVM: "my-group".hashCode = 1186487620... the
    # values below were computed with Java's String.hashCode rule.
    assert partition_for("", 50) == 0
    assert partition_for("a", 50) == 97 % 50
    assert partition_for("ab", 50) == (97 * 31 + 98) % 50
    # a hash that overflows to a negative int32: abs() of it
    h = 0
    for c in "consumer-group-with-a-long-name":
        h = (31 * h + ord(c)) & 0xFFFFFFFF
    signed = h - (1 << 32) if h >= 1 << 31 else h
    assert partition_for("consumer-group-with-a-long-name", 50) == abs(signed) % 50


def test_kip_394_join_then_sync_gives_each_member_its_assignment() -> None:
    h = Harness()
    t1 = h.join(G)
    first = result(h, t1)
    assert first.error_code == Errors.MEMBER_ID_REQUIRED and first.member_id
    t2 = h.join(G, member_id=first.member_id)
    j = result(h, t2)  # alone, no initial delay: the join completes at once
    assert j.error_code == Errors.NONE and j.generation_id == 1 and j.leader == first.member_id
    assert [x[0] for x in j.members] == [first.member_id]
    s = h.sync(G, j.member_id, 1, [(j.member_id, b"A")])
    assert h.answers[s] == m.SyncResult(Errors.NONE, "consumer", "range", b"A")
    assert h.heartbeat(G, j.member_id, 1) == Errors.NONE


def test_a_second_member_triggers_a_rebalance_and_both_get_a_new_generation() -> None:
    h = Harness()
    [(a, gen)] = stable_group(h, 1)
    tb, b = h.join_until_member(G)
    assert tb not in h.answers  # waits for a to rejoin
    assert h.heartbeat(G, a, gen) == Errors.REBALANCE_IN_PROGRESS
    ta = h.join(G, member_id=a)
    ja, jb = result(h, ta), result(h, tb)
    assert ja.generation_id == jb.generation_id == gen + 1
    assert ja.leader == a and len(ja.members) == 2 and jb.members == ()
    sb = h.sync(G, b, gen + 1)
    assert sb not in h.answers  # waits for the leader's assignment
    h.sync(G, a, gen + 1, [(a, b"0,1"), (b, b"2,3")])
    assert h.answers[sb] == m.SyncResult(Errors.NONE, "consumer", "range", b"2,3")


def test_stale_and_unknown_requests_get_kafkas_error_codes() -> None:
    h = Harness()
    [(a, gen)] = stable_group(h, 1)
    assert h.heartbeat(G, "nobody", gen) == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat(G, a, gen + 5) == Errors.ILLEGAL_GENERATION
    assert h.heartbeat("other", a, gen) == Errors.UNKNOWN_MEMBER_ID
    assert h.heartbeat("", a, gen) == Errors.INVALID_GROUP_ID
    s = h.sync(G, a, gen - 1)
    assert h.answers[s] == m.SyncResult(Errors.ILLEGAL_GENERATION)
    s = h.sync(G, "nobody", gen)
    assert h.answers[s] == m.SyncResult(Errors.UNKNOWN_MEMBER_ID)
    assert result(h, h.join(G, member_id="nobody")).error_code == Errors.UNKNOWN_MEMBER_ID
    assert result(h, h.join("new", member_id="x")).error_code == Errors.UNKNOWN_MEMBER_ID
    assert result(h, h.join(G, session_ms=10)).error_code == Errors.INVALID_SESSION_TIMEOUT
    bad = h.join(G, protocols=[("roundrobin", b"")])
    assert result(h, bad).error_code == Errors.INCONSISTENT_GROUP_PROTOCOL
    c = h.commit(G, a, gen + 1, {("t", 0): 5})
    assert h.answers[c] == m.PartitionResults(Errors.NONE, {("t", 0): Errors.ILLEGAL_GENERATION})
    c = h.commit(G, "nobody", gen, {("t", 0): 5})
    assert h.answers[c] == m.PartitionResults(Errors.NONE, {("t", 0): Errors.UNKNOWN_MEMBER_ID})
    c = h.commit(G, "", -1, {("t", 0): 5})  # outside group management, group not empty
    assert h.answers[c] == m.PartitionResults(Errors.NONE, {("t", 0): Errors.UNKNOWN_MEMBER_ID})
    r = h.leave(G, ("nobody", None))
    assert r.members == (("nobody", None, Errors.UNKNOWN_MEMBER_ID),)


def test_requests_for_groups_we_do_not_coordinate() -> None:
    h = Harness()
    p = partition_for(G, 4)
    h.run(h.core.unload(p))
    assert h.heartbeat(G, "a", 1) == Errors.NOT_COORDINATOR
    h.run(h.core.begin_load(p))
    assert h.heartbeat(G, "a", 1) == Errors.COORDINATOR_LOAD_IN_PROGRESS
    assert result(h, h.join(G)).error_code == Errors.COORDINATOR_LOAD_IN_PROGRESS


def test_a_leaving_member_hands_its_partitions_over_in_a_rebalance() -> None:
    h = Harness(initial_rebalance_delay_ms=3_000)
    (a, gen), (b, _) = stable_group(h, 2)
    r = h.leave(G, (b, None))
    assert r.members == ((b, None, Errors.NONE),)
    assert h.core.groups[G].state == GroupState.PREPARING_REBALANCE
    ja = result(h, h.join(G, member_id=a))
    assert ja.generation_id == gen + 1 and [x[0] for x in ja.members] == [a]


def test_a_member_that_stops_heartbeating_is_removed_after_its_session() -> None:
    h = Harness(initial_rebalance_delay_ms=3_000)
    (a, gen), (b, _) = stable_group(h, 2)
    for _ in range(4):
        h.tick(3_000)
        assert h.heartbeat(G, a, gen) in (Errors.NONE, Errors.REBALANCE_IN_PROGRESS)
    g = h.core.groups[G]
    assert b not in g.members and g.state == GroupState.PREPARING_REBALANCE
    assert h.heartbeat(G, b, gen) == Errors.UNKNOWN_MEMBER_ID


def test_the_last_member_leaving_empties_the_group_and_bumps_the_generation() -> None:
    h = Harness()
    [(a, gen)] = stable_group(h, 1)
    h.leave(G, (a, None))
    g = h.core.groups[G]
    assert g.state == GroupState.EMPTY and g.generation_id == gen + 1
    key, value = h.log[g.partition][-1]
    assert decode_key(key) == GroupKey(G)
    assert value is not None and decode_group_value(value).members == ()


def test_commits_are_answered_after_the_append_and_survive_a_coordinator_move() -> None:
    h = Harness()
    [(a, gen)] = stable_group(h, 1)
    h.hold = True
    c = h.commit(G, a, gen, {("t", 0): 10, ("t", 1): 20})
    assert c not in h.answers
    assert h.core.fetch_offsets(G, [("t", 0)])[1] == {("t", 0): None}  # not yet committed
    h.release()
    assert h.answers[c] == m.PartitionResults(Errors.NONE, {("t", 0): 0, ("t", 1): 0})
    h.hold = False
    h.commit(G, a, gen, {("t", 0): 11})
    p = partition_for(G, 4)
    assert h.move(p) == 0
    _, offsets = h.core.fetch_offsets(G, None)
    assert {tp: v.offset for tp, v in offsets.items() if v} == {("t", 0): 11, ("t", 1): 20}
    g = h.core.groups[G]
    assert g.state == GroupState.STABLE and g.generation_id == gen and a in g.members
    assert h.heartbeat(G, a, gen) == Errors.NONE


def test_a_failed_commit_is_not_applied_and_says_why() -> None:
    h = Harness()
    [(a, gen)] = stable_group(h, 1)
    h.fail_code = Errors.NOT_LEADER_OR_FOLLOWER
    c = h.commit(G, a, gen, {("t", 0): 10})
    assert h.answers[c] == m.PartitionResults(Errors.NONE, {("t", 0): Errors.NOT_COORDINATOR})
    assert h.core.fetch_offsets(G, [("t", 0)])[1] == {("t", 0): None}


def test_a_failed_group_store_sends_everyone_back_to_rebalance() -> None:
    h = Harness()
    ta, a = h.join_until_member(G)
    gen = result(h, ta).generation_id
    h.fail_code = Errors.REQUEST_TIMED_OUT
    s = h.sync(G, a, gen, [(a, b"x")])
    assert h.answers[s] == m.SyncResult(Errors.COORDINATOR_NOT_AVAILABLE)
    assert h.core.groups[G].state == GroupState.PREPARING_REBALANCE


def test_static_member_restart_keeps_the_generation_and_fences_the_old_id() -> None:
    h = Harness()
    ta, a = h.join_until_member(G, instance="i1")
    assert result(h, ta).error_code == Errors.NONE  # static members skip MEMBER_ID_REQUIRED
    tb = h.join(G, instance="i2")  # waits for i1 to rejoin
    ja, jb = result(h, h.join(G, member_id=a, instance="i1")), result(h, tb)
    gen, b = jb.generation_id, jb.member_id
    assert ja.generation_id == gen
    h.sync(G, b, gen, instance="i2")
    h.sync(G, a, gen, [(a, b"A"), (b, b"B")], instance="i1")
    # i2 restarts: a new member id, same generation, no rebalance
    j = result(h, h.join(G, instance="i2"))
    assert j.error_code == Errors.NONE and j.generation_id == gen and j.member_id != b
    assert h.core.groups[G].state == GroupState.STABLE
    s = h.sync(G, j.member_id, gen, instance="i2")
    assert h.answers[s] == m.SyncResult(Errors.NONE, "consumer", "range", b"B")
    assert h.heartbeat(G, b, gen, instance="i2") == Errors.FENCED_INSTANCE_ID


def test_offsets_of_an_empty_group_expire_after_retention_and_the_group_goes() -> None:
    h = Harness(offsets_retention_ms=60_000, retention_check_interval_ms=1_000)
    [(a, gen)] = stable_group(h, 1)
    h.commit(G, a, gen, {("t", 0): 5})
    h.leave(G, (a, None))
    h.tick(1_000)  # starts the retention timer
    h.tick(30_000)
    assert h.core.fetch_offsets(G, [("t", 0)])[1][("t", 0)] is not None
    h.tick(31_000)
    assert G not in h.core.groups
    p = partition_for(G, 4)
    assert h.move(p) == 0 and G not in h.core.groups  # the tombstones were written


def test_delete_groups_and_offset_delete() -> None:
    h = Harness()
    [(a, gen)] = stable_group(h, 1)
    h.commit(G, a, gen, {("t", 0): 5, ("u", 0): 7})
    t = h.token("del")
    h.run(h.core.delete_group(t, G))
    assert h.answers[t] == Errors.NON_EMPTY_GROUP
    t = h.token("odel")
    h.run(h.core.delete_offsets(t, G, [("t", 0), ("u", 0)]))
    assert h.answers[t] == m.PartitionResults(
        Errors.NONE, {("t", 0): Errors.GROUP_SUBSCRIBED_TO_TOPIC, ("u", 0): Errors.NONE}
    )
    h.leave(G, (a, None))
    t = h.token("del")
    h.run(h.core.delete_group(t, G))
    assert h.answers[t] == Errors.NONE and G not in h.core.groups
    t = h.token("del")
    h.run(h.core.delete_group(t, G))
    assert h.answers[t] == Errors.GROUP_ID_NOT_FOUND
    assert h.move(partition_for(G, 4)) == 0 and G not in h.core.groups


def test_the_initial_delay_waits_for_more_members() -> None:
    h = Harness(initial_rebalance_delay_ms=3_000)
    ta, _ = h.join_until_member(G)
    tb, _ = h.join_until_member(G)
    assert ta not in h.answers and tb not in h.answers
    h.tick(2_000)
    tc, _ = h.join_until_member(G)
    h.tick(1_000)  # a member arrived during the delay: extended once more
    assert ta not in h.answers
    h.tick(3_000)
    gens = {result(h, t).generation_id for t in (ta, tb, tc)}
    assert gens == {1}


def test_records_are_kafkas_formats() -> None:
    key = encode_key(OffsetKey("grp", "topic", 3))
    assert key == b"\x00\x01\x00\x03grp\x00\x05topic\x00\x00\x00\x03"
    v = OffsetValue(42, 7, "meta", 1_700_000_000_000)
    raw = encode_offset_value(v)
    assert raw[:2] == b"\x00\x03" and decode_offset_value(raw) == v


def test_a_generation_is_stored_before_it_is_handed_out_and_reloads_as_a_rebalance() -> None:
    """The members hear of a generation only once its record is appended; a
    coordinator that loads it without the leader's assignment makes them join again,
    so a generation id is never handed out twice."""
    h = Harness()
    h.hold = True
    t, a = h.join_until_member(G)
    assert t not in h.answers  # the record of generation 1 is in flight
    h.release()
    assert result(h, t).generation_id == 1
    h.hold = False
    assert h.move(partition_for(G, 4)) == 0
    g = h.core.groups[G]
    assert g.state == GroupState.PREPARING_REBALANCE and g.generation_id == 1
    assert h.heartbeat(G, a, 1) == Errors.REBALANCE_IN_PROGRESS
    assert result(h, h.join(G, member_id=a)).generation_id == 2


def test_static_member_restart_with_new_subscription_bytes_keeps_the_group_stable() -> None:
    # librdkafka's subscription carries its generation and owned partitions, so a restarted
    # static member's metadata differs from the old one's: Kafka (KIP-345) rebalances only
    # when the group's selected protocol would change, and keeps the new metadata.
    h = Harness()
    _, a = h.join_until_member(G, instance="i1")
    tb = h.join(G, instance="i2")
    h.join(G, member_id=a, instance="i1")
    jb = result(h, tb)
    gen, b = jb.generation_id, jb.member_id
    h.sync(G, b, gen, instance="i2")
    h.sync(G, a, gen, [(a, b"A"), (b, b"B")], instance="i1")
    fresh = [("range", b"restarted, generation -1"), ("roundrobin", b"")]
    j = result(h, h.join(G, instance="i2", protocols=fresh))
    assert j.error_code == Errors.NONE and j.generation_id == gen and j.member_id != b
    group = h.core.groups[G]
    assert group.state == GroupState.STABLE
    assert group.members[j.member_id].protocols == fresh
    s = h.sync(G, j.member_id, gen, instance="i2")
    assert h.answers[s] == m.SyncResult(Errors.NONE, "consumer", "range", b"B")
    assert h.heartbeat(G, a, gen, instance="i1") == Errors.NONE  # the other is undisturbed


def test_static_leader_restart_keeps_the_group_stable_and_does_not_reassign() -> None:
    h = Harness()
    _, a = h.join_until_member(G, instance="i1")  # the first member leads
    tb = h.join(G, instance="i2")
    h.join(G, member_id=a, instance="i1")
    jb = result(h, tb)
    gen, b = jb.generation_id, jb.member_id
    assert jb.leader == a
    h.sync(G, b, gen, instance="i2")
    h.sync(G, a, gen, [(a, b"A"), (b, b"B")], instance="i1")
    # JoinGroup v9+: the new leader gets the members and is told to skip the assignment.
    j = result(h, h.join(G, instance="i1", v9=True))
    assert j.error_code == Errors.NONE and j.generation_id == gen
    assert j.leader == j.member_id and j.skip_assignment
    assert sorted(x[0] for x in j.members) == sorted([j.member_id, b])
    assert h.core.groups[G].state == GroupState.STABLE
    s = h.sync(G, j.member_id, gen, instance="i1")
    assert h.answers[s] == m.SyncResult(Errors.NONE, "consumer", "range", b"A")
    # Older versions: named a follower (the previous leader id), no members.
    prev = j.member_id
    k = result(h, h.join(G, instance="i1"))
    assert k.leader == prev and k.members == () and not k.skip_assignment
    assert h.core.groups[G].state == GroupState.STABLE
    assert h.heartbeat(G, b, gen, instance="i2") == Errors.NONE
