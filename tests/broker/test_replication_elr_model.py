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


def test_a_restarted_broker_not_registered_yet_does_not_make_a_machine_crash_safe() -> None:
    """Found by the model: broker 3 was killed and started again, but its registration
    waited for the old session to end; broker 2, the leader, then lost an acknowledged
    record in a machine crash. 3's registration (an unclean shutdown) took it out of the
    eligible replicas, and 2, the last known leader, led without the record. A process
    that has yet to register is no safe holder (tests/harness/replication_faults.py)."""
    m = DoubleCrashModel()
    m.start()
    try:
        for name, args in [
            ("fault", (1, "sigkill")),
            ("tick", (10_000,)),
            ("sync_metadata", (2,)),
            ("produce", (2, False, -1)),
            ("sync_metadata", (3,)),
            ("replicate", (3,)),
            ("replicate", (3,)),
            ("fault", (3, "sigkill")),
            ("recover", (3,)),
            ("fault", (2, "machine")),
        ]:
            getattr(m, name)(*args)
            m.replication_invariants()
        assert m.acked and m.brokers[2].intact  # the machine crash was not allowed
        m.heal_and_check()
    finally:
        m._healable = False
        m.teardown()
