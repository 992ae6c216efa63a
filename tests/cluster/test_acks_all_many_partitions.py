"""One acks=all message to each of 3,000 partitions (RF 3, 3 brokers, real processes)
must all be acknowledged (issue 16: at 10,000 partitions only 961 were, in 120 s).

librdkafka sends one partition per ProduceRequest and a broker answers a connection's
requests one at a time, so each message waits for a whole replication round trip of
its own: when a follower fetch cost the leader (and the follower) work for every
partition it follows, the total grew with the square of the partition count (3,000:
over 120 s before the fix, about 8 s after). The deadline here is the producer's
message timeout, generous against the fixed figure; speed is measured by
bench/scale_bench.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from tests.harness.cluster_procs import ProcCluster
from tests.harness.many_partitions import create_and_wait_for_leaders

TOPICS = 3
PARTITIONS = 1000
DEADLINE_S = 60.0  # message.timeout.ms: every message acknowledged or failed by then


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcCluster]:
    c = ProcCluster(tmp_path / "data")
    try:
        c.start(timeout_s=120)
        yield c
    finally:
        c.close()


def test_one_acks_all_message_per_partition_is_acknowledged_everywhere(
    cluster: ProcCluster,
) -> None:
    names = [f"many-{i}" for i in range(TOPICS)]
    create_and_wait_for_leaders(cluster, names, PARTITIONS, 120)

    acked: dict[tuple[str, int], int] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append((msg.topic(), msg.partition(), err))
        else:
            acked[(msg.topic(), msg.partition())] = msg.offset()

    p = Producer({
        "bootstrap.servers": cluster.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": int(DEADLINE_S * 1000),
    })  # fmt: skip
    for name in names:
        for i in range(PARTITIONS):
            p.produce(name, f"{name}/{i}".encode(), partition=i, on_delivery=on_delivery)
        p.poll(0)
    left = p.flush(DEADLINE_S + 30)
    assert left == 0, f"{left} messages neither acknowledged nor failed"
    assert not errors, f"{len(errors)} not acknowledged, e.g. {errors[:3]}\n{cluster.logs()}"
    assert len(acked) == TOPICS * PARTITIONS
    assert set(acked.values()) == {0}  # one message each, the first of its partition
