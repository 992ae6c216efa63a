"""A local cluster (controllers + brokers) as separate processes that a test can crash,
pause and restart one node at a time: SIGKILL, SIGSTOP / SIGCONT, start again on the
same data. Planned and started by kraft/tools/local_cluster.py (the path `kraft dev`
takes), not by the `kraft dev` command, which owns its children.

    with ProcCluster(tmp_path, broker_props={"replica.lag.time.max.ms": "1500"}) as c:
        c.start()
        c.kill_broker(4); c.restart_broker(4)
        ...

Every wait is a condition under a deadline; a timed-out wait raises AssertionError with
the tails of every node's log.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kraft.tools.launcher import NodeProcess, active_controller, cluster_state, unfenced_brokers
from kraft.tools.local_cluster import Cluster, plan_cluster, start_cluster, write_configs

T = TypeVar("T")
POLL_S = 0.05


def wait_for(probe: Callable[[], T | None], timeout_s: float, what: str,
             logs: Callable[[], str] = lambda: "") -> T:
    """Poll `probe` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            value = probe()
        except Exception as exc:  # noqa: BLE001 - a probe may fail while nodes restart
            value, last = None, exc
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            extra = f" (last probe error: {last!r})" if last is not None else ""
            raise AssertionError(
                f"timed out after {timeout_s:.0f}s waiting for {what}{extra}\n{logs()}"
            )
        time.sleep(POLL_S)


_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ")


def collapse_repeats(lines: list[str]) -> list[str]:
    """Consecutive lines equal but for their timestamp become one, with a count."""
    out: list[str] = []
    run = 0
    for i, line in enumerate(lines):
        key = _TIMESTAMP.sub("", line)
        nxt = _TIMESTAMP.sub("", lines[i + 1]) if i + 1 < len(lines) else None
        run += 1
        if key != nxt:
            out.append(line if run == 1 else f"{line}  [x{run}, this line repeated]")
            run = 0
    return out


class ProcCluster:
    """3 controllers + 3 brokers (by default) under `data_dir`, each its own process."""

    def __init__(
        self,
        data_dir: Path,
        *,
        n_controllers: int = 3,
        n_brokers: int = 3,
        controller_props: Mapping[str, str] | None = None,
        broker_props: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster: Cluster = plan_cluster(data_dir, n_controllers, n_brokers)
        self.controller_props = dict(controller_props or {})
        self.broker_props = dict(broker_props or {})

    # -- nodes -------------------------------------------------------------------------------

    @property
    def controllers(self) -> list[NodeProcess]:
        return self.cluster.controllers

    @property
    def brokers(self) -> list[NodeProcess]:
        return self.cluster.brokers

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def broker(self, node_id: int) -> NodeProcess:
        return next(b for b in self.brokers if b.node_id == node_id)

    def controller(self, node_id: int) -> NodeProcess:
        return next(c for c in self.controllers if c.node_id == node_id)

    def logs(self, lines: int = 25) -> str:
        """The last `lines` lines of every node's log, runs of repeats collapsed."""
        out = []
        for node in self.cluster.nodes:
            state = "running" if node.running else "down"
            tail = collapse_repeats(node.log_tail(20 * lines).splitlines())[-lines:]
            out.append(f"--- {node.role} {node.node_id} ({state}, {node.log_path}) ---")
            out.extend(tail)
        return "\n".join(out)

    # -- start / stop ------------------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        write_configs(
            self.cluster, controller_props=self.controller_props, broker_props=self.broker_props
        )
        start_cluster(self.cluster, timeout_s)

    def close(self) -> None:
        """Teardown: resume what we paused, then SIGKILL everything still running."""
        for node in [*self.brokers, *self.controllers]:
            node.resume()
            with contextlib.suppress(Exception):
                node.kill()

    def __enter__(self) -> ProcCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults ------------------------------------------------------------------------------

    def kill_broker(self, node_id: int) -> None:
        b = self.broker(node_id)
        assert b.running, f"broker {node_id} is not running"
        b.kill()

    def restart_broker(self, node_id: int) -> None:
        b = self.broker(node_id)
        assert not b.running, f"broker {node_id} is still running"
        b.start()

    def kill_controller(self, node_id: int) -> None:
        self.controller(node_id).kill()

    def restart_controller(self, node_id: int) -> None:
        self.controller(node_id).start()

    def pause_broker(self, node_id: int) -> None:
        b = self.broker(node_id)
        assert b.running, f"broker {node_id} is not running"
        b.pause()

    def resume_broker(self, node_id: int) -> None:
        self.broker(node_id).resume()

    # -- state -------------------------------------------------------------------------------

    def cluster_state(self) -> dict[str, Any] | None:
        """GET /v1/cluster from the active controller if one is known, else any."""
        return cluster_state(self.controllers)

    def partitions(self, topic: str) -> dict[int, dict[str, Any]] | None:
        """partition -> {replicas, isr, leader, leader_epoch, ...} from the controllers."""
        state = self.cluster_state()
        if state is None:
            return None
        for t in state.get("topics", []):
            if t["name"] == topic:
                return {p["partition"]: p for p in t["partitions"]}
        return None

    def fenced_brokers(self) -> set[int] | None:
        state = self.cluster_state()
        if state is None:
            return None
        return {b["broker_id"] for b in state.get("brokers", []) if b["fenced"]}

    def wait_active_controller(self, timeout_s: float) -> NodeProcess:
        return wait_for(lambda: active_controller(self.controllers), timeout_s,
                        "the running controllers to agree on an active controller", self.logs)

    def wait_brokers_unfenced(self, ids: set[int], after_offset: int, timeout_s: float) -> None:
        def probe() -> bool:
            state = self.cluster_state()
            return state is not None and ids <= unfenced_brokers(state, after_offset)

        wait_for(probe, timeout_s, f"brokers {sorted(ids)} to be registered and unfenced",
                 self.logs)
