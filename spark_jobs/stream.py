"""`spark.readStream.format("kraft")`: micro-batches over Kafka-shaped offsets.

Offsets are Spark's Kafka source JSON, `{"topic": {"partition": next offset}}`. A
micro-batch reads [previous end, latest high watermark), capped by
`maxOffsetsPerTrigger` the way Spark caps it: each partition gets a share of the limit
in proportion to its backlog. Partitions that appear later (new topics matching the
pattern, added partitions) start at their earliest offset, as in Spark.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_jobs.input_partition import RangePartition, read_partition
from spark_jobs.options import EARLIEST, LATEST, TP, SourceOptions
from spark_jobs.planner import (
    client_for,
    offset_ranges,
    resolve_partitions,
    split_ranges,
    starting_offsets,
)
from spark_jobs.range_reader import ReadSettings

Offsets = dict[str, dict[str, int]]


def to_json(offsets: dict[TP, int]) -> Offsets:
    out: Offsets = {}
    for (topic, p), n in sorted(offsets.items()):
        out.setdefault(topic, {})[str(p)] = n
    return out


def from_json(doc: Offsets) -> dict[TP, int]:
    return {(t, int(p)): int(n) for t, ps in doc.items() for p, n in ps.items()}


def rate_limit(limit: int, start: dict[TP, int], until: dict[TP, int]) -> dict[TP, int]:
    """Spark's KafkaMicroBatchStream.rateLimit: shares of `limit` by backlog."""
    sizes = {tp: end - start[tp] for tp, end in until.items() if end - start[tp] > 0}
    total = sum(sizes.values())
    if total < 1:
        return dict(until)
    out = dict(until)
    for tp, size in sizes.items():
        prorate = limit * (size / total)
        step = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(until[tp], start[tp] + step)
    return out


class KraftStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self._available_now: dict[TP, int] | None = None

    def initialOffset(self) -> Offsets:
        with client_for(self.options) as client:
            _, start = starting_offsets(client, self.options)
        return to_json(start)

    def getDefaultReadLimit(self) -> ReadLimit:
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self._latest()

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self._available_now or self._latest()
        begin = self._with_new_partitions(from_json(start), latest)
        if isinstance(limit, ReadMaxRows):
            latest = rate_limit(limit.max_rows, begin, latest)
        return to_json(latest)

    def reportLatestOffset(self) -> Offsets:
        return to_json(self._latest())

    def partitions(self, start: Offsets, end: Offsets) -> list[InputPartition]:
        stop = from_json(end)
        begin = self._with_new_partitions(from_json(start), stop)
        tps = sorted(stop)
        ranges = split_ranges(
            offset_ranges(tps, begin, stop), self.options.min_partitions,
            self.options.max_records_per_partition,
        )
        settings = ReadSettings.of(self.options)
        return [RangePartition(r, settings) for r in ranges if r.size > 0]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)

    def commit(self, end: Offsets) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, no group is used."""

    def _latest(self) -> dict[TP, int]:
        o = self.options
        with client_for(o) as client:
            tps = resolve_partitions(client, o.subscription)
            return client.list_offsets(dict.fromkeys(tps, LATEST), o.read_committed)

    def _with_new_partitions(self, start: dict[TP, int], latest: dict[TP, int]) -> dict[TP, int]:
        new = [tp for tp in latest if tp not in start]
        if not new:
            return start
        with client_for(self.options) as client:
            earliest = client.list_offsets(dict.fromkeys(new, EARLIEST),
                                           self.options.read_committed)
        return {**start, **earliest}
