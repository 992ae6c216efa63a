"""The replication model (tests/harness/replication_model.py) with machine crashes on
more than one replica (tests/harness/replication_faults.py says which): with eligible
leader replicas (KIP-966) no acknowledged record is lost; with them off the same faults
lose one, which Hypothesis finds."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from tests.harness.replication_model import ReplicationModel

_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much]


class DoubleCrashModel(ReplicationModel):
    ELR = True
    DOUBLE_CRASHES = True


DoubleCrashModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("ELR_MODEL_EXAMPLES", "100")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=_QUIET,
)
test_double_machine_crashes_lose_nothing_with_elr = DoubleCrashModel.TestCase


class LongDoubleCrashModel(DoubleCrashModel):
    pass


LongDoubleCrashModel.TestCase.settings = settings(
    max_examples=1_000, stateful_step_count=60, deadline=None, suppress_health_check=_QUIET
)
test_double_machine_crashes_lose_nothing_with_elr_long = pytest.mark.slow(
    LongDoubleCrashModel.TestCase
)


class DoubleCrashNoElrModel(ReplicationModel):
    ELR = False
    DOUBLE_CRASHES = True


# The two followers pause past their session and are fenced, leaving the leader alone in
# the ISR (below min.insync.replicas 2); the leader's machine crashes and loses the
# acknowledged records it had not flushed; it restarts (an unclean shutdown). Without ELR
# the controller kept it as the last ISR member and it leads again, empty: the followers
# truncate the acknowledged records away. With ELR the followers are eligible leaders,
# the restarted broker is not, and a follower leads once it resumes.
DOUBLE_CRASH_STEPS: list[tuple[str, tuple[Any, ...]]] = [
    ("produce_three", (-1,)),
    ("settle", ()),
    ("fault", (2, "pause")),
    ("fault", (3, "pause")),
    ("tick", (10_000,)),
    ("fault", (1, "machine")),
    ("tick", (10_000,)),
    ("recover", (1,)),
    ("tick", (2_000,)),
    ("sync_metadata", (1,)),
]


def replay(model: type[ReplicationModel]) -> ReplicationModel:
    m = model()
    m.start()
    m.replication_invariants()
    try:
        for name, args in DOUBLE_CRASH_STEPS:
            getattr(m, name)(*args)
            m.replication_invariants()
        assert m.acked, "the steps acknowledge records"
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()
    return m


def test_with_elr_the_frozen_double_crash_loses_nothing() -> None:
    m = replay(DoubleCrashModel)
    assert m.reg.leader in (2, 3) or m.reg.isr == (1, 2, 3)


def test_without_elr_the_frozen_double_crash_loses_acknowledged_records() -> None:
    with pytest.raises(AssertionError, match="lacks acknowledged records|lost"):
        replay(DoubleCrashNoElrModel)
