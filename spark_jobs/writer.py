"""The "kraft" sink: Spark's Kafka sink through the Python Data Source API.

    (df.write.format("kraft")
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .option("topic", "events")       # or a `topic` column
       .mode("append").save())

Columns, as Spark's Kafka sink reads them: `value` (string or binary, required), and
optionally `key` (string or binary), `topic` (string; the `topic` option overrides it
for every row), `partition` (int), `headers` (array<struct<key:string,value:binary>>),
`timestamp` (timestamp, or double seconds). Other columns are ignored. The schema and
options are checked when the write is planned, with Spark's words, so a mistake fails
`save()` before any task runs.

Every `kafka.*` option but `kafka.bootstrap.servers` goes to the producer with the
prefix stripped: librdkafka's property names (confluent-kafka), not the Java client's.
Defaults follow the Java producer that Spark's sink uses: acks=all with idempotence,
the murmur2 partitioner (a keyed row lands where a Java producer would put it) and a
120 s delivery timeout. Each task (`sink_task.write_batches`) produces its rows, flushes
and raises unless every record was acknowledged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
from confluent_kafka import KafkaException, Producer
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import DataType, StructType

from common.client_config import translate
from common.properties import ConfigError
from spark_jobs.options import parse_bootstrap
from spark_jobs.sink_plan import SinkPlan
from spark_jobs.sink_task import write_batches

log = logging.getLogger(__name__)

# Spark's sink columns and the types each may have (DataType.simpleString(), lower case).
_STRING_OR_BINARY = ("string", "binary")
COLUMN_TYPES: dict[str, tuple[str, ...]] = {
    "topic": ("string",),
    "key": _STRING_OR_BINARY,
    "value": _STRING_OR_BINARY,
    "headers": ("array<struct<key:string,value:binary>>",),
    "partition": ("int",),
    "timestamp": ("double", "timestamp"),
}

# Java producer defaults Spark's sink gets for free; librdkafka's differ.
DEFAULT_PRODUCER = {
    "acks": "all",
    "enable.idempotence": "true",
    "partitioner": "murmur2_random",  # Java's DefaultPartitioner hash; librdkafka: crc32
    "message.timeout.ms": "120000",  # Java's delivery.timeout.ms; librdkafka: 300 s
}
# librdkafka aliases: a user value under any of these names replaces our default.
_ALIASES = {
    "acks": ("acks", "request.required.acks"),
    "message.timeout.ms": ("message.timeout.ms", "delivery.timeout.ms"),
}
# Settings the sink owns; Spark refuses the first two with these words.
_REFUSED = {
    "key.serializer": "keys are serialized with ByteArraySerializer.",
    "value.serializer": "value are serialized with ByteArraySerializer.",
    "transactional.id": "the sink does not write in transactions.",
}


class KafkaSinkError(ValueError):
    """An option or column Spark's Kafka sink would refuse; the message says which."""


def plan_sink(options: Mapping[str, str], schema: StructType) -> SinkPlan:
    """Check the options and the DataFrame's schema as Spark's Kafka sink does."""
    opts = {k.lower(): v for k, v in options.items()}
    servers = opts.get("kafka.bootstrap.servers", "").strip()
    if not servers:
        raise KafkaSinkError(
            "Option 'kafka.bootstrap.servers' must be specified for configuring Kafka producer"
        )
    parse_bootstrap(servers)
    topic = opts["topic"].strip() if "topic" in opts else None
    if topic == "":
        raise KafkaSinkError("The topic option is empty. Use the topic option for setting "
                             "a topic, or leave it out to use the 'topic' column.")
    columns = _check_schema(schema, topic)
    config = producer_config(opts)
    timeout_ms = int(config.get("delivery.timeout.ms") or config.get("message.timeout.ms")
                     or 300_000)
    # librdkafka reports every record by message.timeout.ms; the margin covers the
    # reports still on their way when it fires.
    return SinkPlan(config, topic, columns, flush_timeout_s=timeout_ms / 1000 + 10)


def _check_schema(schema: StructType, topic: str | None) -> tuple[str, ...]:
    by_name = {f.name: f.dataType for f in schema.fields}  # exact names, as Spark matches
    if topic is None and "topic" not in by_name:
        raise KafkaSinkError("topic option required when no 'topic' attribute is present. "
                             "Use the topic option for setting a topic.")
    if "value" not in by_name:
        raise KafkaSinkError("Required attribute 'value' not found")
    present = []
    for name, allowed in COLUMN_TYPES.items():
        if name not in by_name or (name == "topic" and topic is not None):
            continue  # the topic option wins over a topic column, whatever its type
        if _type_name(by_name[name]) not in allowed:
            raise KafkaSinkError(
                f"{name} attribute unsupported type {by_name[name].simpleString()}. "
                f"{name} must be a(n) {' or '.join(allowed)}"
            )
        present.append(name)
    return tuple(present)


def _type_name(t: DataType) -> str:
    # Spark compares types ignoring nullability and the case of struct field names.
    return t.simpleString().lower()


def producer_config(opts: Mapping[str, str]) -> dict[str, str]:
    """The producer's librdkafka settings: our defaults, then the user's `kafka.*`."""
    user = {k[len("kafka."):]: str(v) for k, v in opts.items() if k.startswith("kafka.")}
    for key, why in _REFUSED.items():
        if key in user:
            raise KafkaSinkError(f"Kafka option '{key}' is not supported as {why}")
    try:
        # Java names (sasl.jaas.config, ssl.truststore.location, ...) as Spark's sink
        # takes them, turned into librdkafka's; librdkafka's own names pass through.
        user = translate(user, "kafka.* options")
    except ConfigError as e:
        raise KafkaSinkError(f"Bad producer option (kafka.* option): {e}") from None
    config = {}
    for key, value in DEFAULT_PRODUCER.items():
        if not any(alias in user for alias in _ALIASES.get(key, (key,))):
            config[key] = value
    acks = user.get("acks", user.get("request.required.acks", "all")).strip().lower()
    if acks not in ("all", "-1") and "enable.idempotence" not in user:
        # Idempotence needs acks=all; a user who asks for fewer acks gets plain retries,
        # as with the Java producer.
        config["enable.idempotence"] = "false"
    config.update(user)
    _validate_with_librdkafka(config)
    return config


def _validate_with_librdkafka(config: dict[str, str]) -> None:
    """Let librdkafka judge names and values now, on the driver, not in every task."""
    # Files named by *.location (TLS keys, CAs) need only exist where the tasks run.
    trial = {k: v for k, v in config.items()
             if k != "bootstrap.servers" and not k.endswith(".location")}
    trial["log_level"] = "0"  # quiet: no brokers are configured, so none is contacted
    try:
        Producer(trial)
    except KafkaException as e:
        raise KafkaSinkError(f"Bad producer option (kafka.* option): {e.args[0].str()}") from e


@dataclass
class KraftCommitMessage(WriterCommitMessage):
    """One task's result: every one of `rows` records was acknowledged."""

    rows: int
    partition_id: int = -1


def _task_partition_id() -> int:
    try:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return ctx.partitionId() if ctx is not None else -1
    except Exception:  # noqa: BLE001 - only a label for the commit message
        return -1


class _SinkWrite:
    """The write shared by the batch and the streaming writer."""

    plan: SinkPlan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        rows = write_batches(self.plan, iterator)
        return KraftCommitMessage(rows, _task_partition_id())


class KraftWriter(_SinkWrite, DataSourceArrowWriter):
    """Batch write: `df.write.format("kraft")...save()`."""

    def __init__(self, options: Mapping[str, str], schema: StructType,
                 overwrite: bool = False) -> None:
        if overwrite:
            raise KafkaSinkError("Save mode Overwrite not allowed for Kafka. Allowed save "
                                 "modes are Append and ErrorIfExists (default).")
        self.plan = plan_sink(options, schema)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        # Every task already flushed and checked its records; Kafka has nothing to commit.
        rows = sum(m.rows for m in messages if isinstance(m, KraftCommitMessage))
        log.info("kraft sink: %d records written by %d tasks", rows, len(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # Records of the tasks that succeeded stay in Kafka: like Spark's Kafka sink,
        # the write is at-least-once, not atomic.
        log.warning("kraft sink: write aborted; records already acknowledged stay in Kafka")


class KraftStreamWriter(_SinkWrite, DataSourceStreamArrowWriter):
    """Streaming write: `df.writeStream.format("kraft")...start()`, any output mode."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.plan = plan_sink(options, schema)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # the tasks flushed; a re-run micro-batch writes again (at-least-once)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass
