"""A Hypothesis state machine drives a compacted `Log` against an in-memory model of every
record ever appended.

Rules: leader appends of keyed records, tombstones and keyless records (any codec), rolls,
clock moves, cleaning passes bounded by a random high watermark (sometimes with the cleaner
checkpoint lost), clean close/reopen, crash/reopen (with a full rescan or not), a crash at
a random file step of a cleaning pass, and a follower replicating the compacted log.

Checked after every step: offsets strictly increase across the gaps; every record read is
the model's record at that offset, unchanged; every record at or above the highest bound
ever cleaned is there; for every key the latest record equals the model's latest (a
tombstone may be gone, never replaced by an older value); the LEO is the model's.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from storage.cleaner import clean_log, plan_cleaning
from storage.compression import Compression
from storage.config import LogConfig
from storage.log import Log
from storage.records import Record, build_batch
from tests.harness.compaction import Clock, Rec, SimulatedCrash, abandon, crash_at, read_all, steps

KEYS = [b"k0", b"k1", b"k2", b"k3", b"k4", b"k5", None]

records = st.lists(
    st.tuples(st.sampled_from(KEYS), st.one_of(st.none(), st.binary(min_size=1, max_size=20))),
    min_size=1,
    max_size=5,
)
configs = st.builds(
    LogConfig,
    segment_bytes=st.sampled_from([400, 900, 2000]),
    index_interval_bytes=st.sampled_from([0, 200]),
    cleanup_policy=st.just("compact"),
    delete_retention_ms=st.sampled_from([0, 5_000]),
    min_cleanable_dirty_ratio=st.just(0.0),
)


class CleanerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="cleanerfsm-"))
        self.path = self.tmp / "topic-0"
        self.clock = Clock()
        self.model: list[Rec] = []  # every record appended, never cleaned
        self.touched = 0  # the highest first uncleanable offset of any pass
        self.followers = 0
        self.log: Log

    @initialize(config=configs)
    def open_log(self, config: LogConfig) -> None:
        self.config = config
        self.log = Log(self.path, config, clock=self.clock)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- rules ------------------------------------------------------------------------------

    @rule(pairs=records, codec=st.sampled_from(list(Compression)))
    def append(self, pairs: list[tuple[bytes | None, bytes | None]], codec: Compression) -> None:
        batch = [Record(v, k, timestamp=self.clock.now) for k, v in pairs]
        info = self.log.append_as_leader(build_batch(batch, compression=codec), 1)
        assert info.first_offset == len(self.model)
        self.model += [(len(self.model) + i, k, v) for i, (k, v) in enumerate(pairs)]

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.sampled_from([1, 1_000, 6_000]))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @rule(data=st.data(), lose_checkpoint=st.booleans())
    def clean(self, data: st.DataObject, lose_checkpoint: bool) -> None:
        hw = data.draw(st.integers(0, len(self.model)), label="hw")
        checkpoint = None if lose_checkpoint else self.log.cleaner_checkpoint
        plan = plan_cleaning(self.log, checkpoint, hw, self.clock.now)
        assert plan.first_uncleanable_offset <= max(hw, self.log.segments[0].base_offset)
        stats = clean_log(plan, self.clock.now)
        assert stats.completed or not plan.segments or plan.cleanable_bytes == 0
        self.touched = max(self.touched, plan.first_uncleanable_offset)

    @rule(data=st.data())
    def crash_while_cleaning(self, data: st.DataObject) -> None:
        plan = plan_cleaning(self.log, self.log.cleaner_checkpoint, None, self.clock.now)
        with crash_at(None) as calls:  # a dry run on a copy finds the steps
            copy = self.tmp / f"copy-{len(self.model)}" / "topic-0"
            shutil.copytree(self.path, copy)
            dry = Log(copy, self.config, clock=self.clock)
            now = self.clock.now
            clean_log(plan_cleaning(dry, self.log.cleaner_checkpoint, None, now), now)
            dry.close()
            shutil.rmtree(copy.parent)
        n = len(steps(calls))
        if n == 0:
            return
        step = data.draw(st.integers(0, n - 1), label="crash at step")
        with crash_at(step), contextlib.suppress(SimulatedCrash):
            clean_log(plan, self.clock.now)
        self.touched = max(self.touched, plan.first_uncleanable_offset)
        abandon(self.log)
        self.log = Log(self.path, self.config, clock=self.clock)
        assert not [p for p in self.path.iterdir() if p.name.endswith((".cleaned", ".swap"))]

    @rule()
    def close_and_reopen(self) -> None:
        checkpoint, rp = self.log.cleaner_checkpoint, self.log.recovery_point
        self.log.close()
        self.log = Log(
            self.path, self.config, recovery_point=rp, had_clean_shutdown=True, clock=self.clock
        )
        self.log.cleaner_checkpoint = checkpoint  # as the LogManager does from its file

    @rule(full=st.booleans())
    def crash_and_reopen(self, full: bool) -> None:
        rp = self.log.recovery_point
        abandon(self.log)
        self.log = Log(self.path, self.config, recovery_point=0 if full else rp, clock=self.clock)

    @rule(max_bytes=st.sampled_from([1, 300, 1 << 20]))
    def replicate_to_a_follower(self, max_bytes: int) -> None:
        self.followers += 1
        follower = Log(self.tmp / f"f{self.followers}" / "topic-0", LogConfig(), clock=self.clock)
        while follower.log_end_offset < self.log.log_end_offset:
            chunk = self.log.read(follower.log_end_offset, max_bytes).read()
            assert follower.append_as_follower(chunk) is not None
        assert read_all(follower) == read_all(self.log)
        follower.close()
        again = Log(follower.dir, LogConfig(), recovery_point=0, clock=self.clock)
        assert read_all(again) == read_all(self.log)
        again.close()

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def log_agrees_with_the_model(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == len(self.model)
        got = read_all(self.log)
        offsets = [o for o, _k, _v in got]
        assert offsets == sorted(set(offsets)), "offsets must strictly increase"
        for rec in got:
            assert self.model[rec[0]] == rec, "a record changed"
        assert [r for r in got if r[0] >= self.touched] == self.model[self.touched :]
        in_log = {k: (o, v) for o, k, v in got if k is not None}
        for key, (offset, value) in {k: (o, v) for o, k, v in self.model if k is not None}.items():
            if value is None:  # a tombstone may be gone, never replaced by an older value
                assert in_log.get(key, (offset, value)) == (offset, value), key
            else:
                assert in_log.get(key) == (offset, value), key


CleanerMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("CLEANER_FSM_EXAMPLES", "60")),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestCleanerStateMachine = CleanerMachine.TestCase


@pytest.mark.slow
def test_cleaner_state_machine_long_run() -> None:
    """`make test-long`: many more examples than the CI run."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        CleanerMachine,
        settings=settings(
            max_examples=1000,
            stateful_step_count=50,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
