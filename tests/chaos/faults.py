"""The nemesis at run time: applies a Schedule (tests/chaos/schedule.py) to an NsCluster at
its times, resolving symbolic targets against the cluster's state when each fault fires,
and heals everything at the end. Every action goes into `events` (time, what, resolved
target) so a failing run shows what actually happened.

Overlapping link cuts are reference-counted: a cut stays while any active fault wants it,
and the filters of a namespace are rebuilt whenever its set changes.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from kraft.tools.launcher import active_controller, cluster_state
from tests.chaos.hosts import NsCluster
from tests.chaos.net import fill_disk, free_disk
from tests.chaos.schedule import Fault, Schedule


class Nemesis:
    def __init__(self, cluster: NsCluster, schedule: Schedule) -> None:
        self.c = cluster
        self.schedule = schedule
        self.events: list[dict[str, Any]] = []
        self.t0 = 0.0
        self._cuts: Counter[tuple[int, int]] = Counter()
        self._resolved: dict[int, list[int]] = {}  # fault index -> node ids it hit

    def log(self, what: str, **extra: Any) -> None:
        event = {"t": round(time.monotonic() - self.t0, 2), "what": what, **extra}
        self.events.append(event)
        print(f"    nemesis {event['t']:6.2f}s {what} {extra if extra else ''}", flush=True)

    # -- the timeline -----------------------------------------------------------------------

    def run(self, t0: float) -> float:
        """Apply every start and heal at its time (t0: time.monotonic() at the workload's
        start); returns time.monotonic() when the last fault healed."""
        self.t0 = t0
        timeline = sorted(
            [(f.at_s, 1, i) for i, f in enumerate(self.schedule.faults)]
            + [(f.heal_s, 0, i) for i, f in enumerate(self.schedule.faults)]
        )  # heals before starts at the same instant
        for at, is_start, i in timeline:
            delay = t0 + at - time.monotonic()
            if delay > 0:
                time.sleep(delay)  # the schedule's own clock, not a synchronisation
            fault = self.schedule.faults[i]
            try:
                self._start(i, fault) if is_start else self._heal(i, fault)
            except Exception as exc:  # noqa: BLE001 - a fault that cannot apply is logged
                self.log("error", fault=fault.describe(), error=repr(exc))
        self.heal_everything()
        return time.monotonic()

    def _start(self, i: int, f: Fault) -> None:
        if f.kind in ("kill", "pause-short", "pause-long"):
            node = self.resolve(f.target)
            if node is None:
                self.log(f"{f.kind}: no node for target", target=f.target)
                return
            self._resolved[i] = [node]
            n = self.c.node(node)
            if f.kind == "kill":
                n.kill()
            else:
                n.pause()
            self.log(f.kind, target=f.target, node=node)
        elif f.cuts:
            for cut in f.cuts:
                src, dst = (int(x) for x in cut.split(">"))
                self._cuts[(src, dst)] += 1
            self._apply_cuts()
            self.log(f.kind, target=f.target, links=len(f.cuts))
        elif f.kind == "crash-all":
            for n in self.c.nodes:
                n.kill()
            self.log("crash-all")
        elif f.kind == "disk-full":
            fill_disk(self.c.disk_mount)
            self.log("disk-full", node=self.c.disk_broker)

    def _heal(self, i: int, f: Fault) -> None:
        if f.kind in ("kill", "pause-short", "pause-long"):
            for node in self._resolved.pop(i, []):
                n = self.c.node(node)
                if f.kind == "kill" and not n.running:
                    n.start()
                elif f.kind != "kill":
                    n.resume()
                self.log(f"heal {f.kind}", node=node)
        elif f.cuts:
            for cut in f.cuts:
                src, dst = (int(x) for x in cut.split(">"))
                self._cuts[(src, dst)] -= 1
            self._cuts += Counter()  # drop zero counts
            self._apply_cuts()
            self.log(f"heal {f.kind}", target=f.target)
        elif f.kind == "crash-all":
            self._start_stopped()
            self.log("heal crash-all")
        elif f.kind == "disk-full":
            free_disk(self.c.disk_mount)
            self.log("heal disk-full")

    def heal_everything(self) -> None:
        self._cuts.clear()
        self.c.net.heal_all()
        free_disk(self.c.disk_mount)
        for n in self.c.nodes:
            n.resume()
        self._start_stopped()
        self.log("healed everything")

    def _start_stopped(self) -> None:
        # Controllers first: a broker starting without a quorum only retries longer.
        for n in [*self.c.controllers, *self.c.brokers]:
            if not n.running:
                n.start()

    def _apply_cuts(self) -> None:
        net = self.c.net
        net.heal_all()
        for src, dst in sorted(self._cuts):
            net.cut(src, dst)

    # -- targets ----------------------------------------------------------------------------

    def resolve(self, target: str) -> int | None:
        """A symbolic target -> a node id, from the cluster's state now."""
        kind, _, rest = target.partition(":")
        if kind == "node":
            return int(rest.split()[0])
        if kind == "active-controller":
            active = active_controller(self.c.controllers)
            if active is not None:
                return active.node_id
            running = [n.node_id for n in self.c.controllers if n.running]
            return running[0] if running else None
        if kind in ("leader", "follower"):
            topic, _, part = rest.partition("/")
            state = cluster_state(self.c.controllers) or {}
            for t in state.get("topics", []):
                if t["name"] != topic:
                    continue
                for p in t["partitions"]:
                    if p["partition"] != int(part):
                        continue
                    if kind == "leader":
                        return p["leader"] if p["leader"] >= 0 else None
                    followers = sorted(r for r in p["replicas"] if r != p["leader"])
                    return followers[0] if followers else None
            # Unknown (no controller answers): fall back to the first broker.
            return self.c.brokers[0].node_id
        return None
