"""The conformance driver's reading of librdkafka's runner output and of the allowlist,
on output captured from real runs (no build needed)."""

from __future__ import annotations

from pathlib import Path

from tests.conformance.allowlist import ALLOWLIST, NOT_LISTED, check_complete
from tests.conformance.librdkafka_runner import (
    Outcome,
    SubResult,
    iter_numbers,
    merge_outcomes,
    parse_failures,
    parse_summary,
)

SUMMARY = (
    "TEST 20261126133216 (bare, scenario default) SUMMARY\n"
    "#==================================================================#\n"
    "|\x1b[32m <MAIN>                                   |     PASSED |   1.203s \x1b[0m|\n"
    "|\x1b[32m 0022_consume_batch                       |     PASSED |   1.006s \x1b[0m|\n"
    "|\x1b[36m 0022_consume_batch_local                 |    SKIPPED |   0.000s \x1b[0m|"
    "\x1b[36m Filtered due to negative test flags\x1b[0m\n"
    "#==================================================================#\n"
)

ABORTED = (
    "[0029_assign_offset          /  1.052s] TEST FAILURE\n"
    '### Test "0029_assign_offset" failed at test.c:2520:test_produce_msgs_nowait() at '
    "Thu Nov 26 13:32:21 2026: ###\n"
    "Failed to produce message 0 to partition 3: Local: Unknown partition\n"
    "[<MAIN>                      /  2.202s] TEST FAILURE\n"
    '### Test "<MAIN>" failed at test.c:1946:test_wait_exit() at Thu Nov 26 13:32:22 2026: ###\n'
    "5 thread(s) still active in librdkafka\n"
    "test-runner: test.c:7702: test_fail0: Assertion `0' failed.\n"
)


def test_summary_rows_with_states_and_skip_reasons() -> None:
    assert parse_summary(SUMMARY) == [
        SubResult("0022_consume_batch", "PASSED", 1.006, ""),
        SubResult(
            "0022_consume_batch_local", "SKIPPED", 0.0, "Filtered due to negative test flags"
        ),
    ]


def test_failure_banners_when_the_runner_aborts_before_its_summary() -> None:
    assert parse_summary(ABORTED) == []
    assert parse_failures(ABORTED) == [
        SubResult(
            "0029_assign_offset",
            "FAILED",
            0.0,
            "test.c:2520:test_produce_msgs_nowait(): Failed to produce message 0 to "
            "partition 3: Local: Unknown partition",
        )
    ]


def test_a_failure_in_either_scenario_fails_the_number() -> None:
    def outcome(verdict: str) -> Outcome:
        return Outcome("0045", verdict, 1.0, [], Path(f"{verdict}.log"))

    assert merge_outcomes(outcome("PASSED"), outcome("FAILED")).verdict == "FAILED"
    assert merge_outcomes(outcome("TIMEOUT"), outcome("PASSED")).verdict == "TIMEOUT"
    assert merge_outcomes(outcome("SKIPPED"), outcome("PASSED")).verdict == "PASSED"
    assert merge_outcomes(outcome("SKIPPED"), outcome("SKIPPED")).verdict == "SKIPPED"
    assert merge_outcomes(outcome("PASSED"), outcome("FAILED")).log == Path("FAILED.log")


def test_test_numbers_from_the_command_line() -> None:
    assert list(iter_numbers("1, 0012 45")) == ["0001", "0012", "0045"]
    try:
        list(iter_numbers("0001,abc"))
    except ValueError as exc:
        assert "abc" in str(exc)
    else:
        raise AssertionError("a bad test number was accepted")


def test_allowlist_check_finds_missing_doubled_and_unknown_numbers() -> None:
    suite = sorted(ALLOWLIST | NOT_LISTED.keys())
    assert check_complete(suite) == []
    assert check_complete([*suite, "0198"]) == ["0198: neither allowlisted nor given a reason"]
    assert check_complete([n for n in suite if n != "0001"]) == ["0001: not a test of this suite"]
    assert all(reason.strip() for reason in NOT_LISTED.values())
