"""The Hypothesis model of one partition with three replicas (its rules, faults and
invariants are described in tests/harness/replication_model.py): the default run, and a
long one marked slow. Its failures are frozen in test_replication_regressions.py."""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from tests.harness.replication_model import ReplicationModel

ReplicationModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("MODEL_EXAMPLES", "500")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_replication_model = ReplicationModel.TestCase


class LongReplicationModel(ReplicationModel):
    pass


LongReplicationModel.TestCase.settings = settings(
    max_examples=10_000,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# 10,000 examples take far longer than the suite's 300 s per-test timeout (pyproject.toml),
# which cut every run short and reported it as a failure.
test_replication_model_long = pytest.mark.timeout(4 * 3600)(
    pytest.mark.slow(LongReplicationModel.TestCase)
)
