"""The checker finds each anomaly class in a synthetic history, and nothing in a clean one
(so a campaign that reports no anomalies could have reported them)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.chaos.checker import CLASSES, check


def clean() -> dict[str, Any]:
    """p0 wrote a, b, c to t/0 at offsets 0-2 (all acknowledged); g0 and the drain read them;
    both clients progressed after the heal at t=10."""
    values = ["p0-0", "p0-1", "p0-2"]
    return {
        "sends": [
            {"producer": "p0", "value": v, "topic": "t", "partition": 0, "status": "ok",
             "offset": i, "t": 9.0 + i}
            for i, v in enumerate(values)
        ],
        "polls": [
            {"consumer": "g0", "gen": 1, "topic": "t", "partition": 0, "offset": i, "value": v,
             "t": 9.5 + i}
            for i, v in enumerate(values)
        ],
        "drain": {"t/0": {"records": [[i, v] for i, v in enumerate(values)], "end": 3}},
        "liveness": {"heal_t": 10.0, "window_s": 30.0, "producers": ["p0"],
                     "consumers": ["g0"]},
    }  # fmt: skip


def only(result: dict[str, Any], cls: str) -> None:
    assert not result["ok"], result
    assert result["counts"][cls] > 0, result
    others = {c: n for c, n in result["counts"].items() if n and c != cls}
    assert not others, f"only {cls} expected, also found {others}: {result['examples']}"


def test_clean_history_passes() -> None:
    result = check(clean())
    assert result["ok"], result
    assert result["sends"] == {"ok": 3} and result["drained"] == 3


def test_lost_acknowledged_write() -> None:
    h = clean()
    del h["drain"]["t/0"]["records"][1]  # offset 1 gone while the drain read offset 2
    h["polls"] = [p for p in h["polls"] if p["offset"] != 1]
    only(check(h), "lost")


def test_unseen_when_drain_stops_below_the_ack() -> None:
    h = clean()
    h["drain"]["t/0"] = {"records": h["drain"]["t/0"]["records"][:2], "end": 2}
    h["polls"] = h["polls"][:2] + [dict(h["polls"][2], value="p0-1", offset=1, t=11.6)]
    h["polls"] = h["polls"][:2]
    h["polls"].append(dict(h["polls"][1], t=11.7, gen=2))  # g0 still progresses
    only(check(h), "unseen")


def test_incomplete_drain_is_unseen_not_lost() -> None:
    h = clean()
    h["drain"]["t/0"]["records"].pop()
    h["drain"]["t/0"]["incomplete"] = True
    h["polls"].pop()
    h["polls"].append(dict(h["polls"][0], t=12.0, gen=2))
    only(check(h), "unseen")


def test_duplicate_value_at_two_offsets() -> None:
    h = clean()
    h["drain"]["t/0"]["records"].append([3, "p0-2"])
    h["drain"]["t/0"]["end"] = 4
    assert check(h)["counts"]["duplicate"] == 1


def test_inconsistent_offset_two_values() -> None:
    h = clean()
    h["polls"][0] = dict(h["polls"][0], value="p0-9")  # offset 0 read as another value
    h["sends"].append({"producer": "p0", "value": "p0-9", "topic": "t", "partition": 0,
                       "status": "failed", "t": 9.9})  # fmt: skip
    only(check(h), "inconsistent")


def test_inconsistent_ack_offset_differs_from_log() -> None:
    h = clean()
    h["sends"][2] = dict(h["sends"][2], offset=7)
    result = check(h)
    assert result["counts"]["inconsistent"] == 1, result
    assert result["examples"]["inconsistent"][0]["found_at"] == 2


def test_an_ack_without_an_offset_is_owed_but_has_no_offset_to_compare() -> None:
    """librdkafka's implicit ack (a later batch of the producer succeeded) carries no
    offset: present once is clean (seed 942722353 was reported inconsistent), absent from a
    finished drain is lost, absent from an unfinished one is unseen."""
    h = clean()
    h["sends"][1] = dict(h["sends"][1], offset=None)
    result = check(h)
    assert result["ok"] and result["acked_without_offset"] == 1, result
    h["drain"]["t/0"]["records"].pop(1)
    h["polls"] = [p for p in h["polls"] if p["offset"] != 1]
    only(check(h), "lost")
    h["drain"]["t/0"]["incomplete"] = True
    only(check(h), "unseen")
    h = clean()
    h["sends"][1] = dict(h["sends"][1], offset=None)
    h["drain"]["t/0"]["records"].append([3, "p0-1"])
    h["drain"]["t/0"]["end"] = 4
    only(check(h), "duplicate")


def test_phantom_value_nobody_sent() -> None:
    h = clean()
    h["drain"]["t/0"]["records"].append([3, "zz-1"])
    h["drain"]["t/0"]["end"] = 4
    only(check(h), "phantom")


def test_non_monotonic_poll_within_one_assignment() -> None:
    h = clean()
    h["polls"].append(dict(h["polls"][1], t=12.5))  # offset 1 again, same generation
    only(check(h), "non-monotonic")


def test_rereading_after_a_new_assignment_is_fine() -> None:
    h = clean()
    h["polls"].append(dict(h["polls"][1], t=12.5, gen=2))
    assert check(h)["ok"]


@pytest.mark.parametrize("who", ["producer", "consumer"])
def test_stalled_client_after_heal(who: str) -> None:
    h = clean()
    if who == "producer":
        for s in h["sends"]:
            s["t"] = 9.0  # every acknowledgement before the heal
    else:
        for p in h["polls"]:
            p["t"] = 9.0
    result = check(h)
    only(result, "stalled")
    assert who in result["examples"]["stalled"][0]


def test_every_class_has_a_test() -> None:
    tested = {"lost", "unseen", "duplicate", "inconsistent", "phantom", "non-monotonic",
              "stalled"}  # fmt: skip
    assert set(CLASSES) == tested
    assert copy.deepcopy(clean()) == clean()
