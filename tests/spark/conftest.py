"""Fixtures of the Spark tests: the Spark session and the Spark tests' cluster (both
session-scoped, created only when a test asks for them)."""

from tests.harness.spark_session import spark, spark_cluster  # noqa: F401
