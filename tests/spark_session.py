"""One local[2] SparkSession for the Spark tests, with the "kraft" source registered.

Session start costs 5-10 s here, so every Spark test module shares one (pytest's
session scope). Workers must run this interpreter: PYSPARK_PYTHON is set before the
JVM starts, and the project is installed in the venv (`pip install -e`), so the
source's classes unpickle on the workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


def new_session(master: str = "local[2]") -> Any:
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    import spark_jobs

    spark = (
        SparkSession.builder.master(master)
        .appName("kraft-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark_jobs.register(spark)
    return spark


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = new_session()
    yield session
    session.stop()
