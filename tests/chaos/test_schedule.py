"""The nemesis's schedules: one seed, one schedule (what `make chaos SEED=` relies on to
replay a failure), every fault heals, and a crash-all overlaps nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.chaos.schedule import KINDS, PROFILES, generate


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_same_seed_same_schedule(profile: str) -> None:
    for seed in range(50):
        a, b = generate(seed, PROFILES[profile]), generate(seed, PROFILES[profile])
        assert a == b and a.describe() == b.describe()


def test_different_seeds_differ() -> None:
    p = PROFILES["full"]
    assert len({generate(seed, p).describe().split("\n", 1)[1] for seed in range(50)}) > 45


def test_replay_in_a_new_process_prints_the_same_schedule() -> None:
    """Nothing process-dependent (hash seeds, dict order of sets) enters the schedule."""
    cmd = [sys.executable, "-m", "tests.chaos.campaign", "--print-only", "--seed", "4242",
           "--seed", "7", "--profile", "full"]  # fmt: skip
    runs = [
        subprocess.run(cmd, capture_output=True, text=True, check=True,
                       env={"PYTHONHASHSEED": str(h), "PATH": "/usr/bin:/bin",
                            "PYTHONPATH": ":".join(sys.path)}).stdout
        for h in (1, 2)
    ]  # fmt: skip
    expected = "\n".join(generate(s, PROFILES["full"]).describe() for s in (4242, 7)) + "\n"
    assert runs[0] == runs[1] == expected


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_faults_heal_and_crash_all_runs_alone(profile: str) -> None:
    p = PROFILES[profile]
    kinds = set()
    for seed in range(300):
        s = generate(seed, p)
        assert p.min_faults <= len(s.faults) <= p.max_faults or any(
            f.kind == "crash-all" for f in s.faults
        ), s.describe()
        for f in s.faults:
            kinds.add(f.kind)
            assert 0 < f.at_s < f.heal_s <= s.end_s
            if f.kind == "pause-short":
                assert f.heal_s - f.at_s < p.session_ms / 1000
            if f.kind == "pause-long":
                assert f.heal_s - f.at_s > p.session_ms / 1000
            for o in s.faults:
                if o is not f and "crash-all" in (o.kind, f.kind):
                    assert f.heal_s <= o.at_s or o.heal_s <= f.at_s, s.describe()
    assert kinds == set(p.kinds) and set(p.kinds) <= set(KINDS)


def test_partitions_cut_only_cluster_nodes_and_split_is_a_minority() -> None:
    p = PROFILES["full"]
    nodes = set(range(1, p.n_controllers + p.n_brokers + 1))
    for seed in range(300):
        for f in generate(seed, p).faults:
            for cut in f.cuts:
                src, dst = (int(x) for x in cut.split(">"))
                assert src != dst and {src, dst} <= nodes
            if f.kind == "split":
                minority = f.target.split(":")[1].split("+")
                assert 1 <= len(minority) <= len(nodes) // 2
