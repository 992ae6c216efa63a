"""A "kraft_stream_sink" format: the kraft source plus the streaming writer, for tests.

`KraftDataSource` gets its `streamWriter` from its owner; until then the streaming
writer is tested through this subclass. It is pickled by value (`register`), so the
Spark workers need not import the tests package.
"""

from __future__ import annotations

import sys
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter
from pyspark.sql.types import StructType

from spark_jobs.source import KraftDataSource

FORMAT = "kraft_stream_sink"


class KraftStreamSinkSource(KraftDataSource):
    @classmethod
    def name(cls) -> str:
        return FORMAT

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from spark_jobs.writer import KraftStreamWriter

        return KraftStreamWriter(self.options, schema)


def register(spark: Any) -> None:
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    spark.dataSource.register(KraftStreamSinkSource)
