"""The hosts' network: a cut drops a node's packets to another, healing restores it, and a run's
namespaces, links and state file are gone after destroy (and after a crashed run, once
the next run sweeps). Root only: skipped with the reason elsewhere."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.chaos.net import STATE_DIR, Net, sh, sweep_leftovers, unsupported_reason

_REASON = unsupported_reason()
pytestmark = pytest.mark.skipif(_REASON is not None, reason=f"fault campaign: {_REASON}")

# Listen in one namespace, connect from another; prints "ok" or the error.
_PROBE = """
import socket, sys, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 7000)); srv.listen()
print("listening", flush=True)
srv.settimeout(5)
try:
    srv.accept()
except OSError:
    pass
"""
_CONNECT = """
import socket, sys
c = socket.socket(); c.settimeout(1.0)
try:
    c.connect((sys.argv[1], 7000)); print("ok")
except OSError as e:
    print(type(e).__name__)
"""


def can_connect(net: Net, src: int, dst: int) -> bool:
    server = subprocess.Popen(
        ["ip", "netns", "exec", net.ns(dst), sys.executable, "-c", _PROBE, net.ip(dst)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening"
        out = sh("ip", "netns", "exec", net.ns(src), sys.executable, "-c", _CONNECT, net.ip(dst))
        return out.stdout.strip() == "ok"
    finally:
        server.kill()
        server.wait()


def links(token: str) -> str:
    return sh("ip", "-o", "link").stdout + sh("ip", "netns", "list").stdout


def test_cut_is_one_direction_and_heals() -> None:
    net = Net.create([1, 2])
    try:
        assert can_connect(net, 1, 2) and can_connect(net, 2, 1)
        net.cut(1, 2)
        assert not can_connect(net, 1, 2)  # SYNs from 1 to 2 are dropped
        net.heal_all()
        assert can_connect(net, 1, 2)
        assert f"kc{net.token}" in links(net.token)
    finally:
        net.destroy()
    assert f"kc{net.token}" not in links(net.token)
    assert not (STATE_DIR / f"{net.token}.json").exists()


def test_sweep_removes_what_a_dead_run_left() -> None:
    net = Net.create([1])
    state = STATE_DIR / f"{net.token}.json"
    data = json.loads(state.read_text())
    # A pid that has exited: the run "crashed" without destroying its hosts.
    dead = subprocess.Popen(["true"])
    dead.wait()
    data["pid"] = dead.pid
    state.write_text(json.dumps(data))
    assert f"kc{net.token}" in links(net.token)
    sweep_leftovers()
    assert f"kc{net.token}" not in links(net.token)
    assert not state.exists()
