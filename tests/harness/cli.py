"""The `kraft` command line as a subprocess, and checks of its answers (exit 0, or one
line of error naming what went wrong).
"""

from __future__ import annotations

import socket
import subprocess
import sys

from tests.harness.dev_cluster import ROOT


def kraft(*argv: str, stdin: str = "", timeout_s: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kraft.tools.cli", *argv],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def one_line_error(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode == 1, f"exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    err = proc.stderr.strip()
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1, err
    for f in fragments:
        assert f in err, err
    return err


def free_port() -> int:
    """A port nobody listens on (bound then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
