"""The marker channel against a scripted sender: one WriteTxnMarkers per leader, retries
with back-off until written, deleted topics dropped, a fenced coordinator abandons."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace as NS
from typing import Any

from broker.txn.markers import MarkerChannel
from broker.txn.messages import SendMarkers
from common.errors import Errors

M = SendMarkers("tx", 7, 3, True, 11, (("a", 0), ("a", 1), ("b", 0)))


class Sender:
    def __init__(self, answers: list[dict[tuple[str, int], int] | Exception]) -> None:
        self.answers = answers
        self.sent: list[tuple[int, Any]] = []

    async def send(self, target: int, api_key: int, version: int, **body: Any) -> Any:
        assert (api_key, version) == (27, 1)
        [marker] = body["markers"]
        self.sent.append((target, marker))
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        topics = [
            NS(name=t.name, partitions=[
                NS(partition_index=p, error_code=answer.get((t.name, int(p)), 0))
                for p in t.partition_indexes
            ])
            for t in marker.topics
        ]  # fmt: skip
        return NS(markers=[NS(producer_id=marker.producer_id, topics=topics)])


def run(sender: Sender, leaders: dict[tuple[str, int], int | None]) -> list[bool]:
    done: list[bool] = []
    sleeps: list[float] = []

    async def sleep(s: float) -> None:
        sleeps.append(s)

    async def main() -> None:
        ch = MarkerChannel(sender, lambda t, p: leaders[(t, p)], lambda m, ok: done.append(ok),
                           sleep=sleep)  # fmt: skip
        ch.add(M)
        for _ in range(10_000):  # event loop turns, not time: the sleeps above are instant
            if done:
                return
            await asyncio.sleep(0)
        raise AssertionError("the markers were never done")

    asyncio.run(main())
    assert sleeps == sorted(sleeps)  # the back-off only grows
    return done


def test_one_request_per_leader_with_the_marker_fields() -> None:
    s = Sender([{}, {}])
    assert run(s, {("a", 0): 1, ("a", 1): 2, ("b", 0): 1}) == [True]
    by_leader = {t: [(x.name, tuple(x.partition_indexes)) for x in m.topics] for t, m in s.sent}
    assert by_leader == {1: [("a", (0,)), ("b", (0,))], 2: [("a", (1,))]}
    m = s.sent[0][1]
    assert (m.producer_id, m.producer_epoch, m.transaction_result, m.coordinator_epoch) == (
        7, 3, True, 11,
    )  # fmt: skip


def test_retries_what_failed_only() -> None:
    s = Sender([{("a", 1): Errors.NOT_LEADER_OR_FOLLOWER}, ConnectionError("down"), {}])
    assert run(s, {("a", 0): 1, ("a", 1): 1, ("b", 0): None}) == [True]
    # b-0's topic is gone: never sent; a-1 again after the failures
    assert [[(x.name, tuple(x.partition_indexes)) for x in m.topics] for _, m in s.sent] == [
        [("a", (0, 1))], [("a", (1,))], [("a", (1,))],
    ]  # fmt: skip


def test_an_answer_that_does_not_decode_is_retried() -> None:
    s = Sender([ValueError("bad frame"), {}])
    assert run(s, {("a", 0): 1, ("a", 1): 1, ("b", 0): 1}) == [True]
    assert len(s.sent) == 2


def test_no_leader_waits() -> None:
    leaders: dict[tuple[str, int], int | None] = {("a", 0): -1, ("a", 1): 1, ("b", 0): 1}
    s = Sender([{}])
    orig = s.send

    async def send(target: int, api_key: int, version: int, **body: Any) -> Any:
        leaders[("a", 0)] = 2  # a leader is elected meanwhile
        s.answers.append({})
        return await orig(target, api_key, version, **body)

    s.send = send  # type: ignore[method-assign]
    assert run(s, leaders) == [True]
    assert [t for t, _ in s.sent] == [1, 2]


def test_fenced_coordinator_abandons() -> None:
    s = Sender([{("a", 0): Errors.TRANSACTION_COORDINATOR_FENCED}])
    assert run(s, {("a", 0): 1, ("a", 1): 1, ("b", 0): 1}) == [False]
