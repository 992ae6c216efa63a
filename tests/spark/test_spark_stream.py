"""`spark.readStream.format("kraft")`: micro-batches over a live topic (real processes).

Each micro-batch is collected by a foreachBatch sink; the checks are that every record
arrives exactly once across batches, that data produced between batches arrives in a
later batch, that maxOffsetsPerTrigger caps each batch, and that a query restarted
from its checkpoint goes on where it stopped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.harness.cluster_procs import ProcCluster
from tests.harness.indexed_records import create_topic, produce, value_of


class Batches:
    """foreachBatch sink: batch id -> the (partition, offset, value) rows it held."""

    def __init__(self) -> None:
        self.by_id: dict[int, list[tuple[int, int, bytes]]] = {}

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        self.by_id[batch_id] = [(r["partition"], r["offset"], bytes(r["value"])) for r in rows]

    def values(self) -> list[bytes]:
        return [v for rows in self.by_id.values() for _, _, v in rows]

    def nonempty(self) -> list[int]:
        return sorted(b for b, rows in self.by_id.items() if rows)


def stream(spark: Any, c: ProcCluster, topic: str, **options: str) -> Any:
    reader = (spark.readStream.format("kraft").option("kafka.bootstrap.servers", c.bootstrap)
              .option("subscribe", topic))
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def test_two_micro_batches_with_new_data_between_return_each_message_once(
    spark: Any, spark_cluster: ProcCluster, tmp_path: Path
) -> None:
    c = spark_cluster
    create_topic(c, "live", 3)
    produce(c, "live", ((i, i % 3) for i in range(300)))
    sink = Batches()
    df = stream(spark, c, "live", startingOffsets="earliest")
    assert [f.name for f in df.schema.fields][:7] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(processingTime="100 milliseconds").start())
    try:
        q.processAllAvailable()  # returns once everything available has been processed
        first = sink.nonempty()
        assert sorted(sink.values()) == sorted(value_of(i) for i in range(300))
        produce(c, "live", ((i, i % 3) for i in range(300, 500)))
        q.processAllAvailable()
    finally:
        q.stop()
    assert q.exception() is None
    later = [b for b in sink.nonempty() if b > max(first)]
    assert later, "the new records must come in a later micro-batch"
    assert sorted(v for b in later for _, _, v in sink.by_id[b]) == sorted(
        value_of(i) for i in range(300, 500))
    assert sorted(sink.values()) == sorted(value_of(i) for i in range(500))  # each once

    # A new query from the same checkpoint reads only what came after.
    produce(c, "live", ((i, i % 3) for i in range(500, 550)))
    again = Batches()
    q2 = (stream(spark, c, "live").writeStream.foreachBatch(again)
          .option("checkpointLocation", str(tmp_path / "cp")).trigger(availableNow=True).start())
    q2.awaitTermination(120)
    assert q2.exception() is None
    assert sorted(again.values()) == sorted(value_of(i) for i in range(500, 550))


def test_max_offsets_per_trigger_caps_each_micro_batch(
    spark: Any, spark_cluster: ProcCluster, tmp_path: Path
) -> None:
    c = spark_cluster
    create_topic(c, "capped", 3)
    produce(c, "capped", ((i, i % 3) for i in range(600)))
    sink = Batches()
    q = (stream(spark, c, "capped", startingOffsets="earliest", maxOffsetsPerTrigger="100")
         .writeStream.foreachBatch(sink).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    q.awaitTermination(120)
    assert q.exception() is None
    sizes = [len(sink.by_id[b]) for b in sink.nonempty()]
    # Spark's proration floors each partition's share: 3 x floor(33.3) = 99 per batch.
    assert sizes[:6] == [99] * 6 and all(n <= 100 for n in sizes), sizes
    got = [(p, o) for rows in sink.by_id.values() for p, o, _ in rows]
    assert sorted(got) == sorted((p, o) for p in range(3) for o in range(200))
