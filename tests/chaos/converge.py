"""Before the final read: wait until every broker's Metadata answer agrees with the
controllers on each partition's leader and leader epoch.

The drain reads each partition up to the high watermark its leader gives. Just after the
faults heal, a broker that was cut off or paused may still serve an old image: a deposed
leader then answers ListOffsets with its own, older high watermark, and records acknowledged
by the new leader look unseen (seed 3751298459: broker 5, paused while it was fenced and
replaced, still believed it led). Jepsen's final reads likewise come after the cluster
settles. A broker that never catches up within the deadline is named in the results and
the drain goes ahead, so a real metadata stall still shows.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from kraft.tools.launcher import NodeProcess, cluster_state
from tests.harness.raw_protocol import RawClient, request

METADATA, METADATA_VERSION = 3, 7  # v7: the leader epoch of each partition

View = dict[tuple[str, int], tuple[int, int]]  # (topic, partition) -> (leader, leader epoch)


def controller_view(controllers: Iterable[NodeProcess], topics: list[str]) -> View | None:
    state = cluster_state(controllers)
    if state is None:
        return None
    out: View = {}
    for t in state.get("topics", []):
        if t["name"] in topics:
            for p in t["partitions"]:
                out[(t["name"], p["partition"])] = (p["leader"], p["leader_epoch"])
    return out


def broker_view(address: str, topics: list[str]) -> View | None:
    """The broker's own answer (asked on its own connection), or None if it gives none."""
    host, port = address.rsplit(":", 1)
    body = request(METADATA, METADATA_VERSION, {
        "topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False,
    })  # fmt: skip
    try:
        client = RawClient(host, int(port), timeout=2)
        try:
            resp: Any = client.call(METADATA, METADATA_VERSION, body)
        finally:
            client.close()
    except OSError:
        return None
    return {
        (t.name, p.partition_index): (p.leader_id, p.leader_epoch)
        for t in resp.topics
        for p in t.partitions
    }


def wait_converged(
    controllers: list[NodeProcess], brokers: list[NodeProcess], topics: list[str], timeout_s: float
) -> list[int]:
    """Wait until every running broker's view equals the controllers' (at most
    `timeout_s`); returns the brokers that still disagree (empty: converged)."""
    deadline = time.monotonic() + timeout_s
    while True:
        want = controller_view(controllers, topics)
        behind = [
            b.node_id
            for b in brokers
            if b.running and (want is None or broker_view(b.address, topics) != want)
        ]
        if not behind or time.monotonic() > deadline:
            return behind
        time.sleep(0.2)
