"""One local[2] SparkSession for the Spark tests, with the "kraft" source registered.

Session start costs 5-10 s here, so every Spark test module shares one (pytest's
session scope), and one cluster of 3 controllers and 3 brokers (`spark_cluster`); each
module uses topics of its own. Workers must run this interpreter: PYSPARK_PYTHON is set before the
JVM starts, and the project is installed in the venv (`pip install -e`), so the
source's classes unpickle on the workers.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.cluster_procs import ProcCluster

# Retention checked often (the retention test waits on it); sessions that notice a dead
# broker in seconds (the leader-death tests).
SPARK_CLUSTER_PROPS = {
    "log.retention.check.interval.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


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


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    data = tmp_path_factory.mktemp("spark-cluster")
    with ProcCluster(data, broker_props=SPARK_CLUSTER_PROPS) as c:
        c.start()
        yield c
