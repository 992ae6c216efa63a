"""A fenced broker is still named in Metadata answers for a while, and while every broker
is fenced they are all named (broker/fenced_brokers.py says why: librdkafka drops every
broker an answer leaves out, and its group consumers hang or stall on that).

1. One broker of three is SIGSTOPped past the controllers' session and fenced: the others'
   Metadata answers still name it, with its partitions led elsewhere. Kafka's would not
   (the fault campaign's seed 373227864 hung a librdkafka group consumer that way).
2. The only broker is fenced: the Metadata answer names it (Kafka's names none; seed
   2494538150 stalled both group consumers for librdkafka's 5 min re-bootstrap), and a
   client that saw such an answer delivers once the broker is unfenced. With one broker
   librdkafka also sees every broker down and recovers either way, so the Metadata answer
   is what fails without the fix; the delivery shows the client is not harmed by a fenced
   broker in it. The all-fenced state is made to last: the broker heartbeats
   every 6 s (its own broker.session.timeout.ms allows that) while the controllers fence
   it after 3 s, so it is fenced for half of every heartbeat interval.

Every wait is a condition under a deadline; failures carry the node logs.
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
BROKER_PROPS = {"broker.heartbeat.interval.ms": "6000", "broker.session.timeout.ms": "9000"}


def test_a_fenced_broker_is_still_named_by_the_others(tmp_path: Path) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    c = ProcCluster(
        tmp_path / "data",
        controller_props={"broker.session.timeout.ms": "3000"},
        broker_props={"broker.heartbeat.interval.ms": "1000"},
    )
    try:
        c.start()
        topic = "one-broker-fenced"
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        admin.create_topics([NewTopic(topic, 3, 3)], request_timeout=15)[topic].result(20)
        victim, *others = c.brokers
        # Ask the others only: the paused broker would not answer.
        asked = AdminClient({"bootstrap.servers": ",".join(b.address for b in others)})
        victim.pause()
        wait_for(lambda: victim.node_id in (c.fenced_brokers() or set()), 30,
                 f"the controllers to fence paused broker {victim.node_id}", c.logs)  # fmt: skip
        seen: dict[str, Any] = {}

        def answer_after_fencing() -> bool:
            md = asked.list_topics(topic, timeout=5)
            parts = md.topics[topic].partitions.values()
            seen["brokers"] = dict(md.brokers)
            return len(parts) == 3 and all(
                p.leader >= 0 and p.leader != victim.node_id and victim.node_id not in p.isrs
                for p in parts
            )

        moved = "a Metadata answer with the fenced broker's leaderships moved"
        wait_for(answer_after_fencing, 30, moved, c.logs)
        assert victim.node_id in seen["brokers"], (
            f"Metadata named {sorted(seen['brokers'])} after broker {victim.node_id} was "
            f"fenced: librdkafka drops it\n{c.logs()}"
        )
    finally:
        c.close()


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


def test_metadata_names_every_broker_when_all_are_fenced(cluster: ProcCluster) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(TOPIC, 1, 1)], request_timeout=15)[TOPIC].result(20)
    (broker,) = cluster.brokers
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "message.timeout.ms": 60000}
    )
    # An answer given while the broker's own image has it fenced: the partition has no
    # leader then (its only replica is fenced).
    seen: dict[str, Any] = {}

    def fenced_answer() -> bool:
        md = producer.list_topics(TOPIC, timeout=5)
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
    # The same client goes on: its write lands once a heartbeat has unfenced the broker
    # (every 6 s), well before librdkafka's 5 min re-bootstrap.
    delivered: list[Any] = []
    producer.produce(TOPIC, b"after", on_delivery=lambda err, msg: delivered.append(err))
    deadline = time.monotonic() + 60
    while not delivered and time.monotonic() < deadline:
        producer.poll(POLL_S)
    assert delivered == [None], (
        f"no delivery after a Metadata answer given while every broker was fenced "
        f"({delivered})\n{cluster.logs()}"
    )
