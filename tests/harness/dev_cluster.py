"""`kraft dev` as a subprocess (3 controllers, 3 brokers on free ports): its output read
line by line, its nodes' pids from cluster.json, and a restartable `Cluster` of it
(`secure=True`: `kraft dev --secure`, with the client configs it prints).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
READY = "all brokers unfenced"


class DevProcess:
    """`python -m kraft.tools.cli dev` with its output read line by line in a thread."""

    def __init__(self, data_dir: Path, *extra: str) -> None:
        self.data_dir = data_dir
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft.tools.cli", "dev", "--data-dir", str(data_dir),
             "--base-port", "0", "--timeout", "60", *extra],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, text: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {text!r} within {timeout_s}s; output so far:\n" + "\n".join(self.lines)
                ) from None
            if line is None:
                raise AssertionError(
                    f"kraft dev exited ({self.proc.wait()}) before {text!r}:\n"
                    + "\n".join(self.lines)
                )
            self.lines.append(line)
            if text in line:
                return line

    def stop(self, timeout_s: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill_everything(self) -> None:
        """After a failed test: nothing may outlive it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in node_pids(self.data_dir):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def _path_after(line: str) -> Path:
    """The path in `  client config: /path (...)`."""
    return Path(line.split(":", 1)[1].split()[0])


def cluster_json(data_dir: Path) -> dict[str, Any]:
    return json.loads((data_dir / "cluster.json").read_text())


def node_pids(data_dir: Path) -> list[int]:
    try:
        return [n["pid"] for n in cluster_json(data_dir)["nodes"] if n["pid"]]
    except (OSError, ValueError):
        return []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by kraft dev) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def wait_until(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


class Cluster:
    def __init__(self, tmp: Path, *, secure: bool = False) -> None:
        self.data = tmp / "data"
        self.secure = secure
        self.procs: list[DevProcess] = []
        self.bootstrap = ""
        # A secured cluster's client configs (`--command-config` files), as it prints them.
        self.client_config: Path | None = None
        self.admin_config: Path | None = None

    @property
    def current(self) -> DevProcess:
        return self.procs[-1]

    def start(self) -> None:
        dev = DevProcess(self.data, *(["--secure"] if self.secure else []))
        self.procs.append(dev)
        dev.wait_for_line(READY, 120 if self.secure else 90)
        self.bootstrap = dev.wait_for_line("bootstrap servers:", 5).split(":", 1)[1].strip()
        if self.secure:
            self.client_config = _path_after(dev.wait_for_line("client config:", 5))
            self.admin_config = _path_after(dev.wait_for_line("admin config:", 5))
            dev.wait_for_line("ready:", 5)

    def stop(self, timeout_s: float = 45) -> None:
        t0 = time.monotonic()
        rc = self.current.stop(timeout_s)
        assert rc == 0, f"kraft dev exited {rc}:\n" + "\n".join(self.current.lines[-30:])
        assert time.monotonic() - t0 < timeout_s
        wait_until(lambda: not [p for p in node_pids(self.data) if alive(p)], 10, "nodes exit")
