"""librdkafka's test table (tests/test.c `struct test tests[]`) and its test scenarios.

A test number (`0045`) groups sub-tests (`0045_subscribe_update`, ...), each with flags
(TEST_F_LOCAL: needs no broker; TEST_F_SOCKEM; TEST_F_KNOWN_ISSUE) and the scenarios it
runs in: the cluster configurations of tests/scenarios/*.json, "default" unless the
table says otherwise. A scenario's tests need a cluster set up that way and the runner
told so (`-s <scenario>`); the others it skips silently.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from tests.conformance.librdkafka_build import Build

DEFAULT_SCENARIO = "default"
# tests/scenarios/*.json as broker and controller properties: auto-created topics get 4
# partitions and RF 3 in both; "noautocreate" turns auto-creation off.
SCENARIO_PROPS: dict[str, dict[str, str]] = {
    "default": {"num.partitions": "4", "default.replication.factor": "3"},
    "noautocreate": {
        "num.partitions": "4",
        "default.replication.factor": "3",
        "auto.create.topics.enable": "false",
    },
}

_ENTRY = re.compile(r"\s*(\d{4})(\w*)\s*,\s*([^,)]*)")
_SCENARIO = re.compile(r'\.scenario\s*=\s*"([^"]*)"')


class SuiteTest(NamedTuple):
    name: str  # e.g. 0045_subscribe_update
    flags: str  # e.g. TEST_F_LOCAL, or 0
    scenarios: tuple[str, ...]

    @property
    def local(self) -> bool:
        return "TEST_F_LOCAL" in self.flags


Table = dict[str, list[SuiteTest]]


def suite_tests(build: Build) -> Table:
    """Test number -> its sub-tests, in the table's order."""
    text = build.test_c.read_text(errors="replace")
    start = text.index("struct test tests[]")
    body = text[start : text.index("\n};", start)]
    table: Table = {}
    for chunk in body.split("_TEST(")[1:]:
        m = _ENTRY.match(chunk)
        if not m:
            continue
        number, rest, flags = m.groups()
        sc = _SCENARIO.search(chunk)
        scenarios = tuple(sc.group(1).split(",")) if sc else (DEFAULT_SCENARIO,)
        table.setdefault(number, []).append(SuiteTest(number + rest, flags.strip(), scenarios))
    return table


def needs_broker(entries: list[SuiteTest]) -> bool:
    """A number with any sub-test not flagged TEST_F_LOCAL talks to a real cluster."""
    return any(not t.local for t in entries)


def scenarios_of(entries: list[SuiteTest]) -> list[str]:
    """The scenarios we can set up that this number's broker tests run in."""
    found = {s for t in entries if not t.local for s in t.scenarios if s in SCENARIO_PROPS}
    return sorted(found, key=lambda s: (s != DEFAULT_SCENARIO, s))
