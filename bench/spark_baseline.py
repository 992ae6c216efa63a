"""The Spark bench's yardstick: a Python data source whose rows are already in memory.

Format "arrow_memory" yields, per Spark partition, ready-made Arrow batches of 8,192
rows with the kraft source's columns (key null, a 100-byte value, topic, partition,
offset, timestamp, timestampType). The batches are built from numpy buffers before
the first is yielded, with no per-row Python, so its rate is what Spark itself costs
for these rows through the Python Data Source API; the kraft source's rate is set
beside it. Lives in `bench/` so workers import it by module name (PYTHONPATH).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from spark_jobs.arrow_records import arrow_schema
from spark_jobs.source import spark_schema

ROWS_PER_BATCH = 8192


class MemoryPartition(InputPartition):
    def __init__(self, partition: int, rows: int, value_bytes: int, topic: str) -> None:
        super().__init__(partition)
        self.partition, self.rows, self.value_bytes, self.topic = (
            partition, rows, value_bytes, topic)


def memory_batches(p: MemoryPartition) -> list[pa.RecordBatch]:
    schema = arrow_schema(include_headers=False)
    values = pa.py_buffer(b"v" * (p.value_bytes * ROWS_PER_BATCH))
    out = []
    for start in range(0, p.rows, ROWS_PER_BATCH):
        n = min(ROWS_PER_BATCH, p.rows - start)
        offsets = pa.py_buffer(np.arange(0, p.value_bytes * (n + 1), p.value_bytes, np.int32))
        out.append(pa.RecordBatch.from_arrays(
            [
                pa.nulls(n, pa.binary()),
                pa.Array.from_buffers(pa.binary(), n, [None, offsets, values]),
                pa.repeat(pa.scalar(p.topic, pa.string()), n),
                pa.array(np.full(n, p.partition, np.int32)),
                pa.array(np.arange(start, start + n, dtype=np.int64)),
                pa.array(np.full(n, 1_700_000_000_000_000, np.int64)).cast(schema.field(5).type),
                pa.array(np.zeros(n, np.int32)),
            ],
            schema=schema,
        ))
    return out


class MemoryReader(DataSourceReader):
    def __init__(self, partitions: int, rows: int, value_bytes: int, topic: str) -> None:
        self.parts, self.rows, self.value_bytes, self.topic = partitions, rows, value_bytes, topic

    def partitions(self) -> list[InputPartition]:
        share = [self.rows // self.parts + (i < self.rows % self.parts) for i in range(self.parts)]
        return [MemoryPartition(i, n, self.value_bytes, self.topic) for i, n in enumerate(share)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MemoryPartition)
        yield from memory_batches(partition)


class ArrowMemorySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "arrow_memory"

    def schema(self) -> StructType:
        return spark_schema(include_headers=False)

    def reader(self, schema: StructType) -> DataSourceReader:
        o = self.options
        return MemoryReader(int(o.get("partitions", 4)), int(o.get("rows", 1_000_000)),
                            int(o.get("valueBytes", 100)), o.get("topic", "bench"))
