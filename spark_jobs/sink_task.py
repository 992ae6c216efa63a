"""Executor side of the "kraft" sink: one task's Arrow batches -> Kafka records, exactly.

A task either gets every one of its records acknowledged (with acks=all by default) or
raises; it never returns after a partial write. As in Spark's Kafka sink, it stops
sending at the first failed delivery, and the failure fails the task (records already
acknowledged stay: the sink is at-least-once).

The producer is made here, in the task: the writer object is pickled to the executors,
so it carries only plain settings (`SinkPlan`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import KafkaError, Message, Producer

from spark_jobs.sink_plan import SinkPlan

POLL_S = 0.1  # how long to serve delivery reports while the local queue is full
MAX_ERRORS_SHOWN = 3


class KafkaWriteError(RuntimeError):
    """Records of this task were not acknowledged by Kafka."""


class _Deliveries:
    """Delivery reports of failed records (librdkafka reports only errors here)."""

    def __init__(self) -> None:
        self.failed = 0
        self.errors: list[str] = []
        self.fatal: str | None = None

    def on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is None:
            return
        self.failed += 1
        if len(self.errors) < MAX_ERRORS_SHOWN:
            self.errors.append(f"{msg.topic()} [partition {msg.partition()}]: {err.str()} "
                               f"({err.name()})")

    def on_error(self, err: KafkaError) -> None:
        # Non-fatal errors (a broker connection lost) are retried by librdkafka until
        # the delivery timeout; a fatal one (idempotence broken) ends the producer.
        if err.fatal() and self.fatal is None:
            self.fatal = f"{err.str()} ({err.name()})"

    def check(self, sent: int) -> None:
        if self.fatal is not None:
            raise KafkaWriteError(f"Writing to Kafka failed: fatal producer error: {self.fatal}")
        if self.failed:
            raise KafkaWriteError(
                f"Writing to Kafka failed: {self.failed} of {sent} records were not "
                f"delivered; first errors: {'; '.join(self.errors)}"
            )


def write_batches(plan: SinkPlan, batches: Iterator[pa.RecordBatch]) -> int:
    """Produce every row of `batches`; return the row count once all are acknowledged."""
    reports = _Deliveries()
    producer = Producer({
        **plan.producer_config,
        "delivery.report.only.error": True,  # a report per record would cost a callback each
        "on_delivery": reports.on_delivery,
        "error_cb": reports.on_error,
    })
    sent = 0
    done = False
    try:
        for batch in batches:
            sent += _produce_batch(producer, plan, batch, reports, sent)
            producer.poll(0)  # serve reports, so a failure stops the task early
            reports.check(sent)
        deadline = time.monotonic() + plan.flush_timeout_s
        while len(producer) and time.monotonic() < deadline:
            producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
            reports.check(sent)
        if len(producer):
            raise KafkaWriteError(
                f"Writing to Kafka failed: {len(producer)} of {sent} records still "
                f"unacknowledged after {plan.flush_timeout_s:g} s"
            )
        reports.check(sent)
        done = True
        return sent
    finally:
        if not done:
            # Drop what is still queued so that the producer's teardown does not block
            # on records whose task has failed anyway.
            producer.purge()
            producer.flush(0)


def _produce_batch(producer: Producer, plan: SinkPlan, batch: pa.RecordBatch,
                   reports: _Deliveries, sent_before: int) -> int:
    cols = _columns(plan, batch)
    n = batch.num_rows
    topics = cols.get("topic")
    keys, values = cols.get("key"), cols["value"]
    parts, headers, stamps = cols.get("partition"), cols.get("headers"), cols.get("timestamp")
    for i in range(n):
        topic = plan.topic if topics is None else topics[i]
        if topic is None:
            raise KafkaWriteError("null topic present in the data. Use the topic option for "
                                  "setting a default topic.")
        kwargs: dict[str, Any] = {"value": values[i]}
        if keys is not None:
            kwargs["key"] = keys[i]
        if parts is not None and parts[i] is not None:
            if parts[i] < 0:
                raise KafkaWriteError(f"Invalid partition given with record: {parts[i]} "
                                      f"(topic {topic!r})")
            kwargs["partition"] = parts[i]
        if headers is not None and headers[i] is not None:
            kwargs["headers"] = _headers(headers[i])
        if stamps is not None and stamps[i] is not None:
            kwargs["timestamp"] = stamps[i]
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                # The local queue is full (queue.buffering.max.messages): wait for
                # deliveries to make room, and stop if they report failures.
                producer.poll(POLL_S)
                reports.check(sent_before + i)
    return n


def _columns(plan: SinkPlan, batch: pa.RecordBatch) -> dict[str, list[Any]]:
    """The sink columns of `batch` as Python lists, keys and values as bytes."""
    out: dict[str, list[Any]] = {}
    for name in plan.columns:
        col = batch.column(batch.schema.get_field_index(name))
        if name in ("key", "value"):
            col = _as_binary(col)
        elif name == "timestamp":
            col = _epoch_ms(col)
        out[name] = col.to_pylist()
    return out


def _as_binary(col: pa.Array) -> pa.Array:
    # A string column is sent as its UTF-8 bytes (Spark casts string to binary).
    if pa.types.is_string(col.type):
        return col.cast(pa.binary())
    if pa.types.is_large_string(col.type):
        return col.cast(pa.large_binary())
    return col


def _epoch_ms(col: pa.Array) -> pa.Array:
    """Record timestamps in ms, as Spark's sink derives them (double: seconds)."""
    if pa.types.is_timestamp(col.type):
        micros = col.cast(pa.timestamp("us", tz=col.type.tz)).cast(pa.int64())
    else:
        finite = pc.is_finite(col)  # Spark casts NaN and infinities to a null timestamp
        micros = pc.if_else(finite, pc.trunc(pc.multiply(col, 1e6)), None).cast(pa.int64())
    return pc.divide(micros, 1000)  # integer division, truncating as Java's does


def _headers(items: list[dict[str, Any]]) -> list[tuple[str, bytes | None]]:
    out = []
    for h in items:
        if h is None or h.get("key") is None:
            raise KafkaWriteError("a header with a null key is present in the data: every "
                                  "header needs a string key")
        out.append((h["key"], h.get("value")))
    return out
