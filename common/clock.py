"""One clock for every asyncio shell (Kafka's `Time` / `MockTime`).

Decision code never reads time itself: shells read `clock.monotonic_ms()` (timeouts,
sessions, deadlines) or `clock.wall_ms()` (timestamps that leave the process) and pass
`now_ms` in. Shells also sleep through the clock, so a simulation can swap in
`ManualClock` and drive a whole cluster without real time passing.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that never goes back (not wall time)."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch, for timestamps that leave the process."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep on this clock."""
        ...


class SystemClock:
    """The real clocks and asyncio's sleep."""

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def wall_ms(self) -> int:
        return time.time_ns() // 1_000_000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK: Clock = SystemClock()


class ManualClock:
    """A clock that moves only when `advance` is called (tests and simulations).

    Sleepers wake in deadline order as `advance` passes their deadlines."""

    def __init__(self, monotonic_ms: int = 0, wall_ms: int = 1_700_000_000_000) -> None:
        self._monotonic_ms = monotonic_ms
        self._wall_offset_ms = wall_ms - monotonic_ms
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def wall_ms(self) -> int:
        return self._monotonic_ms + self._wall_offset_ms

    async def sleep(self, seconds: float) -> None:
        deadline = self._monotonic_ms + max(0, round(seconds * 1000))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._order), future))
        await future

    def advance(self, ms: int) -> None:
        """Move time forward and wake every sleeper whose deadline has passed."""
        self._monotonic_ms += ms
        while self._sleepers and self._sleepers[0][0] <= self._monotonic_ms:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
