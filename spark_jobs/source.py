"""The "kraft" data source: Spark's Kafka source, through the Python Data Source API.

    import spark_jobs
    spark_jobs.register(spark)
    df = (spark.read.format("kraft")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")
          .load())

Options and columns are those of Spark's built-in Kafka source (see `options`). Options
are checked when the DataFrame is defined (`load()`); offsets are looked up on the
driver when a query runs (`partitions()`), and each Spark partition fetches its own
offset range over the Kafka protocol (`range_reader`), decoding record batches
straight into Arrow.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_jobs.input_partition import RangePartition, read_partition
from spark_jobs.options import SourceOptions, parse_options
from spark_jobs.planner import (
    client_for,
    offset_ranges,
    resolve_offsets,
    split_ranges,
    starting_offsets,
)
from spark_jobs.range_reader import ReadSettings

FORMAT = "kraft"


def spark_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema, in its column order."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


class KraftDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        # Called by load(): a bad option fails there, as with Spark's Kafka source.
        return spark_schema(parse_options(self.options).include_headers)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KraftBatchReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from spark_jobs.stream import KraftStreamReader

        return KraftStreamReader(parse_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from spark_jobs.writer import KraftWriter

        return KraftWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_jobs.writer import KraftStreamWriter

        return KraftStreamWriter(self.options, schema)


class KraftBatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> list[InputPartition]:
        o = self.options
        with client_for(o) as client:
            tps, start = starting_offsets(client, o)
            end = resolve_offsets(
                client, tps, o.ending, starting=False, read_committed=o.read_committed
            )
        ranges = split_ranges(
            offset_ranges(tps, start, end), o.min_partitions, o.max_records_per_partition
        )
        settings = ReadSettings.of(o)
        return [RangePartition(r, settings) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition)
