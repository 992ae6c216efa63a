"""The `kraft` source and transactions (issue 15), on the Spark tests' real cluster.

A confluent-kafka transactional producer writes, on 2 partitions: a committed
transaction, an aborted one, a committed one, and finally one left open. Then:
- `kafka.isolation.level=read_committed` returns exactly the committed records, no
  control batch and nothing of the aborted or open transactions, with the offsets the
  records have (the markers' offsets are simply absent), and no data-loss error;
- read_uncommitted (the default) returns every record, the open ones included;
- a read_committed stream stops at the last stable offset: it holds the committed
  records only, and gets the open transaction's records once it commits.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness.cluster_procs import ProcCluster
from tests.harness.txn_clients import create_topic

TOPIC = "spark-txn"
PARTITIONS = 2
N = 40  # records per partition per transaction


def values(prefix: str) -> list[bytes]:
    return [b"%s-%d-%d" % (prefix.encode(), p, i) for p in range(PARTITIONS) for i in range(N)]


def write(producer: Any, prefix: str) -> None:
    for p in range(PARTITIONS):
        for i in range(N):
            producer.produce(TOPIC, b"%s-%d-%d" % (prefix.encode(), p, i), partition=p)


def load(spark: Any, c: ProcCluster, **options: str) -> list[Any]:
    reader = (spark.read.format("kraft").option("kafka.bootstrap.servers", c.bootstrap)
              .option("subscribe", TOPIC))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load().select("partition", "offset", "value").collect()


def test_read_committed_returns_exactly_the_committed_records(
    spark: Any, spark_cluster: ProcCluster, tmp_path: Path
) -> None:
    from confluent_kafka import Producer

    c = spark_cluster
    create_topic(c.bootstrap, TOPIC, PARTITIONS, 3)
    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": "spark-txn-1"})
    p.init_transactions(30)
    for prefix, commit in (("c1", True), ("a1", False), ("c2", True)):
        p.begin_transaction()
        write(p, prefix)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
    p.begin_transaction()
    write(p, "open")
    p.flush(30)  # in the log, not committed: above the LSO

    committed = load(spark, c, **{"kafka.isolation.level": "read_committed"})
    assert sorted(bytes(r["value"]) for r in committed) == sorted(values("c1") + values("c2"))
    for part in range(PARTITIONS):  # c1 at 0..N-1, its marker N, a1 N+1..2N, marker, c2 ...
        offsets = sorted(r["offset"] for r in committed if r["partition"] == part)
        assert offsets == list(range(N)) + list(range(2 * N + 2, 3 * N + 2))
    everything = load(spark, c)
    assert sorted(bytes(r["value"]) for r in everything) == sorted(
        values("c1") + values("a1") + values("c2") + values("open"))

    # A read_committed stream stops at the LSO, then moves on when the transaction commits.
    seen: list[bytes] = []
    q = (spark.readStream.format("kraft").option("kafka.bootstrap.servers", c.bootstrap)
         .option("subscribe", TOPIC).option("startingOffsets", "earliest")
         .option("kafka.isolation.level", "read_committed").load()
         .writeStream.foreachBatch(
             lambda df, _id: seen.extend(bytes(r["value"]) for r in df.select("value").collect()))
         .option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        q.processAllAvailable()
        assert sorted(seen) == sorted(values("c1") + values("c2"))
        p.commit_transaction(30)
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    assert sorted(seen) == sorted(values("c1") + values("c2") + values("open"))
