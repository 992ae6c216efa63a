"""One Spark input partition of the "kraft" source: an offset range and how to read it.

Shared by the batch reader (`source`) and the stream reader (`stream`), so neither has
to import the other. The partition is pickled to the executors, which read it with
`read_partition`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import InputPartition

from spark_jobs.planner import OffsetRange
from spark_jobs.range_reader import ReadSettings, read_range


class RangePartition(InputPartition):
    """One Spark partition: an offset range and what the executor needs to read it."""

    def __init__(self, offset_range: OffsetRange, settings: ReadSettings) -> None:
        super().__init__(offset_range)
        self.offset_range = offset_range
        self.settings = settings


def read_partition(partition: InputPartition) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, RangePartition):
        return  # a plan with no ranges: Spark still runs one task, with a placeholder
    yield from read_range(partition.offset_range, partition.settings)
