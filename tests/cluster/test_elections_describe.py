"""Elections and the describing APIs on real clusters (3 controllers, 3 brokers as
processes): ElectLeaders through confluent-kafka's AdminClient and `kraft
leader-election`; DescribeLogDirs through kafka-python and `kraft log-dirs`;
DescribeTopicPartitions as raw requests (no client pages with it); DescribeQuorum
through kafka-python and `kraft metadata-quorum`; and automatic preferred leader
rebalancing bringing leadership back after a broker restart. Every wait is a condition
under a deadline.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cli import kraft, ok
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, request

BROKER_PROPS = {"replica.lag.time.max.ms": "1500"}
TOPIC = "el"
# Broker 4 is the preferred replica of partitions 0 and 1.
ASSIGNMENT = [[4, 5, 6], [4, 6, 5], [5, 6, 4], [6, 4, 5]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    # No automatic rebalancing here: the elections below are the operator's.
    c = ProcCluster(
        Path(tmp_path_factory.mktemp("elect")),
        controller_props={"auto.leader.rebalance.enable": "false"},
        broker_props=BROKER_PROPS,
    )
    try:
        c.start()
        create_topic(c, TOPIC, ASSIGNMENT)
        yield c
    finally:
        c.close()


def admin(c: ProcCluster) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": c.bootstrap})


def create_topic(c: ProcCluster, topic: str, assignment: list[list[int]]) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(c)  # kept alive until the answer: a destroyed client fails its futures
    fs = client.create_topics(
        [NewTopic(topic, num_partitions=len(assignment), replica_assignment=assignment)]
    )
    fs[topic].result(30)
    wait_for(lambda: all_led(c, topic, len(assignment)), 30, f"{topic} has leaders", c.logs)


def all_led(c: ProcCluster, topic: str, n: int) -> bool:
    parts = c.partitions(topic)
    return parts is not None and len(parts) == n and all(p["leader"] >= 0 for p in parts.values())


def leaders(c: ProcCluster, topic: str) -> dict[int, int] | None:
    parts = c.partitions(topic)
    return None if parts is None else {i: p["leader"] for i, p in parts.items()}


def bounce(c: ProcCluster, broker: int, topic: str, preferred_for: list[int]) -> None:
    """Kill `broker`, wait for its leaderships to move, restart it, wait until it is back
    in the ISR of the partitions it is preferred for."""
    c.kill_broker(broker)

    def moved() -> bool:
        led = leaders(c, topic)
        return led is not None and all(led[p] not in (broker, -1) for p in preferred_for)

    wait_for(moved, 30, f"leadership off broker {broker}", c.logs)
    c.restart_broker(broker)

    def back() -> bool:
        parts = c.partitions(topic)
        return parts is not None and all(broker in parts[p]["isr"] for p in preferred_for)

    wait_for(back, 60, f"broker {broker} back in the ISR", c.logs)


# -- ElectLeaders ------------------------------------------------------------------------------


def test_preferred_election_by_admin_client_and_tool(cluster: ProcCluster) -> None:
    from confluent_kafka import ElectionType, KafkaError, TopicPartition

    bounce(cluster, 4, TOPIC, [0, 1])
    led = leaders(cluster, TOPIC)
    assert led is not None and led[0] != 4 and led[1] != 4  # nothing moved it back
    tp0 = TopicPartition(TOPIC, 0)
    client = admin(cluster)
    result = client.elect_leaders(ElectionType.PREFERRED, [tp0]).result(30)
    assert [(tp.topic, tp.partition, err) for tp, err in result.items()] == [(TOPIC, 0, None)]
    wait_for(lambda: (leaders(cluster, TOPIC) or {}).get(0) == 4, 30, "4 leads el-0")
    again = client.elect_leaders(ElectionType.PREFERRED, [tp0]).result(30)
    assert again[tp0].code() == KafkaError.ELECTION_NOT_NEEDED

    b = cluster.bootstrap
    base = ("leader-election", "--bootstrap-server", b, "--election-type", "preferred")
    out = ok(kraft(*base, "--topic", TOPIC, "--partition", "1"))
    assert out == f"Successfully completed leader election (PREFERRED) for partitions {TOPIC}-1\n"
    out = ok(kraft(*base, "--topic", TOPIC, "--partition", "0"))
    assert out == f"Valid replica already elected for partitions {TOPIC}-0\n"
    # Every partition already led by its preferred replica: nothing to report.
    assert ok(kraft(*base, "--all-topic-partitions")) == ""
    failed = kraft(*base, "--topic", TOPIC, "--partition", "9")
    assert failed.returncode == 1
    assert failed.stdout.startswith(
        f"Error completing leader election (PREFERRED) for partition: {TOPIC}-9: "
    )
    assert "1 replica(s) could not be elected" in failed.stderr


def test_leader_election_from_a_json_file(cluster: ProcCluster, tmp_path: Path) -> None:
    path = tmp_path / "election.json"
    path.write_text(json.dumps({"partitions": [{"topic": TOPIC, "partition": 2}]}))
    out = ok(
        kraft(
            "leader-election", "--bootstrap-server", cluster.bootstrap,
            "--election-type", "PREFERRED", "--path-to-json-file", str(path),
        )
    )  # fmt: skip
    assert out == f"Valid replica already elected for partitions {TOPIC}-2\n"


# -- DescribeLogDirs ---------------------------------------------------------------------------


def produce(c: ProcCluster, topic: str, partition: int, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, f"value-{i}".encode() * 10, partition=partition)
    assert p.flush(30) == 0


def test_describe_log_dirs_sizes_and_lags(cluster: ProcCluster) -> None:
    from kafka import KafkaAdminClient

    produce(cluster, TOPIC, 3, 50)
    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:

        def sizes() -> dict[int, tuple[int, int]] | None:
            out = {}
            for answer in client.describe_log_dirs(topic_partitions=[TOPIC]):
                (log_dir,) = answer["log_dirs"]
                assert log_dir["error_code"] == 0 and log_dir["total_bytes"] > 0
                assert 0 <= log_dir["usable_bytes"] <= log_dir["total_bytes"]
                parts = {
                    p["partition_index"]: p for t in log_dir["topics"] for p in t["partitions"]
                }
                assert sorted(parts) == [0, 1, 2, 3]  # RF 3 on 3 brokers: all here
                p3 = parts[3]
                out[answer["broker"]] = (p3["partition_size"], p3["offset_lag"])
            settled = len({s for s, _ in out.values()}) == 1
            return out if settled else None  # followers caught up: same size

        got = wait_for(sizes, 30, "replicas of el-3 equal in size")
        assert sorted(got) == [4, 5, 6]
        assert all(size > 500 and lag == 0 for size, lag in got.values()), got
    finally:
        client.close()

    proc = kraft(
        "log-dirs", "--describe", "--bootstrap-server", cluster.bootstrap,
        "--broker-list", "4,5", "--topic-list", TOPIC,
    )  # fmt: skip
    lines = ok(proc).splitlines()
    assert lines[0] == "Querying brokers for log directories information"
    assert lines[1] == "Received log directory information from brokers 4,5"
    data = json.loads(lines[2])
    assert data["version"] == 1 and [b["broker"] for b in data["brokers"]] == [4, 5]
    for b in data["brokers"]:
        (d,) = b["logDirs"]
        assert d["error"] is None and f"broker-{b['broker']}" in d["logDir"]
        names = sorted(p["partition"] for p in d["partitions"])
        assert names == [f"{TOPIC}-{i}" for i in range(4)]
        assert all(not p["isFuture"] and p["offsetLag"] == 0 for p in d["partitions"])
    missing = kraft("log-dirs", "--describe", "--bootstrap-server", cluster.bootstrap,
                    "--broker-list", "9")  # fmt: skip
    assert missing.returncode == 1 and "do not exist from --broker-list: 9" in missing.stderr


# -- DescribeTopicPartitions -------------------------------------------------------------------


def test_describe_topic_partitions_pages_with_a_cursor(cluster: ProcCluster) -> None:
    broker = cluster.brokers[0]
    client = RawClient(broker.host, broker.port)
    seen: list[tuple[str, int]] = []
    cursor = None
    pages = 0
    while True:
        body = {"topics": [{"name": TOPIC}], "response_partition_limit": 3, "cursor": cursor}
        resp = client.call(75, 0, request(75, 0, body))
        pages += 1
        (topic,) = resp.topics
        assert topic.error_code == 0 and topic.name == TOPIC and topic.topic_id is not None
        for p in topic.partitions:
            assert (
                p.leader_id in p.isr_nodes
                and list(p.replica_nodes) == ASSIGNMENT[p.partition_index]
            )
            assert p.eligible_leader_replicas == () and p.offline_replicas == ()
            seen.append((topic.name, p.partition_index))
        assert topic.topic_authorized_operations > 0
        if resp.next_cursor is None:
            break
        cursor = {
            "topic_name": resp.next_cursor.topic_name,
            "partition_index": resp.next_cursor.partition_index,
        }
    assert pages == 2 and seen == [(TOPIC, i) for i in range(4)]
    unknown = client.call(75, 0, request(75, 0, {"topics": [{"name": "nope"}]}))
    assert [(t.name, t.error_code) for t in unknown.topics] == [("nope", 3)]


def test_describe_topics_by_admin_client(cluster: ProcCluster) -> None:
    from confluent_kafka import TopicCollection

    client = admin(cluster)
    desc = client.describe_topics(TopicCollection([TOPIC]))[TOPIC].result(30)
    assert [[r.id for r in p.replicas] for p in desc.partitions] == ASSIGNMENT


# -- DescribeQuorum ----------------------------------------------------------------------------


def test_describe_quorum_by_kafka_python_and_tool(cluster: ProcCluster) -> None:
    from kafka import KafkaAdminClient

    client = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        quorum = client.describe_metadata_quorum()
    finally:
        client.close()
    (topic,) = quorum["topics"]
    assert topic["topic_name"] == "__cluster_metadata"
    (p,) = topic["partitions"]
    assert p["error"] is None and p["leader_id"] in (1, 2, 3) and p["leader_epoch"] > 0
    voters = {v["replica_id"]: v for v in p["current_voters"]}
    assert sorted(voters) == [1, 2, 3]
    assert voters[p["leader_id"]]["log_end_offset"] > 0
    assert p["high_watermark"] <= voters[p["leader_id"]]["log_end_offset"]
    assert sorted(o["replica_id"] for o in p["observers"]) == [4, 5, 6]

    b = cluster.bootstrap
    status = ok(kraft("metadata-quorum", "--bootstrap-server", b, "describe", "--status"))
    fields = dict(line.split(":", 1) for line in status.splitlines())
    assert list(fields) == [
        "ClusterId", "LeaderId", "LeaderEpoch", "HighWatermark", "MaxFollowerLag",
        "MaxFollowerLagTimeMs", "CurrentVoters", "CurrentObservers",
    ]  # fmt: skip
    assert fields["LeaderId"].strip() in ("1", "2", "3")
    assert fields["CurrentVoters"].strip() == "[1,2,3]"
    assert fields["CurrentObservers"].strip() == "[4,5,6]"
    table = ok(kraft("metadata-quorum", "--bootstrap-server", b, "describe", "--replication"))
    rows = [line.split() for line in table.splitlines()]
    assert rows[0] == [
        "NodeId", "DirectoryId", "LogEndOffset", "Lag", "LastFetchTimestamp",
        "LastCaughtUpTimestamp", "Status",
    ]  # fmt: skip
    statuses = sorted((int(r[0]), r[-1]) for r in rows[1:])
    assert [s for _, s in statuses].count("Leader") == 1
    assert [n for n, s in statuses if s == "Observer"] == [4, 5, 6]
    assert sorted(n for n, s in statuses if s in ("Leader", "Follower")) == [1, 2, 3]


# -- unclean elections --------------------------------------------------------------------------


def test_unclean_election_by_tool_brings_back_a_partition_without_isr(
    cluster: ProcCluster,
) -> None:
    """The only ISR member dies with unclean.leader.election.enable off: the partition
    stays leaderless when the other replica returns, until an operator asks for an unclean
    election; the returning ISR member then follows (its extra records truncated)."""
    topic = "unclean"
    create_topic(cluster, topic, [[5, 6]])
    cluster.kill_broker(6)
    wait_for(lambda: (cluster.partitions(topic) or {}).get(0, {}).get("isr") == [5], 30,
             "the ISR shrinks to 5", cluster.logs)  # fmt: skip
    produce(cluster, topic, 0, 3)  # on 5 only
    cluster.kill_broker(5)
    wait_for(lambda: (leaders(cluster, topic) or {}).get(0) == -1, 30, "no leader", cluster.logs)
    cluster.restart_broker(6)
    cluster.wait_brokers_unfenced({6}, 0, 60)
    base = ("leader-election", "--bootstrap-server", cluster.bootstrap)
    preferred = kraft(*base, "--election-type", "PREFERRED", "--topic", topic, "--partition", "0")
    assert preferred.returncode == 1  # 5, the preferred replica, is down
    assert (leaders(cluster, topic) or {}).get(0) == -1  # no clean choice was made for us
    out = ok(kraft(*base, "--election-type", "UNCLEAN", "--topic", topic, "--partition", "0"))
    assert out == f"Successfully completed leader election (UNCLEAN) for partitions {topic}-0\n"
    wait_for(lambda: (leaders(cluster, topic) or {}).get(0) == 6, 30, "6 leads", cluster.logs)
    cluster.restart_broker(5)
    wait_for(lambda: sorted((cluster.partitions(topic) or {}).get(0, {}).get("isr", [])) == [5, 6],
             60, "5 follows 6 again", cluster.logs)  # fmt: skip
    # What only 5 had is gone, as Kafka's unclean elections lose it.
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "unclean"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), 30) == (0, 0)
    finally:
        consumer.close()


# -- automatic preferred leader rebalancing ----------------------------------------------------


def test_leadership_returns_to_the_preferred_replica_after_a_restart(tmp_path: Path) -> None:
    with ProcCluster(
        tmp_path / "data",
        controller_props={"leader.imbalance.check.interval.seconds": "2"},
        broker_props=BROKER_PROPS,
    ) as c:
        c.start()
        create_topic(c, "balanced", [[4, 5, 6], [5, 6, 4]])
        c.kill_broker(4)
        wait_for(lambda: (leaders(c, "balanced") or {}).get(0) in (5, 6), 30, "el-0 moved off 4")
        c.restart_broker(4)
        # No election asked for: the controller's balance check moves it back.
        wait_for(lambda: leaders(c, "balanced") == {0: 4, 1: 5}, 60, "4 leads again", c.logs)


def test_leader_election_refuses_bad_arguments_in_one_line(tmp_path: Path) -> None:
    from tests.harness.cli import one_line_error

    base = ("leader-election", "--bootstrap-server", "127.0.0.1:1", "--election-type")
    one_line_error(kraft(*base, "preferred"), "give exactly one of")
    one_line_error(kraft(*base, "preferred", "--topic", "t"), "--topic needs --partition")
    bad = tmp_path / "bad.json"
    bad.write_text('{"partitions": [{"topic": "t"}]}')
    one_line_error(kraft(*base, "unclean", "--path-to-json-file", str(bad)), "expected")
