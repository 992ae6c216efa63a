"""ISR changes on their way to the active controller (Kafka's AlterPartitionManager).

The sans-I/O `Partition` decides a shrink or an expansion and keeps it pending; this
sends it as an AlterPartition over the controller channel and hands the answer back.
Changes of many partitions share one request (topics x partitions, as Kafka's), with at
most one request in flight. Each partition has at most one change in flight (the core
refuses a second one), so answers cannot cross. A failure to reach the controller comes
back as an error answer: the core drops the proposal and proposes again on the next
fetch or shrink check, from whatever state the metadata log has brought by then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from broker.hosted import HostedPartition, finish_acks
from broker.partition import AlterIsr
from broker.replica_core import apply_alter_answer, isr_change_due
from common.errors import Errors
from metadata_log.controller_api import (
    MAX_ALTER_PARTITIONS,
    AlterPartitionItem,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    AlterPartitionTopic,
)

log = logging.getLogger("broker.alter_partition")

Send = Callable[[AlterPartitionsRequest], Awaitable[AlterPartitionsResponse]]
OnAnswer = Callable[[AlterIsr, AlterPartitionResponse], None]


def alter_partition_request(
    broker_id: int, broker_epoch: int, topic_id: str, partition: int, alter: AlterIsr
) -> AlterPartitionRequest:
    return AlterPartitionRequest(
        broker_id=broker_id,
        broker_epoch=broker_epoch,
        topic_id=topic_id,
        partition=partition,
        leader_epoch=alter.leader_epoch,
        partition_epoch=alter.partition_epoch,
        new_isr=list(alter.new_isr),
        new_isr_broker_epochs=list(alter.broker_epochs),
    )


def batch_request(
    broker_id: int, broker_epoch: int, items: Iterable[tuple[tuple[str, int], AlterIsr]]
) -> AlterPartitionsRequest:
    """One AlterPartition request for many partitions, grouped by topic."""
    topics: dict[str, list[AlterPartitionItem]] = {}
    for (topic_id, partition), alter in items:
        topics.setdefault(topic_id, []).append(
            AlterPartitionItem(
                partition,
                alter.leader_epoch,
                alter.partition_epoch,
                list(alter.new_isr),
                list(alter.broker_epochs),
            )
        )
    return AlterPartitionsRequest(
        broker_id, broker_epoch, [AlterPartitionTopic(t, ps) for t, ps in topics.items()]
    )


def split_answers(
    resp: AlterPartitionsResponse, keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], AlterPartitionResponse]:
    """Each partition's answer; a partition the controller did not answer gets the
    request-level error (or UNKNOWN_SERVER_ERROR), so its core proposes again."""
    by_key = {(r.topic_id, r.partition): r.response() for r in resp.results}
    fallback = AlterPartitionResponse(
        resp.error_code if resp.error_code != Errors.NONE else Errors.UNKNOWN_SERVER_ERROR,
        error_message=resp.error_message or "no answer for this partition",
    )
    return {k: by_key.get(k, fallback) for k in keys}


class AlterPartitionManager:
    """Coalesces ISR changes: at most one AlterPartition request in flight; what is
    proposed meanwhile waits and goes in the next one, all partitions together (Kafka's
    AlterPartitionManager does the same). A newer proposal for a partition replaces a
    waiting older one (the core keeps only its newest)."""

    def __init__(self, broker_id: int, send: Send, broker_epoch: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self._send = send
        self._broker_epoch = broker_epoch
        self._waiting: dict[tuple[str, int], tuple[AlterIsr, OnAnswer]] = {}
        self._task: asyncio.Task[None] | None = None
        self.requests_sent = 0

    def submit(self, topic_id: str, partition: int, alter: AlterIsr, on_answer: OnAnswer) -> None:
        self._waiting[(topic_id, partition)] = (alter, on_answer)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="alter-partition")

    async def _run(self) -> None:
        while self._waiting:
            keys = list(self._waiting)[:MAX_ALTER_PARTITIONS]
            batch = {k: self._waiting.pop(k) for k in keys}
            req = batch_request(
                self.broker_id, self._broker_epoch(), ((k, a) for k, (a, _) in batch.items())
            )
            self.requests_sent += 1
            try:
                resp = await self._send(req)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the controller refused it, or none answered in time
                code = getattr(exc, "error_code", Errors.REQUEST_TIMED_OUT)
                resp = AlterPartitionsResponse(code, error_message=str(exc))
            answers = split_answers(resp, batch)
            for key, (alter, on_answer) in batch.items():
                answer = answers[key]
                if answer.error_code != Errors.NONE:
                    log.info(
                        "AlterPartition %s-%d isr=%s failed: error %d %s",
                        key[0],
                        key[1],
                        list(alter.new_isr),
                        answer.error_code,
                        answer.error_message or "",
                    )
                try:
                    on_answer(alter, answer)
                except Exception:  # one partition's bug must not lose the others' answers
                    log.exception("AlterPartition answer for %s-%d failed", *key)

    def propose(
        self, h: HostedPartition, alter: AlterIsr, what: str, still_hosted: Callable[[], bool]
    ) -> None:
        """Send a change the core decided; its answer goes back to the core (unless the
        partition was deleted or recreated meanwhile: `still_hosted`)."""
        log.info(
            "%s ISR of %s from %s to %s (leader epoch %d, partition epoch %d)",
            what,
            h.name,
            list(h.core.isr),
            list(alter.new_isr),
            alter.leader_epoch,
            alter.partition_epoch,
        )

        def on_answer(sent: AlterIsr, resp: AlterPartitionResponse) -> None:
            if not still_hosted():
                return
            finish_acks(apply_alter_answer(h, sent, resp))
            h.wake()

        self.submit(h.core.topic_id, h.core.partition, alter, on_answer)

    def check_isrs(
        self,
        partitions: Iterable[HostedPartition],
        now_ms: int,
        lag_ms: int,
        is_hosted: Callable[[HostedPartition], bool],
    ) -> int:
        """The periodic check on the partitions we lead: shrink the lagging followers
        out, or send again a change whose outcome is unknown. How many were sent."""
        n = 0
        for h in partitions:
            due = isr_change_due(h, now_ms, lag_ms)
            if due is not None:
                self.propose(h, due[0], due[1], lambda h=h: is_hosted(h))
                n += 1
        return n

    async def shutdown(self) -> None:
        task, self._task = self._task, None
        self._waiting.clear()
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
