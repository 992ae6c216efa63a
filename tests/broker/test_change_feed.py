"""The change feed incremental fetches read (broker/change_feed.py)."""

from __future__ import annotations

import asyncio

from broker.change_feed import ChangeFeed


def test_a_partition_marked_again_after_a_look_is_seen_again() -> None:
    feed = ChangeFeed()
    feed.mark(("t", 0))
    pos = feed.position
    assert feed.since(0) == [("t", 0)] and feed.since(pos) == []
    feed.mark(("t", 0))  # the same partition as the last mark: news for whoever looked
    assert feed.since(pos) == [("t", 0)]


def test_a_session_too_far_behind_is_told_to_read_everything() -> None:
    feed = ChangeFeed(max_entries=10)
    for i in range(25):
        feed.mark(("t", i))
    assert feed.since(0) is None
    assert feed.since(feed.position - 1) == [("t", 24)]


def test_a_mark_completes_the_waiters() -> None:
    async def run() -> None:
        feed = ChangeFeed()
        fut = feed.waiter()
        assert not fut.done()
        feed.mark(("t", 1))
        assert fut.done()
        later = feed.waiter()
        feed.discard(later)
        feed.mark(("t", 2))
        assert not later.done()  # discarded: no longer woken

    asyncio.run(run())
