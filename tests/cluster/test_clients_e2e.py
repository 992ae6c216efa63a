"""Three ordinary Kafka clients against one `kraft dev` cluster (3 controllers, 3 brokers).

confluent-kafka creates a topic; confluent-kafka, kafka-python and aiokafka each produce
10,000 keyed messages with headers and each reads the whole topic back by assign(); the
cluster restarts on the same data dir and keeps everything; a retried idempotent batch is
written once. The tests share one cluster and run in file order. Every wait is a condition
under a deadline.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.harness.dev_cluster import Cluster
from tests.harness.raw_protocol import kafka_python_roundtrip

TOPIC = "e2e-clients"
PARTITIONS = 6
N = 10_000
KEYS = 37
CLIENTS = ("ck", "kp", "aio")  # value prefixes: confluent-kafka, kafka-python, aiokafka
TOTAL = N * len(CLIENTS)

# A consumed record: (partition, offset, key, value, headers as a list of (str, bytes)).
Rec = tuple[int, int, bytes | None, bytes, list[tuple[str, bytes]]]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("clients-e2e"))
    try:
        c.start()
        yield c
        if c.current.proc.poll() is None:
            c.stop()
    finally:
        for d in c.procs:
            d.kill_everything()


STATE: dict[str, Any] = {}


# -- helpers -----------------------------------------------------------------------------


def headers_for(prefix: str, i: int) -> list[tuple[str, bytes]]:
    return [("client", prefix.encode()), ("seq", b"%d" % i)]


def key_for(i: int) -> bytes:
    return b"key-%d" % (i % KEYS)


def value_for(prefix: str, i: int) -> bytes:
    return b"%s-%d" % (prefix.encode(), i)


def topic_metadata(bootstrap: str, topic: str) -> Any:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_topics(topic, timeout=10)


def wait_topic_ready(bootstrap: str, topic: str, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            md = topic_metadata(bootstrap, topic)
            t = md.topics.get(topic)
            last = t
            if (
                t is not None
                and t.error is None
                and len(t.partitions) == PARTITIONS
                and all(p.leader >= 0 and len(p.replicas) == 3 for p in t.partitions.values())
            ):
                return md
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready within {timeout_s}s: {last!r}")


def check_records(recs: list[Rec], who: str) -> None:
    """Every produced message exactly once, offsets increasing per partition, per-key order
    kept for each producer, keys and headers intact."""
    assert len(recs) == TOTAL, f"{who}: got {len(recs)} records, want {TOTAL}"
    by_part: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        by_part[r[0]].append(r)
    assert set(by_part) <= set(range(PARTITIONS)), f"{who}: partitions {sorted(by_part)}"
    seen: set[bytes] = set()
    for p, rs in by_part.items():
        offsets = [r[1] for r in rs]
        ordered = all(a < b for a, b in zip(offsets, offsets[1:], strict=False))
        assert ordered, f"{who}: p{p} offsets unordered"
        last_seq: dict[tuple[str, bytes | None], int] = {}
        key_part: dict[bytes | None, int] = {}
        for _, off, key, value, headers in rs:
            prefix, _, num = value.decode().partition("-")
            i = int(num)
            assert prefix in CLIENTS, f"{who}: unexpected value {value!r}"
            assert value not in seen, f"{who}: duplicate {value!r} at p{p} offset {off}"
            seen.add(value)
            assert key == key_for(i), f"{who}: {value!r} has key {key!r}"
            assert headers == headers_for(prefix, i), f"{who}: {value!r} headers {headers!r}"
            # one partition per key, and per producer the key's sequence increases
            assert key_part.setdefault(key, p) == p
            prev = last_seq.get((prefix, key), -1)
            assert i > prev, f"{who}: {value!r} after seq {prev} for key {key!r} in p{p}"
            last_seq[(prefix, key)] = i
    want = {value_for(c, i) for c in CLIENTS for i in range(N)}
    assert seen == want, f"{who}: missing {len(want - seen)}"


def _norm_headers(hs: Any) -> list[tuple[str, bytes]]:
    return [(k, bytes(v) if v is not None else b"") for k, v in (hs or [])]


# -- consumers -------------------------------------------------------------------------------


def consume_confluent(bootstrap: str, expect: int = TOTAL, timeout_s: float = 30) -> list[Rec]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "e2e-ck",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    recs: list[Rec] = []
    try:
        c.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + timeout_s
        while len(recs) < expect and time.monotonic() < deadline:
            for m in c.consume(num_messages=2000, timeout=0.5):
                assert m.error() is None, f"confluent-kafka consume error: {m.error()}"
                recs.append(
                    (m.partition(), m.offset(), m.key(), m.value(), _norm_headers(m.headers()))
                )
        # a short extra poll catches duplicates beyond the expected count
        for m in c.consume(num_messages=2000, timeout=0.3):
            if m.error() is None:
                recs.append(
                    (m.partition(), m.offset(), m.key(), m.value(), _norm_headers(m.headers()))
                )
    finally:
        c.close()
    return recs


def consume_kafka_python(bootstrap: str, timeout_s: float = 30) -> list[Rec]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    recs: list[Rec] = []
    try:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout_s
        while len(recs) < TOTAL and time.monotonic() < deadline:
            for tp, ms in c.poll(timeout_ms=500, max_records=5000).items():
                for m in ms:
                    recs.append((tp.partition, m.offset, m.key, m.value, _norm_headers(m.headers)))
        for tp, ms in c.poll(timeout_ms=300).items():
            for m in ms:
                recs.append((tp.partition, m.offset, m.key, m.value, _norm_headers(m.headers)))
    finally:
        c.close()
    return recs


def consume_aiokafka(bootstrap: str, timeout_s: float = 30) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    async def run() -> list[Rec]:
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        await c.start()
        recs: list[Rec] = []
        try:
            tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
            c.assign(tps)
            await c.seek_to_beginning(*tps)
            deadline = time.monotonic() + timeout_s
            while len(recs) < TOTAL and time.monotonic() < deadline:
                got = await c.getmany(timeout_ms=500, max_records=5000)
                for tp, ms in got.items():
                    for m in ms:
                        recs.append(
                            (tp.partition, m.offset, m.key, m.value, _norm_headers(m.headers))
                        )
            for tp, ms in (await c.getmany(timeout_ms=300)).items():
                for m in ms:
                    recs.append((tp.partition, m.offset, m.key, m.value, _norm_headers(m.headers)))
        finally:
            await c.stop()
        return recs

    return asyncio.run(run())


CONSUMERS: dict[str, Callable[[str], list[Rec]]] = {
    "confluent-kafka": consume_confluent,
    "kafka-python": consume_kafka_python,
    "aiokafka": consume_aiokafka,
}


# -- 1. create the topic -------------------------------------------------------------------


def test_admin_creates_topic(cluster: Cluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=15)
    assert fs[TOPIC].result(20) is None
    md = wait_topic_ready(cluster.bootstrap, TOPIC, 20)
    assert sorted(md.topics[TOPIC].partitions) == list(range(PARTITIONS))
    STATE["topic"] = True


# -- 2. three producers ----------------------------------------------------------------------


def test_confluent_producer(cluster: Cluster) -> None:
    from confluent_kafka import Producer

    assert STATE.get("topic")
    p = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    acked: list[Any] = []
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        (errors if err else acked).append(err or msg.offset())

    for i in range(N):
        while True:
            try:
                p.produce(
                    TOPIC,
                    key=key_for(i),
                    value=value_for("ck", i),
                    headers=headers_for("ck", i),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(30) == 0
    assert errors == []
    assert len(acked) == N and all(o >= 0 for o in acked)


def test_kafka_python_producer(cluster: Cluster) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=cluster.bootstrap.split(","))
    try:
        futures = [
            p.send(TOPIC, key=key_for(i), value=value_for("kp", i), headers=headers_for("kp", i))
            for i in range(N)
        ]
        p.flush(30)
        metas = [f.get(timeout=10) for f in futures]
    finally:
        p.close(10)
    assert len(metas) == N and all(m.offset >= 0 for m in metas)


def test_aiokafka_producer(cluster: Cluster) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> list[Any]:
        p = AIOKafkaProducer(bootstrap_servers=cluster.bootstrap)
        await p.start()
        try:
            futs = [
                await p.send(
                    TOPIC, key=key_for(i), value=value_for("aio", i), headers=headers_for("aio", i)
                )
                for i in range(N)
            ]
            await p.flush()
            return await asyncio.wait_for(asyncio.gather(*futs), 30)
        finally:
            await p.stop()

    metas = asyncio.run(run())
    assert len(metas) == N and all(m.offset >= 0 for m in metas)


# -- 3. three consumers ----------------------------------------------------------------------


def test_high_watermarks_sum_to_total(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "e2e-wm"})
    try:
        marks = [
            c.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10) for p in range(PARTITIONS)
        ]
    finally:
        c.close()
    assert all(lo == 0 for lo, _ in marks), marks
    assert sum(hi for _, hi in marks) == TOTAL, marks


@pytest.mark.parametrize("client", list(CONSUMERS))
def test_consume_everything_by_assign(cluster: Cluster, client: str) -> None:
    check_records(CONSUMERS[client](cluster.bootstrap), client)


def test_kcat_lists_metadata_and_reads_a_partition(cluster: Cluster) -> None:
    """kcat (librdkafka's CLI, Debian package `kcat`; `make test` installs it)."""
    from confluent_kafka import Consumer, TopicPartition

    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed: `make test` installs it with apt-get"
    listing = subprocess.run(
        [kcat, "-L", "-b", cluster.bootstrap, "-t", TOPIC],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    assert f'topic "{TOPIC}" with {PARTITIONS} partitions' in listing, listing
    assert listing.count("broker ") >= 3 or "3 brokers" in listing, listing
    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "e2e-kcat"})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
    finally:
        c.close()
    out = subprocess.run(
        [
            kcat,
            "-C",
            "-b",
            cluster.bootstrap,
            "-t",
            TOPIC,
            "-p",
            "0",
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%o %k %s\n",
        ],
        capture_output=True,
        timeout=60,
        check=True,
    ).stdout.splitlines()
    assert len(out) == high > 0
    offsets = [int(line.split(b" ", 1)[0]) for line in out]
    assert offsets == list(range(high))
    assert all(line.split(b" ")[2].split(b"-")[0] in (b"ck", b"kp", b"aio") for line in out)


# -- 4. restart ------------------------------------------------------------------------------


def test_restart_keeps_topic_and_messages(cluster: Cluster) -> None:
    cluster.stop()
    cluster.start()
    assert any("existing cluster" in line for line in cluster.current.lines)
    wait_topic_ready(cluster.bootstrap, TOPIC, 30)
    check_records(consume_confluent(cluster.bootstrap), "confluent-kafka after restart")


# -- 5. a retried idempotent batch is written once -----------------------------------------


def test_retried_idempotent_batch_is_not_written_twice(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, TopicPartition
    from kafka.protocol.old.init_producer_id import (
        InitProducerIdRequest_v1,
        InitProducerIdResponse_v1,
    )
    from kafka.protocol.old.produce import ProduceRequest_v8, ProduceResponse_v8
    from kafka.record.default_records import DefaultRecordBatchBuilder

    md = wait_topic_ready(cluster.bootstrap, TOPIC, 30)
    part = 2
    leader = md.topics[TOPIC].partitions[part].leader
    b = md.brokers[leader]
    leader_addr = f"{b.host}:{b.port}"

    init = kafka_python_roundtrip(
        cluster.bootstrap.split(",")[0],
        InitProducerIdRequest_v1(transactional_id=None, transaction_timeout_ms=60000),
        InitProducerIdResponse_v1,
        1,
    )
    assert init.error_code == 0, init
    assert init.producer_id >= 0 and init.producer_epoch >= 0

    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=init.producer_id,
        producer_epoch=init.producer_epoch,
        base_sequence=0,
        batch_size=1 << 20,
    )
    ts = int(time.time() * 1000)
    for i in range(3):
        builder.append(i, ts, b"idem-key", b"idem-%d" % i, [("h", b"v")])
    batch = bytes(builder.build())

    c = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "e2e-idem"})
    try:
        tp = TopicPartition(TOPIC, part)
        _, hw_before = c.get_watermark_offsets(tp, timeout=10)

        answers = []
        for attempt in (1, 2):
            req = ProduceRequest_v8(
                transactional_id=None,
                acks=-1,
                timeout_ms=15000,
                topic_data=[(TOPIC, [(part, batch)])],
            )
            resp = kafka_python_roundtrip(leader_addr, req, ProduceResponse_v8, 10 + attempt)
            ((name, ((index, err, base_offset, *_rest),)),) = [
                (t[0], [tuple(pr) for pr in t[1]]) for t in resp.responses
            ]
            assert (name, index) == (TOPIC, part)
            answers.append((err, base_offset))
        assert answers[0] == (0, hw_before), answers
        assert answers[1] == (0, hw_before), f"retry answered {answers[1]}, first {answers[0]}"

        _, hw_after = c.get_watermark_offsets(tp, timeout=10)
        assert hw_after == hw_before + 3, (hw_before, hw_after)
    finally:
        c.close()

    # and a reader sees the three records once
    r = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "e2e-idem-r",
            "enable.auto.commit": False})  # fmt: skip
    got: list[bytes] = []
    try:
        r.assign([TopicPartition(TOPIC, part, hw_before)])
        deadline = time.monotonic() + 15
        while len(got) < 3 and time.monotonic() < deadline:
            for m in r.consume(num_messages=100, timeout=0.5):
                if m.error() is None:
                    got.append(m.value())
        got += [m.value() for m in r.consume(num_messages=100, timeout=0.3) if m.error() is None]
    finally:
        r.close()
    assert got == [b"idem-0", b"idem-1", b"idem-2"]


# -- stop ------------------------------------------------------------------------------------


def test_sigterm_stops_cluster_cleanly(cluster: Cluster) -> None:
    cluster.stop(timeout_s=45)
    for b in (4, 5, 6):
        assert (cluster.data / f"broker-{b}" / "logs" / ".kafka_cleanshutdown").exists()
