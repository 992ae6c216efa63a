"""DeleteRecords on the partition leader: move the log start offset, then wait (as Kafka's
DelayedDeleteRecords) until every in-sync replica's log start offset reached it.

The leader's part is Kafka's Partition.deleteRecordsOnLeader: offset -1 means the high
watermark; an offset past the HW (or negative) is OFFSET_OUT_OF_RANGE; a topic whose
cleanup.policy has no `delete` is POLICY_VIOLATION. Followers learn the new log start
from the leader's fetch answers (`HostedPartition.apply_leader_answer_now` moves theirs)
and name their own in each fetch; the leader's low watermark (`Partition.low_watermark`)
is the smallest of those, and each fetch that moves it wakes the waiting request.

The log start offset is written to `log-start-offset-checkpoint` as soon as it moves
(`LogStartCheckpointer`), on leaders and followers, so that a restart, even after a
crash, never brings deleted records back.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from common.errors import Errors

if TYPE_CHECKING:
    from broker.hosted import HostedPartition
    from storage.log_manager import LogManager

log = logging.getLogger("broker.replica_manager")

HIGH_WATERMARK = -1  # DeleteRecordsRequest.HIGH_WATERMARK


class Leaders(Protocol):
    """What a DeleteRecords needs of the replica manager."""

    log_start_checkpointer: LogStartCheckpointer

    def leader_partition(self, topic: str, partition: int) -> HostedPartition | int: ...
    def partition(self, topic: str, partition: int) -> HostedPartition | None: ...


@dataclass(frozen=True, slots=True)
class DeleteRecordsResult:
    error_code: int
    low_watermark: int = -1
    error_message: str | None = None


def delete_on_leader(h: HostedPartition, offset: int) -> tuple[DeleteRecordsResult, int]:
    """Move the leader's log start offset to `offset` (-1: the HW). Returns the result if
    final (an error), else the offset the low watermark must reach."""
    lg, core = h.log, h.core
    if not lg.config.delete:
        why = f"records of partition {h.name} cannot be deleted: cleanup.policy has no delete"
        return DeleteRecordsResult(Errors.POLICY_VIOLATION, error_message=why), -1
    hw = core.high_watermark
    target = hw if offset == HIGH_WATERMARK else offset
    if target < 0 or target > hw:
        why = f"offset {target} of {h.name} is not in [0, high watermark {hw}]"
        return DeleteRecordsResult(Errors.OFFSET_OUT_OF_RANGE, error_message=why), -1
    if lg.delete_records_before(target):
        log.info("%s: log start offset moved to %d by DeleteRecords", h.name, target)
        h.wake()  # fetch sessions tell followers and consumers the new log start
    return DeleteRecordsResult(Errors.NONE, core.low_watermark(lg.log_start_offset)), target


async def delete_records(
    rm: Leaders, topic: str, partition: int, offset: int, deadline_s: float
) -> DeleteRecordsResult:
    """One partition of a DeleteRecords: on the leader, then wait for the low watermark
    until `deadline_s` (the loop's clock): REQUEST_TIMED_OUT if it does not get there,
    NOT_LEADER_OR_FOLLOWER if leadership moves meanwhile."""
    h = rm.leader_partition(topic, partition)
    if isinstance(h, int):
        return DeleteRecordsResult(h)
    first, target = delete_on_leader(h, offset)
    if first.error_code != Errors.NONE:
        return first
    # Durable before the answer: a crash right after it must not bring the records back.
    await rm.log_start_checkpointer.request()
    loop = asyncio.get_running_loop()
    epoch = h.core.leader_epoch
    while True:
        if rm.partition(topic, partition) is not h or h.transitioning or not h.core.is_leader:
            return DeleteRecordsResult(Errors.NOT_LEADER_OR_FOLLOWER)
        if h.core.leader_epoch != epoch:
            return DeleteRecordsResult(Errors.NOT_LEADER_OR_FOLLOWER)
        low = h.core.low_watermark(h.log.log_start_offset)
        if low >= target:
            return DeleteRecordsResult(Errors.NONE, low)
        remaining = deadline_s - loop.time()
        if remaining <= 0:
            why = f"low watermark of {h.name} at {low}, not {target}, within the timeout"
            return DeleteRecordsResult(Errors.REQUEST_TIMED_OUT, error_message=why)
        # Woken by follower fetches that move the low watermark, and role changes.
        fut: asyncio.Future[None] = loop.create_future()
        h.waiters.add(fut)
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            h.waiters.discard(fut)


class LogStartCheckpointer:
    """Writes `log-start-offset-checkpoint` soon after a log start offset moves, in a
    worker thread, one write at a time. `request()` returns a future done once a write
    begun after the request has finished (requests during a write make one more)."""

    def __init__(self, log_manager: LogManager) -> None:
        self._log_manager = log_manager
        self._task: asyncio.Task[None] | None = None
        self._waiting: list[asyncio.Future[None]] = []

    def request(self) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._waiting.append(fut)
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._write())
        return fut

    async def _write(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await asyncio.to_thread(self._log_manager.checkpoint_log_start_offsets)
            except OSError as exc:  # the periodic checkpoint tries again
                log.error("log start offset checkpoint failed: %r", exc)
            for fut in batch:
                if not fut.done():
                    fut.set_result(None)
