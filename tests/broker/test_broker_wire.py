"""The Kafka protocol layer (network, codec, apis) driven by real clients.

A FAKE runtime (tests/harness/fake_broker.py) stands in for the replica manager and the
admin facade (this is a unit test of the protocol layer), but it keeps a real
`storage.log.Log` per partition under tmp_path, so produced bytes go through real storage
and fetches are real file slices. The server runs on its own event loop in a thread;
confluent-kafka, kafka-python and aiokafka talk to it over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.fake_broker import BrokerThread


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path)
    b.runtime.add_topic("wire", 3)
    yield b
    b.stop()


N = 1000


def messages(tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (
            f"key-{i % 7}".encode(),
            f"{tag}-value-{i}".encode() * (1 + i % 5),
            [("h1", f"{i}".encode()), ("tag", tag.encode())],
        )
        for i in range(N)
    ]


def by_partition(
    msgs: list[tuple[bytes, bytes, list[tuple[str, bytes]]]], partition_of: list[int]
) -> dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]]:
    out: dict[int, list[Any]] = {}
    for m, p in zip(msgs, partition_of, strict=True):
        out.setdefault(p, []).append(m)
    return out




# -- confluent-kafka -------------------------------------------------------------------------


def test_confluent_kafka_produce_and_consume(broker: BrokerThread) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    msgs = messages("ck")
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": True,
        }
    )
    delivered: dict[int, int] = {}  # message index -> partition
    errors: list[Any] = []

    def on_delivery(i: int) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered[i] = msg.partition()

        return done

    for i, (key, value, headers) in enumerate(msgs):
        producer.produce("wire", value, key, headers=headers, on_delivery=on_delivery(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors
    assert len(delivered) == N
    expected = by_partition(msgs, [delivered[i] for i in range(N)])

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition("wire", p, 0) for p in range(3)])
        got: dict[int, list[Any]] = {}
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < len(expected) or sum(map(len, got.values())) < N:
            assert time.monotonic() < deadline, "consumer timed out"
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                eof.add(m.partition())
                continue
            got.setdefault(m.partition(), []).append(
                (m.key(), m.value(), [(k, v) for k, v in m.headers() or []])
            )
        assert got == expected
    finally:
        consumer.close()


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_produce_and_consume(broker: BrokerThread) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    msgs = messages("kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send("wire", value=v, key=k, headers=h) for k, v, h in msgs]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close(10)
    assert all(m.offset >= 0 for m in metas)
    expected = by_partition(msgs, [m.partition for m in metas])

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=20000,
    )
    try:
        consumer.assign([TopicPartition("wire", p) for p in range(3)])
        consumer.seek_to_beginning()
        got: dict[int, list[Any]] = {}
        for m in consumer:
            got.setdefault(m.partition, []).append((m.key, m.value, list(m.headers)))
            if sum(map(len, got.values())) == N:
                break
        assert got == expected
    finally:
        consumer.close()


# -- aiokafka --------------------------------------------------------------------------------


def test_aiokafka_produce_and_consume(broker: BrokerThread) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    msgs = messages("aio")

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )
        await producer.start()
        try:
            futures = [await producer.send("wire", value=v, key=k, headers=h) for k, v, h in msgs]
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        expected = by_partition(msgs, [m.partition for m in metas])
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition("wire", p) for p in range(3)])
            await consumer.seek_to_beginning()
            got: dict[int, list[Any]] = {}
            async with asyncio.timeout(30):
                while sum(map(len, got.values())) < N:
                    batch = await consumer.getmany(timeout_ms=500)
                    for tp, records in batch.items():
                        for m in records:
                            got.setdefault(tp.partition, []).append(
                                (m.key, m.value, [(k, bytes(v)) for k, v in m.headers])
                            )
            assert got == expected
        finally:
            await consumer.stop()

    asyncio.run(run())
