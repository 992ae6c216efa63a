"""`make conformance`: librdkafka's own integration tests against a local kraft cluster.

    python -m tests.conformance.run_librdkafka               # the allowlist
    python -m tests.conformance.run_librdkafka --tests 0001,0012
    python -m tests.conformance.run_librdkafka --all         # every broker test of 0000-0199
    python -m tests.conformance.run_librdkafka --build-only

Builds the runner if it is missing (tests/conformance/librdkafka_build.py), starts 3
controllers and 3 brokers, writes the runner's tests/test.conf, runs each test number in
quick mode (tests/conformance/librdkafka_runner.py), and prints a summary: passed, failed,
skipped with their reasons. Exits 1 if a test that was asked for fails (with --all:
only if an allowlisted one does; --all prints which tests pass, to move onto the list).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from kraft.tools.launcher import LauncherError
from tests.conformance.allowlist import (
    ALLOWLIST,
    FULL_MODE,
    NOT_LISTED,
    RANGE,
    check_complete,
)
from tests.conformance.librdkafka_build import CACHE, Build, BuildError, ensure_built
from tests.conformance.librdkafka_runner import (
    KAFKA_VERSION,
    ConformanceCluster,
    Outcome,
    iter_numbers,
    merge_outcomes,
    run_number,
)
from tests.conformance.librdkafka_suite import Table, needs_broker, scenarios_of, suite_tests

DEFAULT_TIMEOUT_S = 300.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="run_librdkafka", description="librdkafka's test suite against a kraft cluster"
    )
    which = p.add_mutually_exclusive_group()
    which.add_argument("--tests", help="test numbers, comma or space separated (e.g. 0001,0012)")
    which.add_argument(
        "--all", action="store_true",
        help=f"every broker test of {RANGE[0]}-{RANGE[1]}, listed or not; prints which pass",
    )  # fmt: skip
    which.add_argument("--build-only", action="store_true", help="build the runner and stop")
    p.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT_S,
        help=f"seconds one test number may take before it is killed ({DEFAULT_TIMEOUT_S:.0f})",
    )  # fmt: skip
    p.add_argument(
        "--no-quick", dest="quick", action="store_false",
        help="run every sub-test, not only quick mode's (-Q); takes much longer",
    )  # fmt: skip
    p.add_argument(
        "--log-dir", type=Path, default=CACHE / "conformance-logs",
        help="where each test's runner output goes (default .cache/conformance-logs)",
    )  # fmt: skip
    return p.parse_args(argv)


def pick_tests(args: argparse.Namespace, table: Table) -> list[str]:
    if args.tests:
        picked = list(iter_numbers(args.tests))
        unknown = [n for n in picked if n not in table]
        if unknown:
            raise ValueError(f"no such test in librdkafka's suite: {', '.join(unknown)}")
        return picked
    if args.all:
        return [n for n in sorted(table) if RANGE[0] <= n <= RANGE[1] and needs_broker(table[n])]
    return sorted(ALLOWLIST)


def run_all(
    numbers: list[str], table: Table, build: Build, log_dir: Path, timeout_s: float, quick: bool
) -> list[Outcome]:
    """Each scenario's tests on a cluster set up for it (most need only "default")."""
    phases: dict[str, list[str]] = {}
    for number in numbers:
        for scenario in scenarios_of(table[number]) or ["default"]:
            phases.setdefault(scenario, []).append(number)
    merged: dict[str, Outcome] = {}
    with tempfile.TemporaryDirectory(prefix="kraft-conformance-") as tmp:
        for scenario, phase in phases.items():
            with ConformanceCluster(Path(tmp), scenario) as cluster:
                print(
                    f"conformance: scenario {scenario}: cluster up at "
                    f"{cluster.bootstrap_servers}; {len(phase)} tests, TEST_KAFKA_VERSION="
                    f"{KAFKA_VERSION}, {'quick' if quick else 'full'} mode; logs in {log_dir}",
                    flush=True,
                )
                for i, number in enumerate(phase, 1):
                    outcome = _run_one(cluster, build, number, log_dir, timeout_s, quick)
                    mark = "" if outcome.verdict == "PASSED" else f"  {outcome.reasons}"[:300]
                    print(
                        f"[{i}/{len(phase)}] {number} {outcome.verdict} "
                        f"({outcome.seconds:.1f}s){mark}",
                        flush=True,
                    )
                    before = merged.get(number)
                    merged[number] = merge_outcomes(before, outcome) if before else outcome
    return [merged[n] for n in numbers]


def _run_one(
    cluster: ConformanceCluster,
    build: Build,
    number: str,
    log_dir: Path,
    timeout_s: float,
    quick: bool,
) -> Outcome:
    conf = cluster.write_test_conf()
    # A test that skips itself in quick mode runs in full (it is quick anyway).
    quick = quick and number not in FULL_MODE
    outcome = run_number(build, number, conf, log_dir, timeout_s, quick, cluster.scenario)
    dead = cluster.dead_nodes()
    if dead:
        # The test may have passed, but a node died under it: a broker bug. The next
        # tests get a fresh cluster.
        outcome.verdict = "FAILED"
        outcome.detail = "cluster node died: " + ", ".join(dead)
        cluster.restart()
    return outcome


def summarize(outcomes: list[Outcome], wall_s: float, listed_only: bool) -> int:
    """Print the summary; return the exit code."""
    by: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by.setdefault(o.verdict, []).append(o)
    print("\n=== librdkafka conformance summary ===")
    for verdict in ("PASSED", "SKIPPED", "FAILED", "TIMEOUT", "CRASHED"):
        group = by.get(verdict, [])
        if not group:
            continue
        print(f"{verdict} ({len(group)}): {' '.join(o.number for o in group)}")
        if verdict != "PASSED":
            for o in group:
                print(f"  {o.number}: {o.reasons or '(no reason given)'}  [log {o.log}]")
    bad = [o for o in outcomes if o.verdict in ("FAILED", "TIMEOUT", "CRASHED")]
    if listed_only:
        bad = [o for o in bad if o.number in ALLOWLIST]
        passing_unlisted = [
            o.number for o in outcomes if o.verdict == "PASSED" and o.number not in ALLOWLIST
        ]
        if passing_unlisted:
            print(f"passing but not on the allowlist: {' '.join(passing_unlisted)}")
        newly_failing = [o.number for o in bad]
        if newly_failing:
            print(f"allowlisted but failing: {' '.join(newly_failing)}")
    passed = len(by.get("PASSED", []))
    print(f"{passed} of {len(outcomes)} passed in {wall_s:.0f}s wall time")
    return 1 if bad else 0


def _exit_on_sigterm(signum: int, frame: object) -> None:
    # Unwinds like Ctrl-C: the with-blocks stop the runner and the cluster on the way out.
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    t0 = time.monotonic()
    try:
        build = ensure_built()
    except BuildError as exc:
        print(f"conformance: cannot build librdkafka's test runner: {exc}", file=sys.stderr)
        return 2
    table = suite_tests(build)
    problems = check_complete(table)
    if problems:
        print("conformance: the allowlist is incomplete:\n  " + "\n  ".join(problems),
              file=sys.stderr)  # fmt: skip
        return 2
    if args.build_only:
        print(f"conformance: runner built: {build.runner}")
        return 0
    try:
        numbers = pick_tests(args, table)
    except ValueError as exc:
        print(f"conformance: {exc}", file=sys.stderr)
        return 2
    for n in numbers:
        if n in NOT_LISTED and not args.all:
            print(f"conformance: note: {n} is not on the allowlist: {NOT_LISTED[n]}")
    try:
        outcomes = run_all(numbers, table, build, args.log_dir, args.timeout, args.quick)
    except LauncherError as exc:
        print(f"conformance: the cluster did not start: {exc}", file=sys.stderr)
        return 2
    return summarize(outcomes, time.monotonic() - t0, listed_only=args.all)


if __name__ == "__main__":
    sys.exit(main())
