"""Record deletion, offsets by timestamp, topic limits and DescribeProducers on a real
cluster (3 controllers, 3 brokers as processes), with confluent-kafka's AdminClient,
producer and consumer, the `kraft delete-records` / `kraft get-offsets` tools, and raw
requests where no client has the call (Produce's record errors, DescribeProducers).

The log start offset of every replica is read where Kafka keeps it: each broker's
`log-start-offset-checkpoint`; and as consumers see it, from the beginning, also after
the leader changed and after a crash and restart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from common.errors import Errors
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, read_offsets
from storage.records import Record, build_batch
from tests.harness.cli import kraft, ok
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, fetch, produce, request

BROKER_PROPS = {"replica.lag.time.max.ms": "1500"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(
        Path(tmp_path_factory.mktemp("records")),
        controller_props={"auto.leader.rebalance.enable": "false"},
        broker_props=BROKER_PROPS,
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


# -- helpers ---------------------------------------------------------------------------------


def admin(c: ProcCluster, live: tuple[int, ...] | None = None) -> Any:
    """An AdminClient; `live`: bootstrap from these brokers only (not from a dead one)."""
    from confluent_kafka.admin import AdminClient

    bootstrap = c.bootstrap
    if live is not None:
        bootstrap = ",".join(f"{c.broker(b).host}:{c.broker(b).port}" for b in live)
    client = AdminClient({"bootstrap.servers": bootstrap})
    # Connected and with metadata before the first request: librdkafka 2.16's
    # DeleteRecords looks for leaders once, and finds none on a client still connecting.
    client.list_topics(timeout=15)
    return client


def create_topic(
    c: ProcCluster, topic: str, assignment: list[list[int]], config: dict[str, str] | None = None
) -> None:
    from confluent_kafka.admin import NewTopic

    client = admin(c)
    new = NewTopic(
        topic, num_partitions=len(assignment), replica_assignment=assignment, config=config or {}
    )
    client.create_topics([new])[topic].result(30)

    def ready() -> bool:
        parts = c.partitions(topic)
        return (
            parts is not None
            and len(parts) == len(assignment)
            and all(
                p["leader"] >= 0 and len(p["isr"]) == len(p["replicas"]) for p in parts.values()
            )
        )

    wait_for(ready, 30, f"{topic} led with full ISRs", c.logs)
    wait_for(lambda: all(broker_knows(c, b.node_id, topic) for b in c.brokers), 30,
             f"every broker's metadata has {topic}", c.logs)  # fmt: skip


def broker_knows(c: ProcCluster, broker: int, topic: str) -> bool:
    """Has `broker` applied the topic's metadata (its Metadata answer names leaders)?"""
    named = [{"name": topic, "topic_id": None}]
    flags = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": False}
    with closing(raw_to(c, broker)) as raw:
        resp = raw.call(3, 12, request(3, 12, {"topics": named, **flags}))
    t = resp.topics[0]
    return t.error_code == 0 and bool(t.partitions) and all(
        p.error_code == 0 and p.leader_id >= 0 for p in t.partitions
    )


def produce_all(c: ProcCluster, topic: str, n: int, **conf: Any) -> list[Any]:
    """n keyed records to partition 0, acks=all; the delivered messages."""
    from confluent_kafka import Producer

    delivered: list[Any] = []
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "linger.ms": 5, **conf})
    for i in range(n):
        p.produce(
            topic,
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            partition=0,
            on_delivery=lambda err, msg: (errors if err else delivered).append(err or msg),
        )
    assert p.flush(30) == 0
    assert not errors, errors
    return delivered


def first_offset_from_beginning(c: ProcCluster, topic: str) -> int:
    """What a consumer from the beginning (auto.offset.reset=earliest) reads first."""
    from confluent_kafka import Consumer

    consumer = Consumer(
        {
            "bootstrap.servers": c.bootstrap,
            "group.id": f"g-{topic}-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                return int(msg.offset())
        raise AssertionError(f"no record from {topic} within 30 s\n{c.logs()}")
    finally:
        consumer.close()


def list_offset(c: ProcCluster, topic: str, spec: Any) -> Any:
    from confluent_kafka import TopicPartition

    client = admin(c)
    futures = client.list_offsets({TopicPartition(topic, 0): spec}, request_timeout=15)
    return next(iter(futures.values())).result(30)


def checkpointed_start(c: ProcCluster, broker: int, topic: str) -> int | None:
    """A broker's log-start-offset-checkpoint entry for `topic`-0."""
    path = c.broker(broker).data_dir / "logs" / LOG_START_OFFSET_CHECKPOINT
    try:
        return read_offsets(path).get((topic, 0))
    except Exception:  # noqa: BLE001 - not written yet, or being replaced
        return None


def leader_of(c: ProcCluster, topic: str) -> int:
    parts = c.partitions(topic)
    assert parts is not None
    return int(parts[0]["leader"])


def raw_to(c: ProcCluster, broker: int) -> RawClient:
    b = c.broker(broker)
    return RawClient(b.host, b.port)


# -- DeleteRecords ---------------------------------------------------------------------------


def test_delete_records_moves_every_replica_and_survives_leader_change(
    cluster: ProcCluster,
) -> None:
    from confluent_kafka import KafkaError, TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic = "dr"
    create_topic(cluster, topic, [[4, 5, 6]])
    produce_all(cluster, topic, 100)
    client = admin(cluster)
    fs = client.delete_records([TopicPartition(topic, 0, 40)], operation_timeout=30)
    result = next(iter(fs.values())).result(30)
    assert result.low_watermark == 40  # every in-sync replica had moved when it answered
    for broker in (4, 5, 6):
        wait_for(
            lambda b=broker: checkpointed_start(cluster, b, topic) == 40,
            30,
            f"broker {broker} checkpoints log start 40",
            cluster.logs,
        )
    assert list_offset(cluster, topic, OffsetSpec.earliest()).offset == 40
    assert first_offset_from_beginning(cluster, topic) == 40

    # A fetch below the log start is out of range; one at it reads.
    leader = leader_of(cluster, topic)
    with closing(raw_to(cluster, leader)) as raw:
        resp = raw.call(1, 12, fetch([(topic, 0, 10, 1 << 20)]))
        part = resp.responses[0].partitions[0]
        assert (part.error_code, part.log_start_offset) == (Errors.OFFSET_OUT_OF_RANGE, 40)
        resp = raw.call(1, 12, fetch([(topic, 0, 40, 1 << 20)]))
        assert resp.responses[0].partitions[0].error_code == Errors.NONE

    # Past the high watermark: OFFSET_OUT_OF_RANGE for that partition.
    fs = client.delete_records([TopicPartition(topic, 0, 1000)], operation_timeout=30)
    with pytest.raises(Exception) as failed:
        next(iter(fs.values())).result(30)
    assert failed.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    # A new leader (the old one killed) serves from the same log start.
    cluster.kill_broker(leader)
    try:
        wait_for(
            lambda: (
                (cluster.partitions(topic) or {0: {"leader": leader}})[0]["leader"]
                not in (leader, -1)
            ),
            30,
            "a new leader for dr-0",
            cluster.logs,
        )
        assert first_offset_from_beginning(cluster, topic) == 40
        assert list_offset(cluster, topic, OffsetSpec.earliest()).offset == 40
        # -1: up to the high watermark, on the new leader; the survivors follow.
        survivors = tuple(b for b in (4, 5, 6) if b != leader)
        live = admin(cluster, survivors)  # kept: a destroyed client fails its futures
        fs = live.delete_records([TopicPartition(topic, 0, -1)], operation_timeout=30)
        assert next(iter(fs.values())).result(30).low_watermark == 100
        assert list_offset(cluster, topic, OffsetSpec.earliest()).offset == 100
    finally:
        cluster.restart_broker(leader)
    # The restarted replica learns the new start from the leader's fetch answers.
    wait_for(
        lambda: checkpointed_start(cluster, leader, topic) == 100,
        60,
        f"restarted broker {leader} follows the log start to 100",
        cluster.logs,
    )


def test_log_start_survives_a_crash(cluster: ProcCluster) -> None:
    """One replica, one segment: after a SIGKILL only log-start-offset-checkpoint keeps
    the start (no segment was deleted to show it)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    topic = "dr-crash"
    create_topic(cluster, topic, [[5]])
    produce_all(cluster, topic, 30)
    client = admin(cluster)
    fs = client.delete_records([TopicPartition(topic, 0, 12)], operation_timeout=30)
    assert next(iter(fs.values())).result(30).low_watermark == 12
    cluster.kill_broker(5)
    cluster.restart_broker(5)
    wait_for(lambda: leader_of(cluster, topic) == 5, 60, "broker 5 leads again", cluster.logs)
    # The first answer the restarted leader gives (a client may not find it at once).
    def answered() -> int | None:
        offset = int(list_offset(cluster, topic, OffsetSpec.earliest()).offset)
        return offset if offset >= 0 else None  # -1001: librdkafka's "no answer yet"

    earliest = wait_for(answered, 30, "ListOffsets EARLIEST from the restarted leader")
    assert earliest == 12
    assert first_offset_from_beginning(cluster, topic) == 12


def test_delete_records_and_get_offsets_tools(cluster: ProcCluster, tmp_path: Path) -> None:
    topic = "dr-tool"
    create_topic(cluster, topic, [[6, 4, 5], [4, 5, 6]])
    produce_all(cluster, topic, 20)
    spec = {
        "partitions": [
            {"topic": topic, "partition": 0, "offset": 7},
            {"topic": topic, "partition": 1, "offset": 5},
        ],
        "version": 1,
    }
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps(spec))
    b = cluster.bootstrap
    out = ok(kraft("delete-records", "--bootstrap-server", b, "--offset-json-file", str(path)))
    lines = out.splitlines()
    assert lines[:2] == [
        "Executing records delete operation",
        "Records delete operation completed:",
    ]
    # Partition 1 had no records: offset 5 is past its high watermark.
    by_part = {line.split("\t")[0]: line.split("\t")[1] for line in lines[2:]}
    assert by_part[f"partition: {topic}-0"] == "low_watermark: 7"
    assert by_part[f"partition: {topic}-1"].startswith("error: ")
    assert "OFFSET_OUT_OF_RANGE" in by_part[f"partition: {topic}-1"]

    base = ("get-offsets", "--bootstrap-server", b, "--topic", topic)
    assert ok(kraft(*base, "--time", "earliest")) == f"{topic}:0:7\n{topic}:1:0\n"
    assert ok(kraft(*base, "--time", "-1")) == f"{topic}:0:20\n{topic}:1:0\n"
    assert ok(kraft(*base, "--time", "-2", "--partitions", "0")) == f"{topic}:0:7\n"
    # Kafka's --topic-partitions patterns, and the brokers from --command-config.
    props = tmp_path / "client.properties"
    props.write_text(f"bootstrap.servers={b}\n")
    out = kraft("get-offsets", "--command-config", str(props), "--topic-partitions",
                f"{topic}:1-,nothing-matches", "--time", "earliest")  # fmt: skip
    assert ok(out) == f"{topic}:1:0\n"
    # max-timestamp: partition 1 is empty (no such offset: left out, as Kafka's tool).
    out = ok(kraft(*base, "--time", "max-timestamp"))
    assert out.startswith(f"{topic}:0:") and f"{topic}:1:" not in out
    # A timestamp after every record: nothing found, nothing printed.
    assert ok(kraft(*base, "--time", str(int(time.time() * 1000) + 3_600_000))) == ""
    bad = kraft(*base, "--time", "yesterday")
    assert bad.returncode == 1 and "Malformed time argument yesterday" in bad.stderr
    path.write_text('{"partitions": [{"topic": "x", "partition": 0}]}')
    bad = kraft("delete-records", "--bootstrap-server", b, "--offset-json-file", str(path))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr


# -- ListOffsets by timestamp ----------------------------------------------------------------


def test_list_offsets_by_timestamp_and_max_timestamp_exact(cluster: ProcCluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import OffsetSpec

    topic = "ts"
    create_topic(cluster, topic, [[4, 5, 6]])
    base = int(time.time() * 1000) - 60_000
    # Three batches; the second holds records out of timestamp order.
    batches = [[base + 10, base + 20], [base + 50, base + 30, base + 40], [base + 45]]
    p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 50})
    for stamps in batches:
        for ts in stamps:
            p.produce(topic, key=b"k", value=str(ts).encode(), partition=0, timestamp=ts)
        assert p.flush(30) == 0
    # offsets: 0:+10 1:+20 2:+50 3:+30 4:+40 5:+45
    expect = {
        base: (0, base + 10),
        base + 15: (1, base + 20),
        base + 25: (2, base + 50),  # the first record at or after, in offset order
        base + 50: (2, base + 50),
        base + 51: (-1, -1),
    }
    for ts, (offset, found_ts) in expect.items():
        got = list_offset(cluster, topic, OffsetSpec.for_timestamp(ts))
        assert (got.offset, got.timestamp) == (offset, found_ts), ts - base
    got = list_offset(cluster, topic, OffsetSpec.max_timestamp())
    assert (got.offset, got.timestamp) == (2, base + 50)  # KIP-734: that record's offset
    # librdkafka's own offsetsForTimes (a consumer's ListOffsets, as its test 0054 uses),
    # with timestamps from long ago (1234 ms, 2001).
    from confluent_kafka import Consumer, TopicPartition

    old = "ts-old"
    create_topic(cluster, old, [[5, 6, 4]])
    for ts in (1234, 999999999999):
        p.produce(old, value=b"x", partition=0, timestamp=ts)
    assert p.flush(30) == 0
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "ts"})
    try:
        for ts, offset in ((1234, 0), (999999999999, 1), (base, -1)):
            got = consumer.offsets_for_times([TopicPartition(old, 0, ts)], timeout=15)[0]
            assert (got.error, got.offset) == (None, offset), ts
    finally:
        consumer.close()
    assert (
        ok(
            kraft(
                "get-offsets",
                "--bootstrap-server",
                cluster.bootstrap,
                "--topic",
                topic,
                "--time",
                str(base + 42),
            )  # fmt: skip
        )
        == f"{topic}:0:2\n"
    )


# -- limits: max.message.bytes, keys on compacted topics -------------------------------------


def test_max_message_bytes_per_topic(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError, Producer

    topic = "small"
    create_topic(cluster, topic, [[4, 5, 6]], {"max.message.bytes": "2000"})
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap, "compression.type": "none"})
    p.produce(topic, key=b"k", value=b"x" * 5000, partition=0,
              on_delivery=lambda err, msg: errors.append(err))  # fmt: skip
    assert p.flush(30) == 0  # alone in its batch: the limit is on the batch
    p.produce(topic, key=b"k", value=b"x" * 100, partition=0,
              on_delivery=lambda err, msg: errors.append(err))  # fmt: skip
    assert p.flush(30) == 0
    assert [e.code() if e else 0 for e in errors] == [KafkaError.MSG_SIZE_TOO_LARGE, 0]


def test_keyless_records_refused_on_compacted_topic(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError, Producer

    topic = "compacted"
    create_topic(cluster, topic, [[4, 5, 6]], {"cleanup.policy": "compact"})
    records = [Record(key=b"a", value=b"1"), Record(key=None, value=b"2"),
               Record(key=b"c", value=b"3"), Record(key=None, value=b"4")]  # fmt: skip
    with closing(raw_to(cluster, leader_of(cluster, topic))) as raw:
        resp = raw.call(0, 9, produce(topic, 0, build_batch(records)))
        part = resp.responses[0].partition_responses[0]
        assert part.error_code == Errors.INVALID_RECORD
        assert [e.batch_index for e in part.record_errors] == [1, 3]
        why = f"Compacted topic cannot accept message without key in topic partition {topic}-0"
        assert all(e.batch_index_error_message == why for e in part.record_errors)
        assert part.error_message.startswith(
            "One or more records have been rejected due to 2 record errors in total"
        )
        ok_resp = raw.call(0, 9, produce(topic, 0, build_batch(records[:1])))
        assert ok_resp.responses[0].partition_responses[0].error_code == Errors.NONE
        assert ok_resp.responses[0].partition_responses[0].base_offset == 0  # nothing appended
    errors: list[Any] = []
    p = Producer({"bootstrap.servers": cluster.bootstrap})
    p.produce(topic, value=b"no key", partition=0, on_delivery=lambda e, m: errors.append(e))
    assert p.flush(30) == 0
    assert [e.code() for e in errors] == [KafkaError.INVALID_RECORD]


# -- DescribeProducers -----------------------------------------------------------------------


def test_describe_producers(cluster: ProcCluster) -> None:
    topic = "idem"
    create_topic(cluster, topic, [[6, 4, 5]])
    before = int(time.time() * 1000)
    delivered = produce_all(cluster, topic, 12, **{"enable.idempotence": True})
    leader = leader_of(cluster, topic)
    data = {"topics": [{"name": topic, "partition_indexes": [0]}]}
    with closing(raw_to(cluster, leader)) as raw:
        resp = raw.call(61, 0, request(61, 0, data))
    part = resp.topics[0].partitions[0]
    assert part.error_code == Errors.NONE
    assert len(part.active_producers) == 1
    state = part.active_producers[0]
    assert state.producer_id >= 0 and state.producer_epoch >= 0
    assert state.last_sequence == 11
    assert state.last_timestamp >= before
    assert state.last_timestamp == max(m.timestamp()[1] for m in delivered)
    assert (state.coordinator_epoch, state.current_txn_start_offset) == (-1, -1)
    follower = next(b for b in (4, 5, 6) if b != leader)
    with closing(raw_to(cluster, follower)) as raw:
        resp = raw.call(61, 0, request(61, 0, data))
    assert resp.topics[0].partitions[0].error_code == Errors.NOT_LEADER_OR_FOLLOWER
