"""Consumer groups with real clients against 3 controllers + 3 brokers (processes).

For each client (confluent-kafka, kafka-python, aiokafka): members of one group share
a 6-partition topic (3 members: 2 partitions each), commit after processing, one
member leaves and its partitions go to the others, more records arrive, everyone
stops, and a new member resumes from the committed offsets. Across all of it no record
is lost and none is consumed twice. Then the broker coordinating a group is SIGKILLed
while its members consume: the group moves to the new leader of its
__consumer_offsets partition, the committed offsets survive and consumption goes on.

Every wait is a condition under a deadline; failures carry the node logs.
"""

from __future__ import annotations

import itertools
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kio.index import load_request_schema

from broker.codec_schema import build
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.group_clients import Consumed, Member
from tests.harness.raw_protocol import RawClient, encode_request

PARTITIONS = 6
BROKER_PROPS = {
    "offsets.topic.num.partitions": "6",
    "group.initial.rebalance.delay.ms": "300",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
    # Small segments and a quick cleaner, so __consumer_offsets compacts within a test.
    "offsets.topic.segment.bytes": "4096",
    "log.cleaner.backoff.ms": "200",
}
_values = itertools.count()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    with ProcCluster(Path(tmp_path_factory.mktemp("groups")), broker_props=BROKER_PROPS) as c:
        c.start()
        yield c


def create_topic(c: ProcCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)


def produce(c: ProcCluster, topic: str, n: int) -> set[bytes]:
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    values = {f"v{next(_values)}".encode() for _ in range(n)}
    for i, v in enumerate(sorted(values)):
        p.produce(topic, key=str(i).encode(), value=v)
    assert p.flush(30) == 0, "records left unacknowledged"
    return values


def all_consumed(members: list[Member]) -> list[Consumed]:
    return [r for m in members for r in m.snapshot()[1]]


def wait_consumed(c: ProcCluster, members: list[Member], values: set[bytes], what: str) -> None:
    def probe() -> bool | None:
        for m in members:
            assert not [e for e in m.errors if not e.startswith("commit")], (m.name, m.errors)
        got = {v for _, _, v in all_consumed(members)}
        return values <= got or None

    def report() -> str:
        got = {v for _, _, v in all_consumed(members)}
        states = [(m.name, sorted(m.snapshot()[0]), len(m.snapshot()[1]), m.errors[-3:])
                  for m in members]  # fmt: skip
        return f"missing {len(values - got)} of {len(values)}; members {states}\n{c.logs()}"

    wait_for(probe, 60, what, report)


def wait_assignment(c: ProcCluster, members: list[Member], per_member: int) -> None:
    def probe() -> bool | None:
        owned = [m.snapshot()[0] for m in members]
        union = set().union(*owned)
        ok = all(len(o) == per_member for o in owned) and union == set(range(PARTITIONS))
        return ok or None

    wait_for(probe, 60, f"{len(members)} members owning {per_member} partitions each", c.logs)


def assert_once(members: list[Member]) -> None:
    counts = Counter((p, o) for p, o, _ in all_consumed(members))
    twice = [k for k, n in counts.items() if n > 1]
    assert not twice, f"consumed twice: {twice[:10]}"


@pytest.mark.parametrize("kind", ["ck", "kp", "aio"])
def test_group_shares_rebalances_on_leave_and_resumes_from_commits(
    cluster: ProcCluster, kind: str
) -> None:
    topic, group = f"share-{kind}", f"group-{kind}"
    create_topic(cluster, topic)
    sent = produce(cluster, topic, 300)
    members = [
        Member(kind, cluster.bootstrap, group, topic, f"{kind}-{i}").start() for i in range(3)
    ]
    everyone = list(members)
    try:
        wait_assignment(cluster, members, 2)
        wait_consumed(cluster, members, sent, "the first records")
        members.pop().stop()  # leaves the group: its two partitions move
        wait_assignment(cluster, members, 3)
        sent |= produce(cluster, topic, 200)
        wait_consumed(cluster, everyone, sent, "the records after the rebalance")
    finally:
        for m in members:
            m.stop()
    sent_later = produce(cluster, topic, 100)
    fresh = Member(kind, cluster.bootstrap, group, topic, f"{kind}-new").start()
    everyone.append(fresh)
    try:
        wait_assignment(cluster, [fresh], PARTITIONS)
        wait_consumed(cluster, [fresh], sent_later, "the records after the restart")
    finally:
        fresh.stop()
    assert {v for _, _, v in fresh.snapshot()[1]} == sent_later, "it did not resume at the commits"
    assert_once(everyone)
    assert {v for _, _, v in all_consumed(everyone)} == sent | sent_later


def committed(c: ProcCluster, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import ConsumerGroupTopicPartitions

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    req = [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(6)])]
    result = admin.list_consumer_group_offsets(req)[group].result(30)
    return {tp.partition: tp.offset for tp in result.topic_partitions}


def coordinator(c: ProcCluster, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(30)
    return int(desc.coordinator.id)


def test_group_survives_a_sigkill_of_its_coordinator(cluster: ProcCluster) -> None:
    topic, group = "coord-kill", "group-coord-kill"
    create_topic(cluster, topic)
    sent = produce(cluster, topic, 300)
    members = [
        Member("ck", cluster.bootstrap, group, topic, f"ck-kill-{i}").start() for i in range(3)
    ]
    try:
        wait_assignment(cluster, members, 2)
        wait_consumed(cluster, members, sent, "the records before the kill")

        def all_committed() -> dict[int, int] | None:
            offsets = committed(cluster, group, topic)
            return offsets if sum(offsets.values()) >= 300 else None

        before = wait_for(all_committed, 30, "every record's commit", cluster.logs)
        victim = coordinator(cluster, group)
        cluster.kill_broker(victim)
        sent |= produce(cluster, topic, 200)
        wait_consumed(cluster, members, sent, "the records after the coordinator died")
        moved = wait_for(
            lambda: n if (n := coordinator(cluster, group)) != victim else None,
            60,
            "a new coordinator",
            cluster.logs,
        )
        after = committed(cluster, group, topic)
        assert moved != victim
        assert all(after[p] >= before[p] for p in range(PARTITIONS)), (before, after)
    finally:
        for m in members:
            m.stop()
        if victim >= 0:
            offset = int((cluster.cluster_state() or {}).get("metadata_offset", -1))
            cluster.restart_broker(victim)
            cluster.wait_brokers_unfenced({victim}, offset, 60)


def raw_call(host: str, port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    client = RawClient(host, port)
    try:
        return client.call(api_key, version, build(load_request_schema(api_key, version), body))
    finally:
        client.close()


def test_stale_and_malformed_group_requests_get_kafkas_errors(cluster: ProcCluster) -> None:
    group = "raw-group"
    create_topic(cluster, "raw-topic")
    any_host, any_port = cluster.bootstrap.split(",")[0].rsplit(":", 1)

    def find() -> Any:
        r = raw_call(any_host, int(any_port), 10, 4, {"key_type": 0, "coordinator_keys": [group]})
        c = r.coordinators[0]
        return c if c.error_code == 0 else None

    coord = wait_for(find, 30, "the group's coordinator", cluster.logs)
    host, port = coord.host, coord.port

    def call(api_key: int, version: int, body: dict[str, Any]) -> Any:
        return raw_call(host, port, api_key, version, body)

    join = {"group_id": group, "session_timeout": 10_000, "rebalance_timeout": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00"}]}  # fmt: skip
    first = call(11, 5, join)
    assert first.error_code == 79 and first.member_id  # MEMBER_ID_REQUIRED (KIP-394)
    joined = call(11, 5, {**join, "member_id": first.member_id})
    assert joined.error_code == 0 and joined.leader == first.member_id
    me, gen = joined.member_id, joined.generation_id
    assert call(11, 5, {**join, "session_timeout": 10}).error_code == 26  # INVALID_SESSION_TIMEOUT
    hb = {"group_id": group, "generation_id": gen, "member_id": me, "group_instance_id": None}
    assert call(12, 4, {**hb, "member_id": "nobody"}).error_code == 25  # UNKNOWN_MEMBER_ID
    assert call(12, 4, {**hb, "generation_id": gen + 1}).error_code == 22  # ILLEGAL_GENERATION
    sync = {**hb, "protocol_type": "consumer", "protocol_name": "range",
            "assignments": [{"member_id": me, "assignment": b"mine"}]}  # fmt: skip
    assert call(14, 5, {**sync, "generation_id": gen - 1}).error_code == 22
    synced = call(14, 5, sync)
    assert synced.error_code == 0 and synced.assignment == b"mine"
    assert call(12, 4, hb).error_code == 0

    def commit(**over: Any) -> dict[tuple[str, int], int]:
        topics = [{"name": t, "partitions": [{"partition_index": 0, "committed_offset": 5,
                   "committed_leader_epoch": -1, "committed_metadata": ""}]}
                  for t in ("raw-topic", "no-such-topic")]  # fmt: skip
        body = {"group_id": group, "generation_id_or_member_epoch": gen, "member_id": me,
                "group_instance_id": None, "topics": topics, **over}  # fmt: skip
        r = call(8, 8, body)
        return {(t.name, p.partition_index): p.error_code for t in r.topics for p in t.partitions}

    assert commit(generation_id_or_member_epoch=gen + 1)[("raw-topic", 0)] == 22
    assert commit(member_id="nobody")[("raw-topic", 0)] == 25
    assert commit() == {("raw-topic", 0): 0, ("no-such-topic", 0): 3}
    fetched = call(9, 8, {"groups": [{"group_id": group, "topics": None}], "require_stable": False})
    [t] = fetched.groups[0].topics
    assert (t.name, t.partitions[0].committed_offset) == ("raw-topic", 5)
    # Another broker is not the coordinator.
    other = next(b for b in cluster.brokers if b.node_id != coord.node_id)
    assert raw_call("127.0.0.1", other.port, 12, 4, hb).error_code == 16  # NOT_COORDINATOR
    # A truncated frame closes that connection; the coordinator goes on serving.
    bad = RawClient(host, port)
    frame = encode_request(11, 5, build(load_request_schema(11, 5), join))
    bad.send(struct.pack(">i", 12) + frame[4:16])
    assert bad.is_closed_by_peer()
    bad.close()
    assert call(12, 4, hb).error_code == 0
    # Nobody but the coordinator writes __consumer_offsets.
    produced = call(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                           "topic_data": [{"name": "__consumer_offsets", "partition_data": [
                               {"index": 0, "records": None}]}]})  # fmt: skip
    assert produced.responses[0].partition_responses[0].error_code in (17, 87)
    left = call(13, 5, {"group_id": group, "members": [{"member_id": me, "group_instance_id": None,
                                                        "reason": None}]})  # fmt: skip
    assert left.error_code == 0 and left.members[0].error_code == 0
    assert call(12, 4, hb).error_code == 25


def offsets_records(c: ProcCluster, partition: int) -> int:
    """How many records partition `partition` of __consumer_offsets holds now."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "unused",
                         "enable.auto.commit": False})  # fmt: skip
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition("__consumer_offsets", partition), timeout=10
        )
        consumer.assign([TopicPartition("__consumer_offsets", partition, low)])
        n, last = 0, low - 1
        while last < high - 1:
            msg = consumer.poll(5)
            assert msg is not None, f"no record after offset {last} (high watermark {high})"
            if msg.error() is None:
                n, last = n + 1, msg.offset()
        return n
    finally:
        consumer.close()


def test_consumer_offsets_is_compacted_and_reloads_the_latest_commits(
    cluster: ProcCluster,
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions

    from broker.group.config import partition_for

    topic, group = "compacted-commits", "group-compacted"
    create_topic(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    commits = 300
    for i in range(commits):  # commits from outside group management, same keys
        tps = [TopicPartition(topic, p, i + 1) for p in range(2)]
        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, tps)])[
            group
        ].result(30)
    p = partition_for(group, PARTITIONS)

    def compacted() -> int | None:
        n = offsets_records(cluster, p)
        return n if n < commits else None

    wait_for(compacted, 60, "the cleaner to compact __consumer_offsets", cluster.logs)
    victim = coordinator(cluster, group)
    offset = int((cluster.cluster_state() or {}).get("metadata_offset", -1))
    cluster.kill_broker(victim)  # the next coordinator loads the compacted log
    try:
        moved = wait_for(
            lambda: n if (n := coordinator(cluster, group)) != victim else None,
            60,
            "a new coordinator",
            cluster.logs,
        )
        assert moved != victim
        got = committed(cluster, group, topic)
        assert got[0] == got[1] == commits, got
    finally:
        cluster.restart_broker(victim)
        cluster.wait_brokers_unfenced({victim}, offset, 60)
