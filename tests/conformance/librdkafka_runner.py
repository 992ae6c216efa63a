"""Run librdkafka's integration tests, one test number at a time, against a local cluster.

    with ConformanceCluster(work_dir) as cluster:
        conf = cluster.write_test_conf()             # <work_dir>/test-default.conf
        outcome = run_number(build, "0001", conf, log_dir, timeout_s=300)

The cluster is `kraft dev`'s shape (3 controllers, 3 brokers, one process each) started
through kraft/tools/local_cluster.py, set up as the suite's scenario asks (see
tests/conformance/librdkafka_suite.py) and its cluster tool would. The runner is
librdkafka's own: quick mode (`-Q`), local-only tests filtered (`-L`; the sockem tests
run: their socket emulation is the client's), one test at a time (`-p1`),
TEST_KAFKA_VERSION telling it which broker features to expect.
Its summary table gives each sub-test's state and, for a skip or a failure, the reason.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from common.properties import read_properties
from kraft.tools.local_cluster import (
    Cluster,
    plan_cluster,
    start_cluster,
    stop_cluster,
    write_configs,
)
from tests.conformance.librdkafka_build import Build
from tests.conformance.librdkafka_suite import DEFAULT_SCENARIO, SCENARIO_PROPS

# Our broker answers Kafka 4.0's protocol floor (KIP-896: Produce v3+, Fetch v4+, ...),
# and not 4.2's share groups: 4.0.0 makes the suite skip what 4.0 removed and expect what
# 4.0 has.
KAFKA_VERSION = "4.0.0"
# Quick mode runs only the sub-tests marked SUB_TEST_QUICK and with less data;
# `quick=False` runs them all (much longer).
RUNNER_FLAGS = ("-L", "-p1")
# Beside the scenario's settings: the authorizer on, so that the ACL admin API answers
# (0081 creates, describes and deletes ACLs), with the plaintext listener's principal,
# User:ANONYMOUS, a super user so that no test is refused anything; each broker in a rack
# of its own as the suite's cluster tool (trivup) sets them up (broker.rack=RACK<id>).
# group.initial.rebalance.delay.ms keeps Kafka's default (3 s): the group tests expect
# members that join together to land in one generation (0113).
BROKER_PROPS = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}
# The Python broker is slower than Kafka's: the suite's own timeouts get this factor.
TIMEOUT_MULTIPLIER = 2.0

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_ROW = re.compile(r"^\|\s*(\d{4}\S*)\s*\|\s*([A-Z ]+?)\s*\|\s*([\d.]+)s\s*\|\s*(.*?)\s*$")
# `### Test "0029_assign_offset" failed at test.c:2520:fn() at <date>: ###` + message line
_FAILURE = re.compile(r'^### Test "([^"]+)" failed at (\S+) at [^#]*###\n(.*)$', re.M)


@dataclass(frozen=True)
class SubResult:
    name: str  # e.g. 0045_subscribe_update
    state: str  # PASSED, FAILED, SKIPPED, ...
    seconds: float
    reason: str  # the failure or skip message, if any


@dataclass
class Outcome:
    number: str
    verdict: str  # PASSED, FAILED, SKIPPED (every sub-test skipped), TIMEOUT, CRASHED
    seconds: float
    results: list[SubResult] = field(default_factory=list)
    log: Path | None = None
    detail: str = ""

    @property
    def reasons(self) -> str:
        picked = [r for r in self.results if r.state != "PASSED" and r.reason]
        return "; ".join(f"{r.name}: {r.reason}" for r in picked) or self.detail


def merge_outcomes(a: Outcome, b: Outcome) -> Outcome:
    """One number's outcomes in two scenarios: a failure in either fails it, a pass in
    either (and no failure) passes it."""
    rank = {"PASSED": 1, "SKIPPED": 0}
    worst = a if rank.get(a.verdict, 2) >= rank.get(b.verdict, 2) else b
    return Outcome(
        a.number,
        worst.verdict,
        a.seconds + b.seconds,
        a.results + b.results,
        worst.log,
        "; ".join(d for d in (a.detail, b.detail) if d),
    )


def parse_summary(output: str) -> list[SubResult]:
    results = []
    for line in _ANSI.sub("", output).splitlines():
        m = _ROW.match(line)
        if m:
            name, state, secs, reason = m.groups()
            results.append(SubResult(name, state.strip(), float(secs), reason))
    return results


def parse_failures(output: str) -> list[SubResult]:
    """The runner's failure banners: on a failure it often aborts before its summary."""
    return [
        SubResult(name.split(" (")[0], "FAILED", 0.0, f"{where}: {message.strip()}")
        for name, where, message in _FAILURE.findall(_ANSI.sub("", output))
        if name != "<MAIN>"
    ]


def run_number(
    build: Build,
    number: str,
    conf: Path,
    log_dir: Path,
    timeout_s: float,
    quick: bool = True,
    scenario: str = DEFAULT_SCENARIO,
) -> Outcome:
    """One test number (all its sub-tests) in its own runner process, with the test.conf
    `conf` (RDKAFKA_TEST_CONF: runs in parallel, e.g. make test and make conformance, each
    keep their own)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    suffix = "" if scenario == DEFAULT_SCENARIO else f"-{scenario}"
    log = log_dir / f"{number}{suffix}.log"
    env = {
        **os.environ,
        "LD_LIBRARY_PATH": build.library_path,
        "TEST_KAFKA_VERSION": KAFKA_VERSION,
        "TESTS": number,
        "RDKAFKA_TEST_CONF": str(conf),
    }
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [str(build.runner), *(["-Q"] if quick else []), *RUNNER_FLAGS, "-s", scenario],
            cwd=build.tests_dir, stdout=out, stderr=subprocess.STDOUT, env=env,
            start_new_session=True,
        )  # fmt: skip
        try:
            rc: int | None = proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            rc = None
        finally:  # a timeout, or Ctrl-C on us: its own group, so nothing outlives it
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    seconds = time.monotonic() - t0
    output = log.read_text(errors="replace")
    results = parse_summary(output)
    failed = [r for r in results if r.state not in ("PASSED", "SKIPPED")]
    if not failed:
        failed = parse_failures(output)
        results += failed
    outcome = Outcome(number, "", seconds, results, log)
    if rc is None:
        outcome.verdict, outcome.detail = "TIMEOUT", f"killed after {timeout_s:.0f}s"
    elif failed or rc != 0:
        outcome.verdict = "FAILED" if results else "CRASHED"
        if not failed:
            outcome.detail = f"runner exited {rc}" + ("" if results else " without a summary")
    elif results and all(r.state == "SKIPPED" for r in results):
        outcome.verdict = "SKIPPED"
    elif not results:
        outcome.verdict, outcome.detail = "SKIPPED", "no sub-test ran (filtered)"
    else:
        outcome.verdict = "PASSED"
    return outcome


class ConformanceCluster:
    """3 controllers and 3 brokers on free ports under `work_dir`, set up as one of the
    suite's scenarios, for one run."""

    def __init__(
        self,
        work_dir: Path,
        scenario: str = DEFAULT_SCENARIO,
        controllers: int = 3,
        brokers: int = 3,
    ) -> None:
        self.work_dir = work_dir
        self.scenario = scenario
        self.shape = (controllers, brokers)
        self.cluster: Cluster | None = None
        self.restarts = 0

    def __enter__(self) -> ConformanceCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 90.0) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        data = self.work_dir / f"cluster-{self.scenario}-{self.restarts}"
        self.cluster = plan_cluster(data, *self.shape)
        props = SCENARIO_PROPS[self.scenario]
        write_configs(self.cluster, controller_props=props, broker_props={**props, **BROKER_PROPS})
        for b in self.cluster.brokers:  # trivup's broker.rack=RACK<id>: a rack per broker
            b.write_properties(
                {**read_properties(b.properties_path), "broker.rack": f"RACK{b.node_id}"}
            )
        try:
            start_cluster(self.cluster, timeout_s)
        except BaseException:
            stop_cluster(self.cluster)
            raise
        self.cluster.write_json()

    def stop(self) -> None:
        if self.cluster is not None:
            stop_cluster(self.cluster)
            self.cluster = None

    def dead_nodes(self) -> list[str]:
        assert self.cluster is not None
        return [
            f"{n.role} {n.node_id} (log {n.log_path})"
            for n in self.cluster.nodes
            if n.proc is None or n.proc.poll() is not None
        ]

    def restart(self) -> None:
        """A fresh cluster after a node died: the next tests must not inherit it."""
        self.stop()
        self.restarts += 1
        self.start()

    @property
    def bootstrap_servers(self) -> str:
        assert self.cluster is not None
        return self.cluster.bootstrap_servers

    def write_test_conf(self) -> Path:
        """The runner's test.conf for this cluster, in the work dir."""
        path = self.work_dir / f"test-{self.scenario}.conf"
        path.write_text(
            "# Written by tests/conformance/run_librdkafka.py for a local kraft cluster.\n"
            f"metadata.broker.list={self.bootstrap_servers}\n"
            f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}\n",
            encoding="utf-8",
        )
        return path


def iter_numbers(spec: str) -> Iterator[str]:
    """`0001,0002 0005` -> the 4-digit numbers, in order given."""
    for part in re.split(r"[,\s]+", spec.strip()):
        if part:
            if not re.fullmatch(r"\d{1,4}", part):
                raise ValueError(f"not a test number: {part!r} (e.g. 0001)")
            yield part.zfill(4)
