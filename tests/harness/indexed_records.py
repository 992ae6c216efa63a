"""Records made from their index i (key, value, headers and CreateTime all follow from i),
produced with confluent-kafka to a `ProcCluster`: a reader can check every record it got
from its index alone.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.cluster_procs import ProcCluster

# Recent enough for the default 7-day retention (old records would be deleted under us).
BASE_TS = (int(time.time()) // 60 - 10) * 60_000


def key_of(i: int) -> bytes | None:
    return None if i % 97 == 0 else f"k{i % 1000}".encode()


def value_of(i: int) -> bytes:
    return f"value-{i:08d}-".encode() + b"x" * (i % 40)


def headers_of(i: int) -> list[tuple[str, bytes | None]]:
    return [] if i % 5 == 0 else [("i", str(i).encode()), ("odd", None if i % 2 else b"even")]


def create_topic(c: ProcCluster, name: str, partitions: int, config: dict | None = None,
                 replication: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(name, partitions, replication, config=config or {})])[
        name].result(30)


def produce(
    c: ProcCluster, topic: str, records: Iterator[tuple[int, int]], base_ts: int = BASE_TS,
    batch_bytes: int = 1_000_000,
) -> None:
    """(index, partition) pairs; key, value, headers and timestamp come from the index."""
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5, "batch.size": batch_bytes})
    failed: list[str] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(str(err))

    for i, part in records:
        while True:
            try:
                p.produce(topic, value_of(i), key_of(i), partition=part, timestamp=base_ts + i,
                          headers=headers_of(i), on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
    assert p.flush(60) == 0, "records left unacknowledged"
    assert not failed, failed[:3]
