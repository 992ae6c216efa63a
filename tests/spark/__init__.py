"""Tests of spark_jobs/: the "kraft" source and sink, and the example jobs."""
