"""One local[2] SparkSession for the Spark tests, with the "kraft" source registered.

Session start costs 5-10 s here, so every Spark test module shares one (pytest's
session scope), and one cluster of 3 controllers and 3 brokers (`spark_cluster`); each
module uses topics of its own. The session is the jobs' `local_session`: workers run
this interpreter, where the project is installed (`pip install -e`), so the source's
classes unpickle there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster_procs import ProcCluster

# Retention checked often (the retention test waits on it); sessions that notice a dead
# broker in seconds (the leader-death tests).
SPARK_CLUSTER_PROPS = {
    "log.retention.check.interval.ms": "200",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


def new_session() -> Any:
    from spark_jobs.job_common import local_session

    return local_session("kraft-tests", shuffle_partitions=2)


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
