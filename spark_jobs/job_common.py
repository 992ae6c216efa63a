"""What the example jobs share: the Spark session, the source arguments, the read."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import spark_jobs


def local_session(app_name: str, shuffle_partitions: int = 4) -> Any:
    """A local[2] session on 127.0.0.1 with the "kraft" format registered: the jobs',
    the tests' and the bench's. UI off, timestamps in UTC."""
    # Before the JVM starts: the workers must run this interpreter, which has the
    # project's packages (spark_jobs must unpickle there).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")  # timestamps printed and kept in UTC
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_jobs.register(spark)
    return spark


@contextmanager
def job_session(app_name: str) -> Iterator[Any]:
    """`local_session`, stopped at the end if we started it.

    A session already active in this process (a test's, a notebook's) is used as it is
    and left running: stopping it would pull it from under its owner.
    """
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        spark_jobs.register(active)
        yield active
        return
    spark = local_session(app_name)
    try:
        yield spark
    finally:
        spark.stop()


@contextmanager
def parquet_timestamps_as_micros(spark: Any) -> Iterator[None]:
    """Write Parquet timestamps as TIMESTAMP_MICROS (UTC-adjusted), not Spark's INT96.

    INT96 is deprecated, and readers such as pyarrow see it as a timestamp without a
    time zone. Set for the write only: the session may belong to someone else.
    """
    key = "spark.sql.parquet.outputTimestampType"
    before = spark.conf.get(key)
    spark.conf.set(key, "TIMESTAMP_MICROS")
    try:
        yield
    finally:
        spark.conf.set(key, before)


def add_source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-server", required=True, metavar="HOST:PORT",
                        help="broker(s) to bootstrap from, comma-separated")
    parser.add_argument("--topic", required=True, help="topic to read")
    parser.add_argument("--starting-offsets", default="earliest",
                        help='"earliest" (default) or JSON, e.g. {"t":{"0":23,"1":-2}}')
    parser.add_argument("--ending-offsets", default="latest",
                        help='"latest" (default) or JSON, e.g. {"t":{"0":50,"1":-1}}')


def read_topic(spark: Any, args: argparse.Namespace, include_headers: bool = False) -> Any:
    """The topic as a DataFrame with the Kafka source's columns."""
    return (
        spark.read.format("kraft")
        .option("kafka.bootstrap.servers", args.bootstrap_server)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("endingOffsets", args.ending_offsets)
        .option("includeHeaders", str(include_headers).lower())
        .load()
    )
