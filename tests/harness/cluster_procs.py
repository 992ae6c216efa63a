"""A local cluster (controllers + brokers) as separate processes that a test can crash,
pause and restart one node at a time: SIGKILL, SIGSTOP / SIGCONT, start again on the
same data. Built on kraft.dev's planning and kraft.launcher's controller processes, not on
the `kraft dev` command, which owns its children.

    with ProcCluster(tmp_path, broker_props={"replica.lag.time.max.ms": "1500"}) as c:
        c.start()
        c.kill_broker(4); c.restart_broker(4)
        ...

Every wait is a condition under a deadline; a timed-out wait raises AssertionError with
the tails of every node's log.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from kraft.dev import (
    BrokerProcess,
    DevCluster,
    plan_cluster,
    write_configs,
)
from kraft.launcher import ControllerProcess, active_controller, controllers_running
from storage.properties import parse_properties

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


def _get_json(url: str, timeout_s: float = 1.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


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
        self.dev: DevCluster = plan_cluster(data_dir, n_controllers, n_brokers, 0)
        self.controller_props = dict(controller_props or {})
        self.broker_props = dict(broker_props or {})
        self.paused: set[int] = set()  # pids we SIGSTOPped and have not SIGCONTed yet

    # -- nodes -------------------------------------------------------------------------------

    @property
    def controllers(self) -> list[ControllerProcess]:
        return self.dev.controllers

    @property
    def brokers(self) -> list[BrokerProcess]:
        return self.dev.brokers

    @property
    def bootstrap(self) -> str:
        return self.dev.bootstrap_servers

    def broker(self, node_id: int) -> BrokerProcess:
        return next(b for b in self.brokers if b.node_id == node_id)

    def controller(self, node_id: int) -> ControllerProcess:
        return next(c for c in self.controllers if c.node_id == node_id)

    def logs(self, lines: int = 25) -> str:
        """The last `lines` lines of every node's log, runs of repeats collapsed."""
        out = []
        for node in [*self.controllers, *self.brokers]:
            kind = "controller" if isinstance(node, ControllerProcess) else "broker"
            state = "running" if node.running else "down"
            tail = collapse_repeats(node.log_tail(20 * lines).splitlines())[-lines:]
            out.append(f"--- {kind} {node.node_id} ({state}, {node.log_path}) ---")
            out.extend(tail)
        return "\n".join(out)

    # -- start / stop ------------------------------------------------------------------------

    def write_configs(self) -> None:
        write_configs(self.dev)  # writes the controllers' files (with a password) and brokers'
        for c in self.controllers:
            props = parse_properties(c.properties_path.read_text(encoding="utf-8"))
            extra = {
                k: v
                for k, v in props.items()
                if k not in {"process.roles", "node.id", "controller.quorum.voters",
                             "controller.quorum.http.endpoints", "listeners",
                             "metadata.log.dir", "controller.quorum.password"}
            }
            c.write_properties(
                props["controller.quorum.voters"],
                props["controller.quorum.http.endpoints"],
                props["controller.quorum.password"],
                {**extra, **self.controller_props},
            )
        for b in self.brokers:
            props = parse_properties(b.properties_path.read_text(encoding="utf-8"))
            b.write_properties({**props, **self.broker_props})

    def start(self, timeout_s: float = 60.0) -> None:
        self.dev.data_dir.mkdir(parents=True, exist_ok=True)
        self.write_configs()
        for c in self.controllers:
            c.start()
        self.wait_active_controller(timeout_s)
        state = wait_for(self.cluster_state, timeout_s, "the cluster state", self.logs)
        baseline = int(state["metadata_offset"])
        for b in self.brokers:
            b.start()
        self.wait_brokers_unfenced({b.node_id for b in self.brokers}, baseline, timeout_s)

    def close(self) -> None:
        """Teardown: resume what we paused, then SIGKILL everything still running."""
        for node in [*self.brokers, *self.controllers]:
            if node.proc is not None and node.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    node.proc.send_signal(signal.SIGCONT)
                    node.proc.send_signal(signal.SIGKILL)
        for node in [*self.brokers, *self.controllers]:
            if node.proc is not None:
                with contextlib.suppress(Exception):
                    node.proc.wait(10)
        self.paused.clear()

    def __enter__(self) -> ProcCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults ------------------------------------------------------------------------------

    def kill_broker(self, node_id: int) -> None:
        b = self.broker(node_id)
        assert b.proc is not None and b.running, f"broker {node_id} is not running"
        b.proc.send_signal(signal.SIGKILL)
        b.proc.wait(10)

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
        assert b.proc is not None and b.running, f"broker {node_id} is not running"
        b.proc.send_signal(signal.SIGSTOP)
        self.paused.add(b.proc.pid)

    def resume_broker(self, node_id: int) -> None:
        b = self.broker(node_id)
        if b.proc is not None and b.proc.pid in self.paused:
            with contextlib.suppress(ProcessLookupError):
                b.proc.send_signal(signal.SIGCONT)
            self.paused.discard(b.proc.pid)

    # -- state -------------------------------------------------------------------------------

    def cluster_state(self) -> dict[str, Any] | None:
        """GET /v1/cluster from the active controller if one is known, else any."""
        running = controllers_running(self.controllers)
        ordered = sorted(running, key=lambda c: not bool((c.status(0.5) or {}).get("active")))
        for c in ordered:
            state = _get_json(c.url("/v1/cluster"))
            if isinstance(state, dict):
                return state
        return None

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

    def wait_active_controller(self, timeout_s: float) -> ControllerProcess:
        return wait_for(lambda: active_controller(self.controllers), timeout_s,
                        "the running controllers to agree on an active controller", self.logs)

    def wait_brokers_unfenced(self, ids: set[int], after_offset: int, timeout_s: float) -> None:
        def probe() -> bool:
            state = self.cluster_state()
            if state is None:
                return False
            ready = {
                b["broker_id"]
                for b in state.get("brokers", [])
                if not b["fenced"] and b["broker_epoch"] > after_offset
            }
            return ids <= ready

        wait_for(probe, timeout_s, f"brokers {sorted(ids)} to be registered and unfenced",
                 self.logs)
