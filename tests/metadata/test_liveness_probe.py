"""The controller's liveness probe (kraft/liveness_probe.py) on real loopback sockets: only
a refusal on every listener confirms a death; a listening port, even one that never
accepts, confirms nothing."""

from __future__ import annotations

import asyncio
import socket

from kraft.liveness_probe import listeners_refuse
from metadata_log.records import Endpoint


def closed_port() -> int:
    """A port nothing listens on (bound then closed: the kernel refuses connections)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_every_listener_refusing_confirms() -> None:
    eps = (Endpoint("A", "127.0.0.1", closed_port()), Endpoint("B", "127.0.0.1", closed_port()))
    assert asyncio.run(listeners_refuse(eps))


def test_one_listener_accepting_confirms_nothing() -> None:
    with socket.socket() as live:
        live.bind(("127.0.0.1", 0))
        live.listen(1)  # a slow process: it listens but never accepts
        eps = (
            Endpoint("A", "127.0.0.1", closed_port()),
            Endpoint("B", "127.0.0.1", live.getsockname()[1]),
        )
        assert not asyncio.run(listeners_refuse(eps))


def test_no_listeners_or_an_unresolvable_host_confirms_nothing() -> None:
    assert not asyncio.run(listeners_refuse(()))
    eps = (Endpoint("A", "no-such-host.invalid", 9092),)
    assert not asyncio.run(listeners_refuse(eps, timeout_s=2.0))
