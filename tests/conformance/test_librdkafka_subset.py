"""A fast subset of `make conformance` in `make test`: a handful of quick allowlisted
librdkafka integration tests (produce, consume, groups, offsets, idempotence, admin)
against one local 3+3 cluster.

The runner is built on first use (a few minutes on 2 cores; cached under .cache/). A
missing vendored tarball (a checkout without ../shared) skips with the reason; any other
reason the runner cannot be built (no compiler, a failed build) fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.allowlist import ALLOWLIST, check_complete
from tests.conformance.librdkafka_build import BuildError, VendorMissing, ensure_built
from tests.conformance.librdkafka_runner import ConformanceCluster, run_number
from tests.conformance.librdkafka_suite import suite_tests

# Quick in quick mode (seconds each) and spread over what clients lean on.
SUBSET = (
    "0001",  # create, produce, destroy several client instances
    "0012",  # produce and consume, several partitions
    "0030",  # offset commit and fetch, sync and async
    "0035",  # ApiVersions negotiation
    "0063",  # cluster id in Metadata
    "0090",  # idempotent producer
    "0099",  # commit metadata round trip
)


def test_subset_is_allowlisted() -> None:
    assert set(SUBSET) <= ALLOWLIST, set(SUBSET) - ALLOWLIST


def test_librdkafka_subset(tmp_path: Path) -> None:
    try:
        build = ensure_built()
    except VendorMissing as exc:
        pytest.skip(f"librdkafka's tarball is not vendored here: {exc}")
    except BuildError as exc:
        pytest.fail(f"cannot build librdkafka's test runner: {exc}", pytrace=False)
    # Every test number of the built suite is listed or has its reason.
    assert not check_complete(suite_tests(build)), check_complete(suite_tests(build))
    failures = []
    with ConformanceCluster(tmp_path / "cluster") as cluster:
        conf = cluster.write_test_conf()
        for number in SUBSET:
            outcome = run_number(build, number, conf, tmp_path / "logs", timeout_s=120)
            if outcome.verdict != "PASSED":
                tail = "\n".join(outcome.log.read_text(errors="replace").splitlines()[-15:])
                failures.append(f"{number} {outcome.verdict}: {outcome.reasons}\n{tail}")
        assert not cluster.dead_nodes(), cluster.dead_nodes()
    assert not failures, "\n\n".join(failures)
