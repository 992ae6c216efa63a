"""The broker's AlterPartition coalescing: one request in flight, the changes proposed
meanwhile go together in the next one (topics x partitions), each partition gets its own
answer, and a partition the controller left out gets an error so its core proposes
again."""

from __future__ import annotations

import asyncio

from broker.alter_partition import AlterPartitionManager, split_answers
from broker.partition import AlterIsr
from common.errors import Errors
from metadata_log.controller_api import (
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
)


async def _coalesces() -> None:
    sent: list[AlterPartitionsRequest] = []
    release = asyncio.Event()

    async def send(req: AlterPartitionsRequest) -> AlterPartitionsResponse:
        sent.append(req)
        await release.wait()
        results = [
            AlterPartitionResult(t.topic_id, p.partition, Errors.NONE, 1, p.leader_epoch)
            for t in req.topics
            for p in t.partitions
            if p.partition != 3  # the controller "forgets" one
        ]
        return AlterPartitionsResponse(Errors.NONE, results)

    answers: dict[tuple[str, int], int] = {}
    done = asyncio.Event()

    def on(key: tuple[str, int]):  # noqa: ANN202
        def answer(alter: AlterIsr, resp: AlterPartitionResponse) -> None:
            answers[key] = resp.error_code
            if len(answers) == 5:
                done.set()

        return answer

    m = AlterPartitionManager(1, send, lambda: 10)
    m.submit("a", 0, AlterIsr((1,), 1, 1), on(("a", 0)))
    await asyncio.sleep(0)  # the first request is in flight
    assert len(sent) == 1
    m.submit("a", 1, AlterIsr((1,), 1, 1), on(("a", 1)))
    m.submit("b", 2, AlterIsr((1,), 1, 1), on(("b", 2)))
    m.submit("b", 3, AlterIsr((1,), 1, 1), on(("b", 3)))
    m.submit("a", 1, AlterIsr((1, 2), 1, 1), on(("a", 1)))  # replaces the waiting one
    m.submit("a", 4, AlterIsr((1,), 2, 5), on(("a", 4)))
    assert len(sent) == 1  # still one in flight
    release.set()
    await asyncio.wait_for(done.wait(), 5)
    assert len(sent) == 2
    second = sent[1]
    assert (second.broker_id, second.broker_epoch) == (1, 10)
    assert [(t.topic_id, [p.partition for p in t.partitions]) for t in second.topics] == [
        ("a", [1, 4]),
        ("b", [2, 3]),
    ]
    assert second.topics[0].partitions[0].new_isr == [1, 2]
    assert answers == {
        ("a", 0): Errors.NONE,
        ("a", 1): Errors.NONE,
        ("b", 2): Errors.NONE,
        ("b", 3): Errors.UNKNOWN_SERVER_ERROR,
        ("a", 4): Errors.NONE,
    }
    await m.shutdown()


def test_changes_proposed_while_one_request_is_in_flight_go_together_in_the_next() -> None:
    asyncio.run(_coalesces())


def test_a_request_level_error_answers_every_partition() -> None:
    resp = AlterPartitionsResponse(Errors.STALE_BROKER_EPOCH, error_message="old")
    answers = split_answers(resp, [("a", 0), ("b", 1)])
    assert {k: r.error_code for k, r in answers.items()} == {
        ("a", 0): Errors.STALE_BROKER_EPOCH,
        ("b", 1): Errors.STALE_BROKER_EPOCH,
    }


async def _failure_answers_all() -> None:
    async def send(req: AlterPartitionsRequest) -> AlterPartitionsResponse:
        raise TimeoutError("no controller")

    got: list[int] = []
    m = AlterPartitionManager(1, send, lambda: 10)
    m.submit("a", 0, AlterIsr((1,), 1, 1), lambda a, r: got.append(r.error_code))
    m.submit("a", 1, AlterIsr((1,), 1, 1), lambda a, r: got.append(r.error_code))
    for _ in range(100):
        if len(got) == 2:
            break
        await asyncio.sleep(0)
    assert got == [Errors.REQUEST_TIMED_OUT] * 2
    await m.shutdown()


def test_an_unreachable_controller_answers_every_partition_with_an_error() -> None:
    asyncio.run(_failure_answers_all())
