"""`kraft dev` for real: a subprocess starting 3 controllers and 3 brokers on free ports
under tmp_path, driven by a real client, stopped with SIGTERM, started again on the same
data dir. Every wait is a condition under a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.dev_cluster import READY, DevProcess, alive, cluster_json, node_pids, wait_until


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[list[DevProcess]]:
    started: list[DevProcess] = []
    yield started
    for d in started:
        d.kill_everything()


def produce_and_consume(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, value=v, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(30) == 0 and errors == []
    return consume(bootstrap, topic, len(values))


def consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "dev-test", "enable.auto.commit": False}
    )
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = list(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        consumer.close()


def test_kraft_dev_starts_stops_and_restarts_on_the_same_data(
    tmp_path: Path, dev: list[DevProcess]
) -> None:
    data = tmp_path / "data"
    first = DevProcess(data)
    dev.append(first)
    first.wait_for_line(READY, 90)
    bootstrap = first.wait_for_line("bootstrap servers:", 5).split(":", 1)[1].strip()

    desc = cluster_json(data)
    roles = sorted((n["role"], n["id"]) for n in desc["nodes"])
    assert roles == [("broker", 4), ("broker", 5), ("broker", 6)] + [
        ("controller", i) for i in (1, 2, 3)
    ]
    assert desc["bootstrap_servers"] == bootstrap
    brokers = [n for n in desc["nodes"] if n["role"] == "broker"]
    assert bootstrap == ",".join(f"127.0.0.1:{b['port']}" for b in brokers)
    for n in desc["nodes"]:
        assert alive(n["pid"]) and Path(n["data_dir"]).is_dir()
    props = (data / "broker-4" / "broker.properties").read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{brokers[0]['port']}" in props

    values = [b"value-%d" % i for i in range(20)]
    assert sorted(produce_and_consume(bootstrap, "dev-topic", values)) == sorted(values)

    pids = [n["pid"] for n in desc["nodes"]]
    assert first.stop() == 0
    assert not [p for p in pids if alive(p)]
    assert all(n["pid"] is None for n in cluster_json(data)["nodes"])
    for b in (4, 5, 6):
        assert (data / f"broker-{b}" / "logs" / ".kafka_cleanshutdown").exists()

    second = DevProcess(data)
    dev.append(second)
    second.wait_for_line("existing cluster", 10)
    second.wait_for_line(READY, 90)
    again = cluster_json(data)
    ports = {(n["id"], n.get("port"), n.get("http_port")) for n in again["nodes"]}
    assert ports == {(n["id"], n.get("port"), n.get("http_port")) for n in desc["nodes"]}
    assert again["cluster_id"] == desc["cluster_id"]
    assert sorted(consume(bootstrap, "dev-topic", len(values))) == sorted(values)
    assert second.stop() == 0
    wait_until(lambda: not [p for p in node_pids(data) if alive(p)], 10, "all nodes to exit")
