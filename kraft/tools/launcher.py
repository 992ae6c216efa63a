"""Start and stop a local controller quorum: N `python -m kraft.controller_main`
processes on one host, for tests, benchmarks and `kraft dev`.

    controllers = start_controllers(3, Path("data"))   # waits for an active controller
    try:
        active = wait_for_active(controllers)
        ...  # talk to f"http://{active.http_address}/v1/..."
    finally:
        stop_controllers(controllers)                    # SIGTERM, then SIGKILL

Each controller gets its own directory `<base_dir>/controller-<id>/` holding its
`controller.properties` (mode 0600: it carries the quorum password), its
`controller.log` (stdout and stderr, appended across restarts) and its `metadata/`
directory (the Raft journal). Ports are picked free on the host (bind to port 0), so two
clusters can run side by side; a restarted controller keeps its ports.

Everything here is synchronous (subprocess, urllib): callers on an event loop should call
the waits through `asyncio.to_thread` if the loop must keep serving meanwhile.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
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
from typing import Any, TypeVar

__all__ = [
    "ControllerProcess",
    "LauncherError",
    "active_controller",
    "controllers_running",
    "free_ports",
    "plan_controllers",
    "start_controllers",
    "stop_controllers",
    "wait_for_active",
    "wait_until_caught_up",
]

DEFAULT_HOST = "127.0.0.1"
POLL_INTERVAL_S = 0.05
# The directory that holds the `kraft` package: put on the children's PYTHONPATH so
# `python -m kraft.controller_main` works from any working directory.
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")


class LauncherError(Exception):
    """A controller could not be started, or a wait ran out of time."""


def free_ports(n: int, host: str = DEFAULT_HOST) -> list[int]:
    """`n` distinct ports that were free on `host` a moment ago (all bound at once, so
    they differ). Another process can still take one before we bind it: rare on
    loopback, and a controller that cannot bind exits, which the waits report."""
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
class ControllerProcess:
    """One controller: its configuration on disk and, while it runs, its process."""

    node_id: int
    host: str
    raft_port: int
    http_port: int
    data_dir: Path
    python: str = sys.executable
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "controller.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "controller.log"

    @property
    def metadata_dir(self) -> Path:
        return self.data_dir / "metadata"

    @property
    def http_address(self) -> str:
        """The HTTP API's "host:port" (what `kraft metadata --controller` takes)."""
        return f"{self.host}:{self.http_port}"

    def url(self, path: str) -> str:
        return f"http://{self.http_address}{path}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_properties(
        self,
        voters: str,
        http_endpoints: str,
        password: str,
        extra: Mapping[str, str] | None = None,
    ) -> None:
        props = {
            "process.roles": "controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": voters,
            "controller.quorum.http.endpoints": http_endpoints,
            "listeners": f"CONTROLLER://{self.host}:{self.http_port}",
            "metadata.log.dir": str(self.metadata_dir),
            "controller.quorum.password": password,
            **(extra or {}),
        }
        for key, value in props.items():
            if any(c in key + value for c in "\r\n") or not key.strip():
                raise LauncherError(f"property {key!r} has an empty key or a line break")
        text = "".join(f"{k}={_escape(v)}\n" for k, v in props.items())
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.properties_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def start(self) -> None:
        """Spawn the process (it keeps its ports and data across restarts)."""
        if self.running:
            raise LauncherError(f"controller {self.node_id} is already running (pid {self.pid})")
        if not self.properties_path.exists():
            raise LauncherError(f"{self.properties_path} is missing: use plan_controllers")
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as log:
            log.write(f"--- launcher: starting controller {self.node_id} ---\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [self.python, "-m", "kraft.controller_main", "--config", str(self.properties_path)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own session: a Ctrl-C in the terminal reaches only the parent, which
                # stops the controllers in order.
                start_new_session=True,
            )

    def kill(self, timeout_s: float = 10.0) -> None:
        """SIGKILL (a crash: nothing flushed, no goodbye) and reap."""
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGKILL)
        proc.wait(timeout_s)

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (a clean shutdown), then SIGKILL if it is still alive after
        `timeout_s`; returns the exit code."""
        self.terminate()
        return self.wait_stopped(time.monotonic() + timeout_s)

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, deadline: float) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        try:
            return proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.kill()
            return proc.returncode

    def status(self, timeout_s: float = 1.0) -> dict[str, Any] | None:
        """GET /v1/quorum/status, or None if it does not answer 200 with JSON."""
        try:
            with urllib.request.urlopen(  # noqa: S310 - our own loopback URL
                self.url("/v1/quorum/status"), timeout=timeout_s
            ) as resp:
                body = json.loads(resp.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None
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


def plan_controllers(
    n: int,
    base_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    password: str | None = None,
    properties: Mapping[str, str] | None = None,
    python: str = sys.executable,
) -> list[ControllerProcess]:
    """Pick ports and write each controller's properties file; start nothing.
    `properties` are added to (or override) every controller's file."""
    if n < 1:
        raise ValueError("need at least one controller")
    base_dir = Path(base_dir).resolve()
    ports = free_ports(2 * n, host)
    ids = list(range(1, n + 1))
    controllers = [
        ControllerProcess(i, host, ports[k], ports[n + k], base_dir / f"controller-{i}", python)
        for k, i in enumerate(ids)
    ]
    voters = ",".join(f"{c.node_id}@{host}:{c.raft_port}" for c in controllers)
    http = ",".join(f"{c.node_id}@{c.http_address}" for c in controllers)
    secret = password or secrets.token_urlsafe(24)
    for c in controllers:
        c.write_properties(voters, http, secret, properties)
    return controllers


def start_controllers(
    n: int,
    base_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    password: str | None = None,
    properties: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    python: str = sys.executable,
) -> list[ControllerProcess]:
    """Plan and start `n` controllers, then wait until one is the active controller and
    all agree on it. On failure every started process is stopped and LauncherError
    (with the logs' tails) is raised."""
    controllers = plan_controllers(
        n, base_dir, host=host, password=password, properties=properties, python=python
    )
    try:
        for c in controllers:
            c.start()
        wait_for_active(controllers, timeout_s)
    except BaseException:
        stop_controllers(controllers)
        raise
    return controllers


def stop_controllers(controllers: Iterable[ControllerProcess], timeout_s: float = 10.0) -> None:
    """SIGTERM all at once, then SIGKILL whichever is still running at the deadline."""
    procs = list(controllers)
    for c in procs:
        c.terminate()
    deadline = time.monotonic() + timeout_s
    for c in procs:
        c.wait_stopped(deadline)


def controllers_running(controllers: Iterable[ControllerProcess]) -> list[ControllerProcess]:
    return [c for c in controllers if c.running]


def active_controller(controllers: Iterable[ControllerProcess]) -> ControllerProcess | None:
    """One probe: the single running controller that says it is active, provided every
    running controller answers and names it as leader; else None."""
    running = controllers_running(controllers)
    statuses = [(c, c.status()) for c in running]
    if not statuses or any(s is None for _, s in statuses):
        return None
    active = [c for c, s in statuses if s and s.get("active")]
    if len(active) != 1:
        return None
    leader = active[0].node_id
    return active[0] if all(s and s.get("leader_id") == leader for _, s in statuses) else None


def _wait(
    controllers: list[ControllerProcess], timeout_s: float, what: str, probe: Callable[[], T | None]
) -> T:
    """Poll `probe` until it returns non-None; raise LauncherError (with the logs' tails)
    at the deadline, or as soon as one of the started controllers has exited."""
    deadline = time.monotonic() + timeout_s
    while True:
        for c in controllers:
            if c.proc is not None and c.proc.poll() is not None:
                raise LauncherError(
                    f"controller {c.node_id} exited with code {c.proc.returncode} while "
                    f"waiting for {what}\n{describe_logs(controllers)}"
                )
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            raise LauncherError(
                f"timed out after {timeout_s:.0f}s waiting for {what}\n{describe_logs(controllers)}"
            )
        time.sleep(POLL_INTERVAL_S)


def wait_for_active(
    controllers: Iterable[ControllerProcess], timeout_s: float = 30.0
) -> ControllerProcess:
    """Wait until the running controllers agree on one active controller."""
    procs = controllers_running(controllers)
    return _wait(procs, timeout_s, "an active controller", lambda: active_controller(procs))


def wait_until_caught_up(controllers: Iterable[ControllerProcess], timeout_s: float = 30.0) -> int:
    """Wait until the running controllers agree on the active controller and report the
    same metadata offset (a restarted one has replayed everything); returns it."""
    procs = controllers_running(controllers)

    def probe() -> int | None:
        if active_controller(procs) is None:
            return None
        offsets = {s.get("metadata_offset") if s else None for s in (c.status() for c in procs)}
        if len(offsets) != 1:
            return None
        (offset,) = offsets
        return offset if isinstance(offset, int) else None

    return _wait(procs, timeout_s, "the controllers to catch up", probe)


def describe_logs(controllers: Iterable[ControllerProcess], lines: int = 15) -> str:
    return "\n".join(
        f"--- controller {c.node_id} ({c.log_path}) ---\n{c.log_tail(lines)}" for c in controllers
    )
