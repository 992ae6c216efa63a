"""Start, stop, crash, pause and watch one controller or broker process on this host
(`python -m kraft.controller_main`, `python -m broker.main`): NodeProcess, and the waits
on a set of them (an active controller, caught-up controllers, a condition under a
deadline). kraft/tools/local_cluster.py plans and starts whole clusters from these, for
`kraft dev`, the tests and the benchmarks.

Each node has its own directory holding its properties file (mode 0600: a controller's
carries the quorum password), its `.log` (stdout and stderr, appended across restarts)
and its data. A restarted node keeps its ports and data.

Everything here is synchronous (subprocess, urllib): callers on an event loop should call
the waits through `asyncio.to_thread` if the loop must keep serving meanwhile.

A secured controller plane (https, a bearer token; common/controller_plane.py) needs
nothing from callers: a controller's probes read how to reach it from its own properties
file (scheme, `controller.quorum.http.token`, its `ssl.truststore.*` as the CA and its
keystore as the client certificate). Set `NodeProcess.plane` to probe with other
credentials (e.g. `plane_client(read_properties("client.properties"))`).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from common.controller_plane import ControllerPlaneClient, plane_client
from common.properties import ConfigError, read_properties

DEFAULT_HOST = "127.0.0.1"
POLL_INTERVAL_S = 0.05
Role = Literal["controller", "broker"]
_MAIN_MODULE: dict[Role, str] = {"controller": "kraft.controller_main", "broker": "broker.main"}
# The directory holding our packages: put on the children's PYTHONPATH so `python -m ...`
# works from any working directory.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]
T = TypeVar("T")


class LauncherError(Exception):
    """A node could not be started, a port is taken, or a wait ran out of time."""


def free_ports(n: int, host: str = DEFAULT_HOST) -> list[int]:
    """`n` distinct ports that were free on `host` a moment ago (all bound at once, so
    they differ). Another process can still take one before we bind it: rare on
    loopback, and a node that cannot bind exits, which the waits report."""
    socks: list[socket.socket] = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@dataclass
class NodeProcess:
    """One controller or broker: its configuration on disk and, while it runs, its
    process. `port` is where clients connect: a broker's Kafka listener, a controller's
    HTTP API; a controller also has its Raft port."""

    role: Role
    node_id: int
    host: str
    port: int
    data_dir: Path
    raft_port: int = 0
    python: str = sys.executable
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    paused: bool = field(default=False, repr=False)
    # How to call a controller's HTTP API; None: as its properties file says.
    plane: ControllerPlaneClient | None = field(default=None, repr=False)
    _file_plane: ControllerPlaneClient | None = field(
        default=None, init=False, repr=False, compare=False
    )

    @property
    def properties_path(self) -> Path:
        return self.data_dir / f"{self.role}.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / f"{self.role}.log"

    @property
    def address(self) -> str:
        """The "host:port": a broker's bootstrap server, a controller's HTTP API (what
        `kraft metadata --controller` takes)."""
        return f"{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return f"{self.plane_client().base_url(self.host, self.port)}{path}"

    def plane_client(self) -> ControllerPlaneClient:
        """`plane` if set, else what the node's properties file says (plain http when
        it has none yet)."""
        if self.plane is not None:
            return self.plane
        if self._file_plane is None:
            if not self.properties_path.exists():
                return ControllerPlaneClient()
            try:
                self._file_plane = plane_client(read_properties(self.properties_path))
            except ConfigError as exc:
                raise LauncherError(f"{self.properties_path}: {exc}") from None
        return self._file_plane

    def get_json(self, path: str, timeout_s: float = 1.0) -> Any:
        """GET `path` from this controller's HTTP API with its credentials: the decoded
        JSON body of a 200, else None."""
        return _get_json(self.url(path), timeout_s, self.plane_client())

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_properties(self, props: Mapping[str, str]) -> None:
        for key, value in props.items():
            if any(c in key + value for c in "\r\n") or not key.strip():
                raise LauncherError(f"property {key!r} has an empty key or a line break")
        text = "".join(f"{k}={_escape(v)}\n" for k, v in props.items())
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._file_plane = None  # read again from the new file
        fd = os.open(self.properties_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def start(self) -> None:
        """Spawn the process (it keeps its ports and data across restarts)."""
        if self.running:
            raise LauncherError(f"{self.role} {self.node_id} is already running (pid {self.pid})")
        if not self.properties_path.exists():
            raise LauncherError(f"{self.properties_path} is missing: use write_configs")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        module = _MAIN_MODULE[self.role]
        with open(self.log_path, "ab") as log:
            log.write(f"--- launcher: starting {self.role} {self.node_id} ---\n".encode())
            log.flush()
            self.paused = False
            self.proc = subprocess.Popen(
                [self.python, "-m", module, "--config", str(self.properties_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own session: a Ctrl-C in the terminal reaches only the parent, which
                # stops the nodes in order.
                start_new_session=True,
            )

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def terminate(self) -> None:
        """SIGTERM: a clean shutdown (a broker's is a controlled shutdown)."""
        self._signal(signal.SIGTERM)

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL (a crash: nothing flushed, no goodbye) and reap."""
        self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(timeout_s)

    def pause(self) -> None:
        """SIGSTOP: the process stops answering, as in a long GC pause or a hung host."""
        self._signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            self._signal(signal.SIGCONT)
            self.paused = False

    def wait_stopped(self, deadline: float) -> int | None:
        """Wait for the exit until `deadline` (time.monotonic()), then SIGKILL."""
        proc = self.proc
        if proc is None:
            return None
        try:
            return proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            return proc.returncode

    def status(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """A controller's GET /v1/quorum/status, or None if it does not answer 200 with
        JSON."""
        body = self.get_json("/v1/quorum/status", timeout_s)
        return body if isinstance(body, dict) else None

    def log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _escape(value: str) -> str:
    """Escape what java.util.Properties would read differently (kraft parses the same)."""
    out = value.replace("\\", "\\\\")
    return "\\" + out if out[:1] in (" ", "\t") else out


def _get_json(url: str, timeout_s: float, plane: ControllerPlaneClient) -> Any:
    request = urllib.request.Request(url, headers=plane.headers())
    try:
        with urllib.request.urlopen(  # noqa: S310 - a node of ours
            request, timeout=timeout_s, context=plane.ssl_context
        ) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


# -- waiting and stopping ------------------------------------------------------------------


def stop_nodes(nodes: Iterable[NodeProcess], timeout_s: float = 10.0) -> None:
    """SIGTERM all at once, then SIGKILL whichever is still running at the deadline."""
    procs = list(nodes)
    for n in procs:
        n.terminate()
    deadline = time.monotonic() + timeout_s
    for n in procs:
        n.wait_stopped(deadline)


def running_nodes(nodes: Iterable[NodeProcess]) -> list[NodeProcess]:
    return [n for n in nodes if n.running]


def active_controller(controllers: Iterable[NodeProcess]) -> NodeProcess | None:
    """One probe: the single running controller that says it is active, provided every
    running controller answers and names it as leader; else None."""
    statuses = [(c, c.status()) for c in running_nodes(controllers)]
    if not statuses or any(s is None for _, s in statuses):
        return None
    active = [c for c, s in statuses if s and s.get("active")]
    if len(active) != 1:
        return None
    leader = active[0].node_id
    return active[0] if all(s and s.get("leader_id") == leader for _, s in statuses) else None


def cluster_state(controllers: Iterable[NodeProcess]) -> dict[str, Any] | None:
    """GET /v1/cluster from the active controller if one says so, else any that answers."""
    running = running_nodes(controllers)
    ordered = sorted(running, key=lambda c: not bool((c.status(0.5) or {}).get("active")))
    for c in ordered:
        state = c.get_json("/v1/cluster")
        if isinstance(state, dict):
            return state
    return None


def unfenced_brokers(state: dict[str, Any], after_offset: int) -> set[int]:
    """The brokers of a cluster state that registered after `after_offset` (so: in this
    incarnation, as the broker epoch is the offset of its registration) and are unfenced."""
    return {
        b["broker_id"]
        for b in state.get("brokers", [])
        if not b["fenced"] and b["broker_epoch"] > after_offset
    }


def wait_until(
    nodes: Iterable[NodeProcess], timeout_s: float, what: str, probe: Callable[[], T | None]
) -> T:
    """Poll `probe` until it returns non-None; raise LauncherError (with the logs' tails)
    at the deadline, or as soon as one of the started `nodes` has exited."""
    watched = list(nodes)
    deadline = time.monotonic() + timeout_s
    while True:
        for n in watched:
            if n.proc is not None and n.proc.poll() is not None:
                raise LauncherError(
                    f"{n.role} {n.node_id} exited with code {n.proc.returncode} while "
                    f"waiting for {what}\n{describe_logs(watched)}"
                )
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise LauncherError(
                f"timed out after {timeout_s:.0f}s waiting for {what}\n{describe_logs(watched)}"
            )
        time.sleep(POLL_INTERVAL_S)


def wait_for_active(controllers: Iterable[NodeProcess], timeout_s: float = 30.0) -> NodeProcess:
    """Wait until the running controllers agree on one active controller."""
    procs = running_nodes(controllers)
    return wait_until(procs, timeout_s, "an active controller", lambda: active_controller(procs))


def wait_until_caught_up(controllers: Iterable[NodeProcess], timeout_s: float = 30.0) -> int:
    """Wait until the running controllers agree on the active controller and report the
    same metadata offset (a restarted one has replayed everything); returns it."""
    procs = running_nodes(controllers)

    def probe() -> int | None:
        if active_controller(procs) is None:
            return None
        offsets = {s.get("metadata_offset") if s else None for s in (c.status() for c in procs)}
        if len(offsets) != 1:
            return None
        (offset,) = offsets
        return offset if isinstance(offset, int) else None

    return wait_until(procs, timeout_s, "the controllers to catch up", probe)


def describe_logs(nodes: Iterable[NodeProcess], lines: int = 15) -> str:
    return "\n".join(
        f"--- {n.role} {n.node_id} ({n.log_path}) ---\n{n.log_tail(lines)}" for n in nodes
    )
