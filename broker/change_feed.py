"""Which hosted partitions changed, in order: what lets an incremental fetch read only them.

A fetch session of a follower holds every partition that broker follows here (3,300 of
them at 10,000 partitions, RF 3, 3 brokers). Reading all of them on every fetch, and
registering a waiter on each while the fetch waits, made each replication round trip
cost O(session size) on the leader; with a producer that keeps a few requests in
flight per broker (librdkafka: one partition per ProduceRequest, at most 5 in flight
with idempotence), an acks=all message per partition then took O(partitions^2): 961 of
10,000 acknowledged in 120 s.

Every change a fetch may have to report (an append, a HW or log start move, a role
change) goes through `HostedPartition.wake`, which marks the partition here. A session
remembers the feed position it last looked at; the next fetch reads the partitions
marked since (`since`), and a parked fetch waits on the feed as a whole (`wait`):
O(changes) per fetch. When a session is too far behind (the feed keeps the last
`max_entries` marks), `since` says so and the session reads everything once.
"""

from __future__ import annotations

import asyncio

TP = tuple[str, int]


class ChangeFeed:
    def __init__(self, max_entries: int = 100_000) -> None:
        self.max_entries = max_entries
        self._entries: list[TP] = []
        self._base = 0  # the position of _entries[0]
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def position(self) -> int:
        """The position after the last mark: `since(position)` is empty now."""
        return self._base + len(self._entries)

    def mark(self, tp: TP) -> None:
        entries = self._entries
        # Every mark is an entry, repeats too: a session may have looked since the last.
        entries.append(tp)
        if len(entries) > self.max_entries:
            drop = len(entries) - self.max_entries // 2
            del entries[:drop]
            self._base += drop
        if self._waiters:
            for fut in self._waiters:
                if not fut.done():
                    fut.set_result(None)
            self._waiters.clear()

    def since(self, position: int) -> list[TP] | None:
        """The partitions marked at or after `position` (with repeats), or None when
        the feed no longer holds all of them (the caller reads everything)."""
        if position < self._base:
            return None
        return self._entries[position - self._base :]

    def waiter(self) -> asyncio.Future[None]:
        """A future completed by the next mark (the caller discards it when done)."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(fut)
        return fut

    def discard(self, fut: asyncio.Future[None]) -> None:
        self._waiters.discard(fut)
