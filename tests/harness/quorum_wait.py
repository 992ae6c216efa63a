"""What the controller quorum tests share: the shared Raft password and `eventually`, an
async poll under a deadline (nothing sleeps to synchronise). Free ports come from
kraft/tools/launcher.py.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

PASSWORD = "quorum-test-secret"
T = TypeVar("T")


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
