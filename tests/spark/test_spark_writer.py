"""The "kraft" sink against 3 controllers + 3 brokers (processes), read back independently.

Rows written with `df.write.format("kraft")` are read back with confluent-kafka and
compared exactly: keys, values, headers, partitions, timestamps. Bad options and schemas
fail `save()` with Spark's Kafka sink wording; a record Kafka does not acknowledge fails
the write instead of being dropped.
"""

from __future__ import annotations

import itertools
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka.partitioner.default import murmur2
from pyspark.errors import PySparkException
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from spark_jobs.sink_task import KafkaWriteError, write_batches
from spark_jobs.writer import KafkaSinkError, KraftWriter, plan_sink
from tests.harness.cluster_procs import ProcCluster
from tests.harness.kafka_records import Rec, create_topic, read_topic

HEADERS = ArrayType(StructType([StructField("key", StringType()),
                                StructField("value", BinaryType())]))
HEADERS_DDL = "array<struct<key:string,value:binary>>"
_topics = itertools.count()


@pytest.fixture
def cluster(spark_cluster: ProcCluster) -> ProcCluster:
    """The Spark tests' shared cluster (conftest); this module's topics are sink-*."""
    return spark_cluster


def new_topic(c: ProcCluster, partitions: int = 3) -> str:
    topic = f"sink-{next(_topics)}"
    create_topic(c.bootstrap, topic, partitions)
    return topic


def schema(**cols: DataType) -> StructType:
    return StructType([StructField(n, t) for n, t in cols.items()])


def save(df: Any, bootstrap: str, mode: str = "append", **options: str) -> None:
    w = df.write.format("kraft").option("kafka.bootstrap.servers", bootstrap).mode(mode)
    for k, v in options.items():
        w = w.option(k, v)
    w.save()


def contents(recs: list[Rec]) -> list[tuple[Any, ...]]:
    """Per partition, what was written (order across Spark tasks is not defined)."""
    return sorted(((r.partition, r.key, r.value, r.headers) for r in recs), key=repr)


# -- options and schema, checked when the write is planned -----------------------------

GOOD = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}


@pytest.mark.parametrize(("options", "cols", "message"), [
    ({"topic": "t"}, {"value": BinaryType()},
     "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"),
    ({"kafka.bootstrap.servers": "h:1"}, {"value": BinaryType()},
     "topic option required when no 'topic' attribute is present. "
     "Use the topic option for setting a topic."),
    (GOOD, {"key": BinaryType()}, "Required attribute 'value' not found"),
    (GOOD, {"value": IntegerType()},
     "value attribute unsupported type int. value must be a(n) string or binary"),
    (GOOD, {"value": StringType(), "key": LongType()},
     "key attribute unsupported type bigint. key must be a(n) string or binary"),
    (GOOD, {"value": StringType(), "partition": LongType()},
     "partition attribute unsupported type bigint. partition must be a(n) int"),
    (GOOD, {"value": StringType(), "headers": ArrayType(StringType())},
     f"headers attribute unsupported type array<string>. headers must be a(n) {HEADERS_DDL}"),
    ({"kafka.bootstrap.servers": "h:1"}, {"value": StringType(), "topic": BinaryType()},
     "topic attribute unsupported type binary. topic must be a(n) string"),
    ({**GOOD, "kafka.key.serializer": "x"}, {"value": StringType()},
     "Kafka option 'key.serializer' is not supported as keys are serialized with "
     "ByteArraySerializer."),
    ({**GOOD, "kafka.value.serializer": "x"}, {"value": StringType()},
     "Kafka option 'value.serializer' is not supported as value are serialized with "
     "ByteArraySerializer."),
    ({**GOOD, "kafka.max.block.ms": "5"}, {"value": StringType()},
     'No such configuration property: "max.block.ms"'),
    ({**GOOD, "kafka.acks": "1", "kafka.enable.idempotence": "true"}, {"value": StringType()},
     "`acks` must be set to `all` when `enable.idempotence` is true"),
    ({**GOOD, "kafka.bootstrap.servers": "nohostport"}, {"value": StringType()},
     "'nohostport' is not host:port"),
])
def test_plan_refuses_what_sparks_sink_refuses(
    options: dict[str, str], cols: dict[str, DataType], message: str
) -> None:
    with pytest.raises(ValueError) as e:
        plan_sink(options, schema(**cols))
    assert message in str(e.value)


def test_overwrite_mode_is_refused() -> None:
    with pytest.raises(KafkaSinkError, match="Save mode Overwrite not allowed for Kafka"):
        KraftWriter(GOOD, schema(value=StringType()), overwrite=True)


def test_producer_defaults_follow_the_java_producer_and_yield_to_the_user() -> None:
    plan = plan_sink({**GOOD, "Kafka.Linger.MS": "7"}, schema(value=StringType()))
    assert plan.producer_config == {
        "acks": "all", "enable.idempotence": "true", "partitioner": "murmur2_random",
        "message.timeout.ms": "120000", "bootstrap.servers": "127.0.0.1:9092", "linger.ms": "7",
    }
    assert plan.topic == "t" and plan.columns == ("value",) and plan.flush_timeout_s == 130
    plan = plan_sink({**GOOD, "kafka.acks": "1", "kafka.delivery.timeout.ms": "5000"},
                     schema(value=StringType(), topic=IntegerType()))
    assert plan.producer_config == {
        "acks": "1", "enable.idempotence": "false", "partitioner": "murmur2_random",
        "bootstrap.servers": "127.0.0.1:9092", "delivery.timeout.ms": "5000",
    }
    assert plan.columns == ("value",) and plan.flush_timeout_s == 15  # option beats column


# -- writes, read back ------------------------------------------------------------------

def test_write_by_topic_option_exact_contents(spark: Any, cluster: ProcCluster) -> None:
    topic = new_topic(cluster)
    rows = [
        ("k0", b"v0", 0, [("h1", b"a"), ("h2", None)], "ignored"),
        ("k1", b"", 1, [], "ignored"),
        (None, b"no key", 2, None, None),
        ("ключ", None, 1, [("dup", b"1"), ("dup", b"2")], "ignored"),  # null value: tombstone
    ] + [(f"k{i}", f"v{i}".encode(), i % 3, None, "ignored") for i in range(4, 40)]
    ddl = f"key string, value binary, partition int, headers {HEADERS_DDL}, topic string"
    save(spark.createDataFrame(rows, ddl).repartition(2), cluster.bootstrap, topic=topic)

    want = sorted((
        (p, k.encode() if k is not None else None, v, tuple(h or ()))
        for k, v, p, h, _ in rows
    ), key=repr)
    assert contents(read_topic(cluster.bootstrap, topic)) == want


def test_write_by_topic_column_keys_land_where_java_puts_them(
    spark: Any, cluster: ProcCluster
) -> None:
    t1, t2 = new_topic(cluster, 3), new_topic(cluster, 5)
    rows = [(t1 if i % 2 else t2, f"key-{i}".encode(), f"value-{i}") for i in range(60)]
    save(spark.createDataFrame(rows, "topic string, key binary, value string"),
         cluster.bootstrap)
    for topic, n in ((t1, 3), (t2, 5)):
        # The Java producer's default partitioner: murmur2 of the key, positive, mod n.
        want = sorted(((murmur2(k) & 0x7FFFFFFF) % n, k, v.encode(), ())
                      for t, k, v in rows if t == topic)
        assert contents(read_topic(cluster.bootstrap, topic)) == want


def test_timestamp_column_sets_the_record_timestamp(spark: Any, cluster: ProcCluster) -> None:
    topic = new_topic(cluster, 1)
    stamps = [datetime(2024, 5, 1, 12, 0, i, 123456, tzinfo=UTC) for i in range(5)]
    rows = [(f"v{i}", ts) for i, ts in enumerate(stamps)]
    save(spark.createDataFrame(rows, "value string, timestamp timestamp").coalesce(1),
         cluster.bootstrap, topic=topic)
    got = [(r.value, r.timestamp_ms) for r in read_topic(cluster.bootstrap, topic)]
    assert got == [(v.encode(), int(ts.timestamp() * 1000)) for v, ts in rows]


# -- failures reach save() --------------------------------------------------------------

def test_bad_schema_fails_save_with_sparks_words(spark: Any, cluster: ProcCluster) -> None:
    df = spark.createDataFrame([(1, "x")], "value int, key string")
    with pytest.raises(PySparkException) as e:
        save(df, cluster.bootstrap)
    assert "topic option required when no 'topic' attribute is present" in str(e.value)
    with pytest.raises(PySparkException) as e:
        save(df, cluster.bootstrap, topic="t")
    assert "value attribute unsupported type int. value must be a(n) string or binary" in str(
        e.value)


def test_overwrite_mode_fails_save(spark: Any, cluster: ProcCluster) -> None:
    topic = new_topic(cluster, 1)
    with pytest.raises(PySparkException) as e:
        save(spark.createDataFrame([("x",)], "value string"), cluster.bootstrap,
             mode="overwrite", topic=topic)
    assert ("Save mode Overwrite not allowed for Kafka. Allowed save modes are Append and "
            "ErrorIfExists (default).") in str(e.value)
    assert read_topic(cluster.bootstrap, topic) == []  # nothing was written


def test_undelivered_record_fails_the_write(spark: Any, cluster: ProcCluster) -> None:
    topic = new_topic(cluster, 3)
    df = spark.createDataFrame([("ok", 0), ("nowhere", 99)], "value string, partition int")
    with pytest.raises(PySparkException) as e:
        save(df.coalesce(1), cluster.bootstrap, topic=topic)
    assert "1 of 2 records were not delivered" in str(e.value)
    assert f"{topic} [partition 99]: Local: Unknown partition" in str(e.value)


def test_null_topic_row_fails_the_write(spark: Any, cluster: ProcCluster) -> None:
    df = spark.createDataFrame([("a", new_topic(cluster)), ("b", None)],
                               "value string, topic string")
    with pytest.raises(PySparkException) as e:
        save(df, cluster.bootstrap)
    assert "null topic present in the data" in str(e.value)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_cluster_raises_after_the_delivery_timeout() -> None:
    opts = {"kafka.bootstrap.servers": f"127.0.0.1:{free_port()}", "topic": "t",
            "kafka.message.timeout.ms": "1500", "kafka.log_level": "0"}
    plan = plan_sink(opts, schema(value=StringType()))
    batch = pa.record_batch({"value": pa.array(["a", "b"])})
    with pytest.raises(KafkaWriteError, match=r"2 of 2 records were not delivered.*_MSG_TIMED_OUT"):
        write_batches(plan, iter([batch]))


# -- streaming ----------------------------------------------------------------------------

def test_stream_writer_writes_each_micro_batch(
    spark: Any, cluster: ProcCluster, tmp_path: Path
) -> None:
    topic = new_topic(cluster, 2)
    src = tmp_path / "in"
    rows = [(f"k{i}", f"v{i}", i % 2) for i in range(20)]
    spark.createDataFrame(rows, "key string, value string, partition int").write.parquet(
        str(src))
    query = (
        spark.readStream.schema("key string, value string, partition int").parquet(str(src))
        .writeStream.format("kraft")
        .option("kafka.bootstrap.servers", cluster.bootstrap).option("topic", topic)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True).start()
    )
    assert query.awaitTermination(60), "the availableNow query did not finish within 60 s"
    assert query.exception() is None
    want = sorted((p, k.encode(), v.encode(), ()) for k, v, p in rows)
    assert contents(read_topic(cluster.bootstrap, topic)) == want
