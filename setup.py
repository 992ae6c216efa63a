"""Only the C part of the build; everything else is in pyproject.toml.

`spark_jobs._record_walk` walks Kafka record lengths for the Spark source's decoder.
It is optional: where it cannot be compiled, the decoder's Python loop does the walk.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("spark_jobs._record_walk", ["spark_jobs/_record_walk.c"], optional=True)
    ]
)
