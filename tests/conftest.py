"""Fixtures shared across test modules: the Spark session and the Spark tests' cluster
(both session-scoped, created only when a test asks for them)."""

from tests.spark_session import spark, spark_cluster  # noqa: F401
