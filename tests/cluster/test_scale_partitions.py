"""10,000 partitions on a real cluster (3 controllers, 3 brokers, separate processes):
one CreateTopics of 10 topics x 1,000 partitions, RF 3, then every broker must name a
leader for every partition in its Metadata answers, under a deadline.

Marked slow (minutes on a 2-core machine): `make test-long` runs it, `make test` does
not. Speed is measured by bench/scale_bench.py, which this shares its probes with; the
deadline here only bounds a hang.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.cluster_procs import ProcCluster
from tests.harness.many_partitions import create_and_wait_for_leaders

TOPICS = 10
PARTITIONS = 1000
DEADLINE_S = 600.0

pytestmark = pytest.mark.slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcCluster]:
    c = ProcCluster(tmp_path / "data")
    try:
        c.start(timeout_s=120)
        yield c
    finally:
        c.close()


def test_ten_thousand_partitions_get_leaders_on_every_broker(cluster: ProcCluster) -> None:
    names = [f"scale-{i:02d}" for i in range(TOPICS)]
    brokers = create_and_wait_for_leaders(cluster, names, PARTITIONS, DEADLINE_S)
    # The controllers agree: every partition has a leader and 3 replicas.
    for name in names:
        parts = cluster.partitions(name)
        assert parts is not None and len(parts) == PARTITIONS, name
        assert all(p["leader"] in brokers and len(p["replicas"]) == 3 for p in parts.values())
