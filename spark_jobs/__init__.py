"""Spark data source reading topics over the Kafka protocol: `spark.read.format("kraft")`.

`register(spark)` makes the format known to a session; the options and columns are those
of Spark's built-in Kafka source.
"""

from __future__ import annotations

from typing import Any


def register(spark: Any) -> None:
    """Register the "kraft" format (batch, stream and write) with `spark`."""
    from spark_jobs.source import KraftDataSource

    spark.dataSource.register(KraftDataSource)
