"""A Hypothesis state machine drives one `Log` against a plain list-of-batches model.

Rules: leader and follower appends, reads (bounded by a max offset like the HW), time
lookups, rolls, truncations, log-start moves, retention, flushes, clean close/reopen,
and crash/reopen with files cut at random byte positions (never below what was
flushed), random bytes appended, and index files torn or lost.

Checked after every step: every read matches the model; LEO, log start offset and the
leader epoch cache agree with the model; after a crash the log is a prefix of the model
that contains every flushed batch.
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
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    precondition,
    rule,
)

from storage.config import LogConfig
from storage.epoch_cache import EpochEntry
from storage.log import Log, OffsetOutOfRangeError, RecordListTooLargeError
from storage.record_batch import RecordBatchView, iter_batches
from storage.records import Record, build_batch, decode_batch
from tests.harness.log_model import Clock, LogInvariants, ModelBatch, configs, stored_bytes


class LogMachine(LogInvariants, RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="logfsm-"))
        self.path = self.tmp / "topic-3"
        self.clock = Clock()
        self.batches: list[ModelBatch] = []
        self.leo = 0
        self.lso = 0
        self.epoch = 0
        self.counter = 0
        self.epochs: list[EpochEntry] = []
        self.log: Log

    @initialize(config=configs)
    def open_log(self, config: LogConfig) -> None:
        self.config = config
        self.log = Log(self.path, config, clock=self.clock)

    def teardown(self) -> None:
        with contextlib.suppress(Exception):
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- helpers -----------------------------------------------------------------------------

    def _make_batch(self, n: int, ts_jitter: list[int]) -> tuple[bytes, list[int]]:
        records = []
        stamps = []
        for i in range(n):
            self.counter += 1
            ts = self.clock.now + ts_jitter[i % len(ts_jitter)]
            stamps.append(ts)
            records.append(
                Record(value=b"v%06d" % self.counter, key=b"k%d" % (i % 3), timestamp=ts)
            )
        return build_batch(records), stamps

    # The leader epoch cache's model, with Kafka's LeaderEpochFileCache rules.
    def _assign_epoch(self, epoch: int, start: int) -> None:
        if not self.epochs or epoch > self.epochs[-1].epoch:
            self.epochs = [e for e in self.epochs if e.epoch < epoch and e.start_offset < start]
            self.epochs.append(EpochEntry(epoch, start))

    def _epochs_truncated_from_end(self, end: int) -> None:
        self.epochs = [e for e in self.epochs if e.start_offset < end]

    def _epochs_truncated_from_start(self) -> None:
        before = [e for e in self.epochs if e.start_offset <= self.lso]
        kept = [e for e in self.epochs if e.start_offset > self.lso]
        if before:
            kept.insert(0, EpochEntry(before[-1].epoch, self.lso))
        self.epochs = kept

    def _model_from(self, offset: int) -> tuple[int, bytes]:
        """Index of the model batch holding `offset`, and the bytes from there on."""
        for i, b in enumerate(self.batches):
            if b.last >= offset:
                return i, b"".join(x.data for x in self.batches[i:])
        return len(self.batches), b""

    def _file_offsets(self) -> list[tuple[Path, int, list[int]]]:
        """(segment file, flushed bytes, batch boundaries past them) for each segment."""
        out = []
        segs = self.log.segments
        for i, seg in enumerate(segs):
            next_base = segs[i + 1].base_offset if i + 1 < len(segs) else 2**62
            flushed, position, boundaries = 0, 0, []
            for b in self.batches:
                if b.base < seg.base_offset or b.base >= next_base:
                    continue
                position += b.size
                if b.last < self.log.recovery_point:
                    flushed = position
                elif position < seg.size:  # a cut at the end of the file cuts nothing
                    boundaries.append(position)
            out.append((seg.log_path, flushed, boundaries))
        return out

    def _next_base(self, base: int) -> int:
        bases = [s.base_offset for s in self.log.segments]
        later = [b for b in bases if b > base]
        return later[0] if later else 2**62

    # -- appends -----------------------------------------------------------------------------

    @rule(
        sizes=st.lists(st.integers(1, 6), min_size=1, max_size=3),
        bump_epoch=st.booleans(),
        ts_jitter=st.lists(st.integers(-3_000, 3_000), min_size=1, max_size=4),
    )
    def append_as_leader(self, sizes: list[int], bump_epoch: bool, ts_jitter: list[int]) -> None:
        if bump_epoch:
            self.epoch += 1
        built = [self._make_batch(n, ts_jitter) for n in sizes]
        payload = b"".join(b for b, _ in built)
        if len(payload) > self.config.segment_bytes:
            with pytest.raises(RecordListTooLargeError):
                self.log.append_as_leader(payload, self.epoch)
            return
        info = self.log.append_as_leader(payload, self.epoch)
        assert info.first_offset == self.leo
        self._assign_epoch(self.epoch, self.leo)
        offset = self.leo
        for (raw, stamps), n in zip(built, sizes, strict=True):
            self.batches.append(
                ModelBatch(
                    offset,
                    offset + n - 1,
                    self.epoch,
                    stored_bytes(raw, offset, self.epoch),
                    stamps,
                )
            )
            offset += n
        assert info.last_offset == offset - 1
        self.leo = offset

    @rule(n=st.integers(1, 5), gap=st.integers(0, 3), epoch_step=st.integers(0, 2))
    def append_as_follower(self, n: int, gap: int, epoch_step: int) -> None:
        """The leader's batch arrives with its offsets and epoch already set."""
        self.epoch += epoch_step
        raw, stamps = self._make_batch(n, [0])
        base = self.leo + gap
        data = stored_bytes(raw, base, self.epoch)
        if len(data) > self.config.segment_bytes:
            return
        info = self.log.append_as_follower(data)
        assert info is not None and info.first_offset == base
        self._assign_epoch(self.epoch, base)
        self.batches.append(ModelBatch(base, base + n - 1, self.epoch, data, stamps))
        self.leo = base + n

    # -- reads -------------------------------------------------------------------------------

    @rule(
        data=st.data(),
        max_bytes=st.sampled_from([0, 1, 100, 700, 10_000]),
        min_one=st.booleans(),
        bounded=st.booleans(),
    )
    def read(self, data: st.DataObject, max_bytes: int, min_one: bool, bounded: bool) -> None:
        start = data.draw(st.integers(self.lso, self.leo), label="start")
        max_offset = (
            data.draw(st.integers(start, self.leo), label="max_offset") if bounded else None
        )
        got = self.log.read(start, max_bytes, max_offset, min_one).read()
        bound = self.leo if max_offset is None else max_offset
        i, expected_tail = self._model_from(start)
        # Never past the batch that holds the bound.
        limit = sum(b.size for b in self.batches[i:] if b.last < bound)
        assert expected_tail.startswith(got), "read returned bytes that are not the log's"
        assert len(got) <= limit
        if i < len(self.batches) and self.batches[i].last < bound:
            first = self.batches[i].size
            if min_one:
                assert len(got) >= first, "min_one_message must return the first whole batch"
            assert len(got) <= max(max_bytes, first if min_one else 0)
        else:
            assert got == b""

    @rule(data=st.data())
    def read_outside_range(self, data: st.DataObject) -> None:
        above = st.integers(self.leo + 1, self.leo + 50)
        bad = data.draw(st.one_of(above, st.integers(0, self.lso - 1)) if self.lso else above)
        with pytest.raises(OffsetOutOfRangeError):
            self.log.read(bad, 1000)

    @rule(data=st.data())
    def consume_everything(self, data: st.DataObject) -> None:
        """A consumer loop from the log start to the LEO sees exactly the model's records."""
        max_bytes = data.draw(st.sampled_from([1, 300, 100_000]))
        offset = self.lso
        seen = []
        while offset < self.leo:
            chunk = self.log.read(offset, max_bytes).read()
            views = list(iter_batches(chunk))
            assert views, f"no progress at offset {offset}"
            for v in views:
                for rec in decode_batch(v).records:
                    if rec.offset >= offset:
                        seen.append((rec.offset, rec.value))
            offset = views[-1].next_offset
        expected = []
        for b in self.batches:
            for rec in decode_batch(RecordBatchView(b.data)).records:
                if rec.offset >= self.lso:
                    expected.append((rec.offset, rec.value))
        assert seen == expected

    @rule(data=st.data())
    def offset_for_timestamp(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(self.clock.now - 10_000, self.clock.now + 5_000))
        expected = None
        for b in self.batches:
            for off, ts in zip(range(b.base, b.last + 1), b.timestamps, strict=True):
                if off >= self.lso and ts >= target:
                    expected = (ts, off)
                    break
            if expected:
                break
        got = self.log.offset_for_timestamp(target)
        assert (None if got is None else (got.timestamp, got.offset)) == expected

    @rule()
    def max_timestamp(self) -> None:
        """ListOffsets MAX_TIMESTAMP: the first readable record with the largest timestamp."""
        first_base = self.log.segments[0].base_offset
        stored = [
            (ts, off)
            for b in self.batches
            if b.base >= first_base
            for off, ts in zip(range(b.base, b.last + 1), b.timestamps, strict=True)
        ]
        readable = [(ts, off) for ts, off in stored if off >= self.lso]
        got = self.log.max_timestamp_and_offset()
        if not readable:
            assert got is None
            return
        best = max(ts for ts, _ in readable)
        if best == max(ts for ts, _ in stored):  # the max is not hidden below the log start
            expected = min(off for ts, off in readable if ts == best)
            assert got is not None and (got.timestamp, got.offset) == (best, expected)

    # -- log structure -----------------------------------------------------------------------

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule(ms=st.integers(0, 15_000))
    def advance_clock(self, ms: int) -> None:
        self.clock.now += ms

    @rule(data=st.data())
    def truncate_to(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.leo + 2))
        first_segment_base = self.log.segments[0].base_offset
        changed = self.log.truncate_to(target)
        assert changed == (target < self.leo)
        if not changed:  # no batch goes, but an epoch starting at the LEO does (Kafka)
            self._epochs_truncated_from_end(self.leo)
            return
        if target < first_segment_base:
            self.batches, self.leo, self.lso, self.epochs = [], target, target, []
            return
        self.batches = [b for b in self.batches if b.last < target]
        new_leo = self.log.log_end_offset
        floor = self.batches[-1].last + 1 if self.batches else first_segment_base
        # Batches are removed whole; a target inside a batch or a gap leaves the LEO below it.
        assert floor <= new_leo <= target
        self.leo = new_leo
        self.lso = min(self.lso, self.leo)
        self._epochs_truncated_from_end(new_leo)

    @rule(data=st.data())
    def truncate_fully_and_start_at(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.leo + 20))
        self.log.truncate_fully_and_start_at(target)
        self.batches, self.leo, self.lso, self.epochs = [], target, target, []

    @rule(data=st.data())
    def delete_records_before(self, data: st.DataObject) -> None:
        target = data.draw(st.integers(0, self.leo))
        assert self.log.delete_records_before(target) == (target > self.lso)
        self.lso = max(self.lso, target)
        self._epochs_truncated_from_start()

    @rule(data=st.data())
    def retention(self, data: st.DataObject) -> None:
        hw = data.draw(st.integers(self.lso, self.leo))
        old_lso = self.lso
        expected = self._segments_retention_deletes(hw)
        before = [seg.base_offset for seg in self.log.segments]
        self.log.delete_old_segments(hw)
        after = {seg.base_offset for seg in self.log.segments}
        assert sum(base not in after for base in before) == expected
        self.lso = self.log.log_start_offset
        assert old_lso <= self.lso <= hw
        self._epochs_truncated_from_start()
        # Retention went exactly as far as it should: the oldest segment left is kept by
        # the HW, by both limits, or because it is the empty active segment.
        segs = self.log.segments
        first = segs[0]
        next_base = segs[1].base_offset if len(segs) > 1 else self.leo
        if first.size and next_base <= hw:
            if self.config.retention_ms >= 0:
                assert self.clock.now - first.max_timestamp_so_far <= self.config.retention_ms
            if self.config.retention_bytes >= 0:
                total = sum(seg.size for seg in segs)
                assert total - first.size < self.config.retention_bytes

    def _segments_retention_deletes(self, hw: int) -> int:
        """How many of the oldest segments Kafka's rules delete: those wholly below the log
        start offset, then retention.ms (the segment's newest record is older than the
        limit), then retention.bytes (while the log stays at or over the limit without it);
        only segments wholly below the HW."""
        segs = self.log.segments
        sizes = [seg.size for seg in segs]
        nexts = [seg.base_offset for seg in segs[1:]] + [self.leo]

        def deletable(i: int) -> bool:
            return i < len(segs) and sizes[i] > 0 and nexts[i] <= hw

        n = 0
        # Kafka's deleteLogStartOffsetBreachedSegments first, whatever the limits: a crash
        # can cut the log back to its start, leaving whole segments below it.
        while deletable(n) and nexts[n] <= min(hw, self.lso):
            n += 1
        if self.config.retention_ms >= 0:
            while deletable(n) and (
                self.clock.now - segs[n].max_timestamp_so_far > self.config.retention_ms
            ):
                n += 1
        if self.config.retention_bytes >= 0:
            excess = sum(sizes[n:]) - self.config.retention_bytes
            while deletable(n) and excess >= sizes[n]:
                excess -= sizes[n]
                n += 1
        return n

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.leo

    @rule()
    def close_and_reopen(self) -> None:
        rp = self.log.recovery_point
        self.log.close()
        self.log = Log(
            self.path,
            self.config,
            recovery_point=rp,
            log_start_offset=self.lso,
            had_clean_shutdown=True,
            clock=self.clock,
        )

    @rule(data=st.data(), full_recovery=st.booleans())
    def crash_and_reopen(self, data: st.DataObject, full_recovery: bool) -> None:
        flushed_offset = self.log.recovery_point
        files = self._file_offsets()
        # The "crash": nothing more is written; the files are then damaged only where a
        # crash can damage them: past what was flushed.
        del self.log
        damage = data.draw(st.sampled_from(["none", "cut", "garbage", "cut+garbage"]))
        if "cut" in damage:
            candidates = [f for f in files if f[0].exists() and f[0].stat().st_size > f[1]]
            if candidates:
                path, flushed, boundaries = data.draw(st.sampled_from(candidates))
                size = path.stat().st_size
                # A cut on a batch boundary leaves no torn batch to notice: only the
                # contiguity of segments tells recovery that data after it was lost.
                at = data.draw(
                    st.one_of(
                        st.integers(flushed, size - 1), st.sampled_from([flushed, *boundaries])
                    ),
                    label="cut at",
                )
                os.truncate(path, min(at, size - 1))
        if "garbage" in damage:
            with open(files[-1][0], "ab") as f:
                f.write(data.draw(st.binary(min_size=1, max_size=80), label="garbage"))
        if data.draw(st.booleans(), label="lose an index"):
            victims = sorted(self.path.glob("*.index")) + sorted(self.path.glob("*.timeindex"))
            if victims:
                data.draw(st.sampled_from(victims), label="index").unlink()
        self._reopen_after_crash(flushed_offset, full_recovery)

    def _reopen_after_crash(self, flushed_offset: int, full_recovery: bool) -> None:
        self.log = Log(
            self.path,
            self.config,
            recovery_point=0 if full_recovery else flushed_offset,
            log_start_offset=self.lso,
            had_clean_shutdown=False,
            clock=self.clock,
        )
        new_leo = self.log.log_end_offset
        assert flushed_offset <= new_leo <= self.leo, (flushed_offset, new_leo, self.leo)
        # What survives is a prefix of the model: whole batches below the new LEO (whose
        # bytes the invariants compare), and it holds everything that was flushed.
        self.batches = [b for b in self.batches if b.last < new_leo]
        self.leo = new_leo
        self.lso = min(self.lso, new_leo)
        # Recovery re-assigns epochs from the batches it rescans (as Kafka's does), so the
        # cache may regain entries the model dropped; accept any well-formed cache (the
        # invariant then checks every readable batch maps to its own epoch).
        entries = self.log.leader_epoch_cache.entries
        for a, b in zip(entries, entries[1:], strict=False):
            assert a.epoch < b.epoch and a.start_offset < b.start_offset, entries
        assert all(self.lso <= e.start_offset <= self.leo for e in entries), entries
        self.epochs = entries

    @precondition(
        lambda self: (
            hasattr(self, "log")
            and any(f[0].stat().st_size > f[1] for f in self._file_offsets()[:-1])
        )
    )
    @rule(data=st.data())
    def crash_losing_the_tail_of_a_rolled_segment(self, data: st.DataObject) -> None:
        """A rolled, unflushed segment loses its tail on a batch boundary while the newer
        segment survives: no torn batch shows it; recovery must still keep a prefix."""
        files = self._file_offsets()[:-1]
        path, flushed, boundaries = data.draw(
            st.sampled_from([f for f in files if f[0].stat().st_size > f[1]])
        )
        flushed_offset = self.log.recovery_point
        del self.log
        os.truncate(path, data.draw(st.sampled_from([flushed, *boundaries])))
        self._reopen_after_crash(flushed_offset, full_recovery=False)


LogMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("LOG_FSM_EXAMPLES", "400")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestLogStateMachine = LogMachine.TestCase


@pytest.mark.slow
def test_log_state_machine_long_run() -> None:
    """`make test-long`: many more examples than the CI run."""
    from hypothesis.stateful import run_state_machine_as_test

    run_state_machine_as_test(
        LogMachine,
        settings=settings(
            max_examples=3000,
            stateful_step_count=60,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
