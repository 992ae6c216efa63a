"""`kafka.isolation.level` against the Spark tests' cluster: a transactional producer
commits, aborts and commits again, then leaves a transaction open; read_committed
returns exactly the committed records and ends at the last stable offset (before the
open transaction, without waiting for it); read_uncommitted returns every data record.
Markers are never rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Producer

from spark_jobs.kafka_client import KafkaClient
from spark_jobs.options import LATEST
from spark_jobs.planner import OffsetRange
from spark_jobs.range_reader import ReadSettings, read_range
from tests.harness.cluster_procs import ProcCluster
from tests.harness.indexed_records import create_topic

TOPIC = "txn-events"
PARTITIONS = 3


def _txn(p: Any, values: list[bytes], commit: bool) -> None:
    p.begin_transaction()
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, partition=i % PARTITIONS)
    assert p.flush(30) == 0  # in the log before the marker (abort would purge them)
    if commit:
        p.commit_transaction(30)
    else:
        p.abort_transaction(30)


@pytest.fixture(scope="module")
def txn_topic(
    spark_cluster: ProcCluster,
) -> Iterator[tuple[ProcCluster, list[bytes], list[bytes]]]:
    c = spark_cluster
    create_topic(c, TOPIC, PARTITIONS)
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "spark-txn",
                  "transaction.timeout.ms": 600_000})  # fmt: skip
    p.init_transactions(30)
    committed = [f"c{i}".encode() for i in range(30)]
    aborted = [f"a{i}".encode() for i in range(30)]
    _txn(p, committed[:15], commit=True)
    _txn(p, aborted, commit=False)
    _txn(p, committed[15:], commit=True)
    # left open: read_committed ends before it, read_uncommitted sees it
    p.begin_transaction()
    for i in range(PARTITIONS):
        p.produce(TOPIC, value=b"open", partition=i)
    assert p.flush(30) == 0
    yield c, committed, aborted
    p.abort_transaction(30)


def _hosts(c: ProcCluster) -> list[tuple[str, int]]:
    return [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in c.bootstrap.split(","))]


def _settings(c: ProcCluster, read_committed: bool) -> ReadSettings:
    return ReadSettings(_hosts(c), "t", 30_000, 60_000, 1 << 20, read_committed,
                        True, False)  # fmt: skip


def _values(c: ProcCluster, read_committed: bool) -> list[bytes]:
    with KafkaClient(_hosts(c), "t", 30_000, 60_000) as client:
        tps = [(TOPIC, p) for p in range(PARTITIONS)]
        ends = client.list_offsets(dict.fromkeys(tps, LATEST), read_committed)
    out: list[bytes] = []
    for (t, p), end in ends.items():
        for batch in read_range(OffsetRange(t, p, 0, end), _settings(c, read_committed)):
            out += batch.column("value").to_pylist()
    return out


def test_read_range_reads_exactly_the_committed_records(txn_topic: Any) -> None:
    c, committed, aborted = txn_topic
    assert sorted(_values(c, read_committed=True)) == sorted(committed)
    assert sorted(_values(c, read_committed=False)) == sorted(
        committed + aborted + [b"open"] * PARTITIONS
    )


def test_the_stream_reader_stops_at_the_last_stable_offset(txn_topic: Any) -> None:
    """Each micro-batch's end under read_committed is the LSO: the open transaction's
    first offset, one below the high watermark (its record is each partition's last)."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from spark_jobs.options import parse_options
    from spark_jobs.stream import KraftStreamReader

    c, _, _ = txn_topic

    def latest(level: str) -> dict[str, int]:
        opts = {"kafka.bootstrap.servers": c.bootstrap, "subscribe": TOPIC,
                "startingOffsets": "earliest", "kafka.isolation.level": level}  # fmt: skip
        reader = KraftStreamReader(parse_options(opts, streaming=True))
        start = reader.initialOffset()
        return reader.latestOffset(start, ReadAllAvailable())[TOPIC]

    stable, high = latest("read_committed"), latest("read_uncommitted")
    assert {p: high[p] - 1 for p in high} == stable
