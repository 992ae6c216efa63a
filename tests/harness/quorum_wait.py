"""What the controller quorum tests share: free ports for voters, the shared Raft password,
and `eventually`, an async poll under a deadline (nothing sleeps to synchronise).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

PASSWORD = "quorum-test-secret"
T = TypeVar("T")


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


async def eventually(
    probe: Callable[[], Awaitable[T | None]], timeout_s: float, what: str, interval_s: float = 0.05
) -> T:
    """Poll `probe` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)
