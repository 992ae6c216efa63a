"""Jepsen's anomaly classes over one run's history (shared/notes/reliability.md). Pure: the
history is plain data, so the unit tests feed it synthetic histories with each anomaly.

A history holds:
- sends: every produce attempt, {"producer", "value", "topic", "partition", "status"
  ("ok" | "failed" | "unknown"), "offset" (for "ok"; None when librdkafka acknowledged
  it without one), "t"}; a failed or unknown send may
  or may not be in the log (a timed-out idempotent send is indefinite), so only "ok"
  sends are owed;
- polls: every record a consumer returned, {"consumer", "gen", "topic", "partition",
  "offset", "value", "t"}; `gen` changes when a group member's assignment changes (it
  then restarts from the committed offsets, which is not a non-monotonic poll);
- drain: the final read of every partition from the beginning by assign,
  {"topic/partition": {"records": [[offset, value], ...], "end": high watermark}};
- liveness: {"heal_t", "window_s", "producers": [...], "consumers": [...]}: every
  producer must have an "ok" send and every consumer a poll in (heal_t, heal_t+window].

Classes: lost (acknowledged, absent from the drain although the drain read past its
offset), unseen (acknowledged at an offset the drain never reached: above the final high
watermark, or the drain of that partition did not finish), duplicate (one value at two
offsets), inconsistent (one offset, two values; or a value found at another offset than
its acknowledgement said), phantom (a value read that no producer sent), non-monotonic (a
consumer's offsets in one partition went back or repeated within one assignment), stalled
(no progress after the faults healed).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

CLASSES = (
    "lost", "unseen", "duplicate", "inconsistent", "phantom", "non-monotonic", "stalled",
)  # fmt: skip
_EXAMPLES = 5  # kept per class in the results


def check(history: dict[str, Any]) -> dict[str, Any]:
    sends: list[dict[str, Any]] = history.get("sends", [])
    polls: list[dict[str, Any]] = history.get("polls", [])
    drain: dict[str, dict[str, Any]] = history.get("drain", {})
    found: dict[str, list[Any]] = {c: [] for c in CLASSES}

    # Every (tp, offset) -> values seen there, and every value -> where it was seen.
    at_offset: dict[tuple[str, int], set[str]] = defaultdict(set)
    where: dict[str, set[tuple[str, int]]] = defaultdict(set)
    drained: dict[str, dict[str, int]] = {}  # tp -> value -> offset
    for tp, part in drain.items():
        drained[tp] = {}
        for offset, value in part.get("records", []):
            at_offset[(tp, offset)].add(value)
            where[value].add((tp, offset))
            drained[tp][value] = offset
    for p in polls:
        tp = f"{p['topic']}/{p['partition']}"
        at_offset[(tp, p["offset"])].add(p["value"])
        where[p["value"]].add((tp, p["offset"]))

    for (tp, offset), values in sorted(at_offset.items()):
        if len(values) > 1:
            found["inconsistent"].append({"tp": tp, "offset": offset, "values": sorted(values)})
    for value, places in sorted(where.items()):
        if len(places) > 1:
            found["duplicate"].append({"value": value, "at": sorted(places)})

    sent_values = {s["value"] for s in sends}
    for value in sorted(where):
        if value not in sent_values:
            found["phantom"].append({"value": value, "at": sorted(where[value])})

    without_offset = 0
    for s in sends:
        if s["status"] != "ok":
            continue
        tp = f"{s['topic']}/{s['partition']}"
        part = drain.get(tp, {"records": [], "end": 0})
        got = drained.get(tp, {}).get(s["value"])
        if got is None:
            # Lost only if the drain read everything up to an end past the ack's offset. An
            # ack without an offset (below) was committed when it came, so under the final
            # HW: lost if the drain finished.
            if s["offset"] is None:
                beyond = not part.get("incomplete")
            else:
                beyond = part.get("end", 0) > s["offset"] and not part.get("incomplete")
            cls = "lost" if beyond else "unseen"
            found[cls].append({"value": s["value"], "tp": tp, "acked_offset": s["offset"],
                               "drain_end": part.get("end", 0)})  # fmt: skip
        elif s["offset"] is None:
            # librdkafka acknowledges without an offset a message whose request timed out
            # when a later batch of the same idempotent producer succeeds ("implicitly
            # acked by subsequent batch success"): the sequence proves it written, but not
            # where. It is owed (lost and duplicate apply), with no offset to compare.
            without_offset += 1
        elif got != s["offset"]:
            found["inconsistent"].append(
                {"value": s["value"], "tp": tp, "acked_offset": s["offset"], "found_at": got}
            )

    last: dict[tuple[str, Any, str], int] = {}
    for p in polls:
        key = (p["consumer"], p.get("gen", 0), f"{p['topic']}/{p['partition']}")
        prev = last.get(key)
        if prev is not None and p["offset"] <= prev:
            found["non-monotonic"].append(
                {"consumer": p["consumer"], "tp": key[2], "after": prev, "got": p["offset"]}
            )
        last[key] = p["offset"]

    live = history.get("liveness")
    if live is not None:
        lo, hi = live["heal_t"], live["heal_t"] + live["window_s"]
        for prod in live.get("producers", []):
            if not any(s["producer"] == prod and s["status"] == "ok" and lo < s["t"] <= hi
                       for s in sends):  # fmt: skip
                found["stalled"].append({"producer": prod})
        for cons in live.get("consumers", []):
            if not any(p["consumer"] == cons and lo < p["t"] <= hi for p in polls):
                found["stalled"].append({"consumer": cons})

    statuses = defaultdict(int)
    for s in sends:
        statuses[s["status"]] += 1
    return {
        "ok": not any(found.values()),
        "counts": {c: len(v) for c, v in found.items()},
        "examples": {c: v[:_EXAMPLES] for c, v in found.items() if v},
        "sends": dict(statuses),
        "acked_without_offset": without_offset,
        "polls": len(polls),
        "drained": sum(len(p.get("records", [])) for p in drain.values()),
    }


def summary_line(seed: int, result: dict[str, Any], seconds: float) -> str:
    counts = result["counts"]
    bad = " ".join(f"{c}={n}" for c, n in counts.items() if n) or "no anomalies"
    s = result["sends"]
    verdict = "PASS" if result["ok"] else "FAIL"
    return (
        f"seed {seed}: {verdict} {bad}; acked {s.get('ok', 0)} failed {s.get('failed', 0)} "
        f"unknown {s.get('unknown', 0)} polled {result['polls']} drained {result['drained']} "
        f"({seconds:.1f}s)"
    )
