"""Crash safety of the log cleaner's swap: a crash at every rename and unlink of a
cleaning pass, and again while the next load completes a swap, loses no retained record
and duplicates none; the cleaned files are durable before the swap commits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from storage.cleaner import CleanerStats
from storage.log import Log
from tests.harness.compaction import (
    Clock,
    Rec,
    SimulatedCrash,
    abandon,
    append,
    clean,
    compact_config,
    crash_at,
    latest,
    pairs_for,
    read_all,
    steps,
)

# -- crash safety of the swap ------------------------------------------------------------------


def crash_fixture(path: Path) -> tuple[Log, CleanerStats | None]:
    """A log cleaned once, then given more data: the next pass merges, replaces and
    deletes segments, so every kind of swap step happens."""
    log = Log(path / "t-0", compact_config(segment_bytes=700), clock=Clock())
    append(log, pairs_for(80, keys=24), per_batch=2)
    append(log, [(b"k1", None)])
    clean(log)
    # Each key twice in a row: every segment loses records, so several groups swap.
    append(log, [(b"p%d" % (i // 2), b"v%d" % i) for i in range(60)])
    log.roll()
    return log, None


def check_after_crash(log: Log, original: list[Rec], cleaned: list[Rec], leo: int) -> None:
    after = read_all(log)
    assert log.log_end_offset == leo
    assert latest(after) == latest(original)
    assert set(cleaned) <= set(after) <= set(original)  # every survivor, nothing invented
    offsets = [o for o, _k, _v in after]
    assert offsets == sorted(set(offsets))  # no duplicates
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]


def test_a_crash_at_any_step_of_the_swap_loses_nothing(tmp_path: Path) -> None:
    reference, _ = crash_fixture(tmp_path / "reference")
    original = read_all(reference)
    with crash_at(None) as calls:
        clean(reference)
    cleaned, leo = read_all(reference), reference.log_end_offset
    swaps = [c for c in calls if c.startswith("replace") and c.endswith(".log.swap")]
    assert len(swaps) >= 3  # several groups, so a crash can fall between two of them
    for step in range(len(steps(calls))):
        log, _ = crash_fixture(tmp_path / f"crash-{step}")
        with crash_at(step), pytest.raises(SimulatedCrash):
            clean(log)
        abandon(log)
        reopened = Log(log.dir, log.config, recovery_point=log.recovery_point, clock=Clock())
        check_after_crash(reopened, original, cleaned, leo)
        # The reopened log cleans on to the same result.
        clean(reopened)
        assert read_all(reopened) == cleaned


def test_a_cleaned_segment_is_durable_before_its_swap_commits(tmp_path: Path) -> None:
    """fsync of the cleaned files before the `.swap` rename (the commit), and of the
    directory after it, before any old file goes (power loss, not just a process crash)."""
    log, _ = crash_fixture(tmp_path)
    with crash_at(None) as calls:
        clean(log)
    commits = [
        i for i, c in enumerate(calls) if c.startswith("replace") and c.endswith(".log.cleaned")
    ]
    assert commits
    for i in commits:
        cleaned = calls[i].split()[1]
        base = cleaned[: -len(".log.cleaned")]
        for suffix in (".log", ".index", ".timeindex"):
            assert f"fsync {base}{suffix}.cleaned" in calls[:i], suffix
        rest = calls[i + 1 :]
        first_unlink = next((k for k, c in enumerate(rest) if c.startswith("unlink")), len(rest))
        assert f"fsync {log.dir}" in rest[:first_unlink]


def test_a_crash_while_the_loader_completes_a_swap_is_finished_next_time(
    tmp_path: Path,
) -> None:
    reference, _ = crash_fixture(tmp_path / "reference")
    original = read_all(reference)
    with crash_at(None) as calls:
        clean(reference)
    cleaned, leo = read_all(reference), reference.log_end_offset
    # Just after a swap's commit (its .log is renamed .swap), and one step later.
    commits = [
        i + 1
        for i, c in enumerate(steps(calls))
        if c.startswith("replace") and c.endswith(".log.cleaned")
    ]
    for step in sorted({*commits, *(i + 1 for i in commits)}):
        log, _ = crash_fixture(tmp_path / f"crash-{step}")
        with crash_at(step), pytest.raises(SimulatedCrash):
            clean(log)
        abandon(log)
        assert list(log.dir.glob("*.swap"))
        crashed = tmp_path / f"crashed-{step}"
        shutil.copytree(log.dir, crashed)
        with crash_at(None) as loader_calls:
            Log(log.dir, log.config, clock=Clock()).close()
        assert steps(loader_calls)
        for second in range(len(steps(loader_calls))):
            copy = tmp_path / f"copy-{step}-{second}" / "t-0"
            shutil.copytree(crashed, copy)
            with crash_at(second), pytest.raises(SimulatedCrash):
                Log(copy, log.config, clock=Clock())
            check_after_crash(Log(copy, log.config, clock=Clock()), original, cleaned, leo)
