"""Transactions with ordinary clients (issue 15's first acceptance point), on one real
cluster of 3 controllers and 3 brokers, each its own process.

confluent-kafka, aiokafka and kafkajs transactional producers each commit one
transaction and abort another on their own RF 3 topic. A read_committed consumer then
sees exactly the committed records, a read_uncommitted one sees both, and both see the
offsets the control batches (markers) take: one offset after each transaction, never
returned as a record, as Kafka's consumers see them.

The tests share one cluster; every wait is a condition under a deadline.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.cluster_procs import ProcCluster
from tests.harness.txn_clients import consume_all, create_topic

N = 50  # records per transaction
JS_DIR = Path(__file__).resolve().parents[1] / "js"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(tmp_path_factory.mktemp("txn-clients") / "data")
    try:
        c.start()
        yield c
    finally:
        c.close()


def expected_offsets(layout: list[tuple[str, int]]) -> dict[str, list[int]]:
    """The offsets each outcome's records take when transactions of `layout` ((outcome,
    count), in order) are written back to back on one partition: every transaction is
    followed by its marker, which takes one offset of its own."""
    offsets: dict[str, list[int]] = {"commit": [], "abort": []}
    at = 0
    for outcome, count in layout:
        offsets[outcome] += list(range(at, at + count))
        at += count + 1  # the marker
    return offsets


def check_outcome(c: ProcCluster, topic: str, committed: list[bytes], aborted: list[bytes],
                  layout: list[tuple[str, int]]) -> None:
    want = expected_offsets(layout)
    end = sum(n + 1 for _, n in layout)
    rc = consume_all(c.bootstrap, topic, "read_committed", end)
    ru = consume_all(c.bootstrap, topic, "read_uncommitted", end)
    assert [v for _, v in rc] == committed, "read_committed must see exactly the committed records"
    assert [o for o, _ in rc] == want["commit"]
    assert sorted(v for _, v in ru) == sorted(committed + aborted)
    assert sorted(o for o, _ in ru) == sorted(want["commit"] + want["abort"])


def test_confluent_kafka_commits_one_transaction_and_aborts_another(cluster: ProcCluster) -> None:
    c = cluster
    from confluent_kafka import Producer

    topic = "txn-ck"
    create_topic(c.bootstrap, topic, 1, 3)
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "ck-1",
                  "linger.ms": 5})
    p.init_transactions(30)
    committed = [b"ck-commit-%d" % i for i in range(N)]
    aborted = [b"ck-abort-%d" % i for i in range(N)]
    p.begin_transaction()
    for v in committed:
        p.produce(topic, v, key=v)
    p.commit_transaction(30)
    p.begin_transaction()
    for v in aborted:
        p.produce(topic, v, key=v)
    p.flush(30)  # the aborted records are in the log before the abort marker
    p.abort_transaction(30)
    check_outcome(c, topic, committed, aborted, [("commit", N), ("abort", N)])


def test_aiokafka_commits_one_transaction_and_aborts_another(cluster: ProcCluster) -> None:
    c = cluster
    from aiokafka import AIOKafkaProducer

    topic = "txn-aio"
    create_topic(c.bootstrap, topic, 1, 3)
    committed = [b"aio-commit-%d" % i for i in range(N)]
    aborted = [b"aio-abort-%d" % i for i in range(N)]

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=c.bootstrap, transactional_id="aio-1",
                             request_timeout_ms=30000)
        await p.start()
        try:
            async with p.transaction():
                for v in committed:
                    await p.send(topic, v, key=v)
            await p.begin_transaction()
            for v in aborted:
                await p.send(topic, v, key=v)
            await p.flush()
            await p.abort_transaction()
        finally:
            await p.stop()

    asyncio.run(asyncio.wait_for(run(), 90))
    check_outcome(c, topic, committed, aborted, [("commit", N), ("abort", N)])


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_kafkajs_commits_one_transaction_and_aborts_another(cluster: ProcCluster) -> None:
    c = cluster
    assert (JS_DIR / "node_modules" / "kafkajs").is_dir(), "run `make venv` (npm ci in tests/js)"
    topic = "txn-js"
    create_topic(c.bootstrap, topic, 1, 3)
    out = subprocess.run(
        ["node", str(JS_DIR / "txn_producer.js"), c.bootstrap, topic, "js-1", "js-commit",
         "js-abort", str(N)],
        capture_output=True, text=True, timeout=120, check=False,
    )
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    assert lines and json.loads(lines[-1])["ok"], out.stdout + out.stderr
    committed = [b"js-commit-%d" % i for i in range(N)]
    aborted = [b"js-abort-%d" % i for i in range(N)]
    check_outcome(c, topic, committed, aborted, [("commit", N), ("abort", N)])
