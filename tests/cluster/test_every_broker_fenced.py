"""While every broker is fenced, a Metadata answer still names brokers, and a group member
that saw such an answer goes on reading once a broker is unfenced.

Kafka's Metadata lists unfenced brokers only, so when every broker is fenced it lists none.
librdkafka then drops every broker it knows, the bootstrap ones too. It re-bootstraps when
it sees every broker down, or after `metadata.recovery.rebootstrap.trigger.ms` (5 min): in
the fault campaign's seed 2494538150 (a controller-to-broker cut just past the session, three
brokers) both group consumers waited for the latter. Ours lists the registered fenced
brokers when no broker is unfenced. With the one broker here librdkafka does see every
broker down and recovers either way, so the Metadata answer is what this test checks; the
group's read afterwards shows the client is not harmed by fenced brokers in it.

The all-fenced state is made to last: the broker heartbeats every 6 s (its own
broker.session.timeout.ms allows that) while the controllers fence it after 3 s, so it is
fenced for half of every heartbeat interval and unfenced again by each heartbeat. Every
wait is a condition under a deadline; failures carry the node logs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cluster_procs import POLL_S, ProcCluster, wait_for

TOPIC = "every-broker-fenced"
CONTROLLER_PROPS = {"broker.session.timeout.ms": "3000"}
BROKER_PROPS = {
    "broker.heartbeat.interval.ms": "6000",
    "broker.session.timeout.ms": "9000",
    "offsets.topic.replication.factor": "1",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcCluster]:
    c = ProcCluster(
        tmp_path / "data", n_brokers=1, controller_props=CONTROLLER_PROPS, broker_props=BROKER_PROPS
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


def test_metadata_names_the_fenced_brokers_and_the_group_goes_on(cluster: ProcCluster) -> None:
    from confluent_kafka import Consumer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=15)[TOPIC].result(20)
    (broker,) = cluster.brokers
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "every-broker-fenced",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([TOPIC])
        produce(cluster, b"before")
        assert consume_until(consumer, b"before"), (
            f"the group never read 'before'\n{cluster.logs()}"
        )
        # An answer given while the broker's own image has it fenced: the partition has no
        # leader then (its only replica is fenced).
        seen: dict[str, Any] = {}

        def fenced_answer() -> bool:
            md = consumer.list_topics(TOPIC, timeout=5)
            part = md.topics[TOPIC].partitions.get(0)
            if part is not None and part.leader < 0:
                seen["brokers"] = dict(md.brokers)
                return True
            return False

        wait_for(fenced_answer, 30, "a Metadata answer while the broker is fenced", cluster.logs)
        assert broker.node_id in seen["brokers"], (
            f"Metadata listed {seen['brokers']} while broker {broker.node_id} was fenced: "
            f"a librdkafka client forgets every broker\n{cluster.logs()}"
        )
        # The group member is still connected: it reads a write made once a heartbeat has
        # unfenced the broker (every 6 s), well before librdkafka's 5 min re-bootstrap.
        produce(cluster, b"after")
        assert consume_until(consumer, b"after"), (
            f"the group did not read a write made after a Metadata answer given while every "
            f"broker was fenced\n{cluster.logs()}"
        )
    finally:
        consumer.close()


def produce(cluster: ProcCluster, value: bytes) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 30000}
    )
    delivered: list[Any] = []
    producer.produce(TOPIC, value, on_delivery=lambda err, msg: delivered.append(err))
    producer.flush(35)
    assert delivered == [None], f"producing {value!r}: {delivered}\n{cluster.logs()}"


def consume_until(consumer: Any, value: bytes, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        msg = consumer.poll(POLL_S)
        if msg is not None and msg.error() is None and msg.value() == value:
            return True
    return False
