"""Independent Kafka clients for the Spark tests: create topics, produce, read back.

confluent-kafka (librdkafka) only, so what the Spark source and sink do is checked
against a client that shares no code with them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

Header = tuple[str, bytes | None]


@dataclass(frozen=True)
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp_ms: int


# Kept forever: the tests' records carry fixed timestamps from 2024, and the shared Spark
# cluster checks retention every 200 ms (tests/harness/spark_session.py), which would delete them
# under the default 7 days.
KEEP = {"retention.ms": "-1"}


def create_topic(bootstrap: str, topic: str, partitions: int = 3, rf: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, rf, config=KEEP)])[topic].result(30)


def produce(bootstrap: str, topic: str,
            records: list[tuple[bytes | None, bytes | None, int, int, list[Header]]]) -> None:
    """Produce (key, value, partition, timestamp_ms, headers) records, in order; raise
    unless every one is acknowledged."""
    failed: list[str] = []

    def report(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            failed.append(err.str())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    for key, value, partition, ts, headers in records:
        p.produce(topic, value=value, key=key, partition=partition, timestamp=ts,
                  headers=headers or None, on_delivery=report)
    assert p.flush(30) == 0, "records left unacknowledged"
    assert not failed, failed


def read_topic(bootstrap: str, topic: str, timeout_s: float = 30.0) -> list[Rec]:
    """Every record of `topic`, from each partition's start to its high watermark."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "verify-never-joined",
                  "enable.auto.commit": False})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in parts}
        todo = {p for p in parts if ends[p] > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in todo])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout_s
        while todo:
            assert time.monotonic() < deadline, f"{topic}: partitions {todo} not read to the end"
            msg = c.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            p, off = msg.partition(), msg.offset()
            out.append(Rec(topic, p, off, msg.key(), msg.value(),
                           tuple(msg.headers() or ()), msg.timestamp()[1]))
            if off + 1 >= ends[p]:
                todo.discard(p)
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        c.close()
