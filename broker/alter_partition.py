"""ISR changes on their way to the active controller (Kafka's AlterPartitionManager).

The sans-I/O `Partition` decides a shrink or an expansion and keeps it pending; this
sends it as an AlterPartition over the controller channel and hands the answer back.
Each partition has at most one change in flight (the core refuses a second one), so
answers cannot cross. A failure to reach the controller comes back as an error answer:
the core drops the proposal and proposes again on the next fetch or shrink check,
from whatever state the metadata log has brought by then.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable

from broker.hosted import HostedPartition, finish_acks
from broker.partition import AlterIsr
from common.errors import Errors
from metadata_log.controller_api import AlterPartitionRequest, AlterPartitionResponse

log = logging.getLogger("broker.alter_partition")

Send = Callable[[AlterPartitionRequest], Awaitable[AlterPartitionResponse]]
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


class AlterPartitionManager:
    def __init__(self, broker_id: int, send: Send, broker_epoch: Callable[[], int]) -> None:
        self.broker_id = broker_id
        self._send = send
        self._broker_epoch = broker_epoch
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, topic_id: str, partition: int, alter: AlterIsr, on_answer: OnAnswer) -> None:
        req = alter_partition_request(
            self.broker_id, self._broker_epoch(), topic_id, partition, alter
        )
        task = asyncio.create_task(self._run(req, alter, on_answer), name="alter-partition")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, req: AlterPartitionRequest, alter: AlterIsr, on_answer: OnAnswer) -> None:
        try:
            resp = await self._send(req)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the controller refused it, or none answered in time
            code = getattr(exc, "error_code", Errors.REQUEST_TIMED_OUT)
            resp = AlterPartitionResponse(code, error_message=str(exc))
        if resp.error_code != Errors.NONE:
            log.info(
                "AlterPartition %s-%d isr=%s failed: error %d %s",
                req.topic_id,
                req.partition,
                req.new_isr,
                resp.error_code,
                resp.error_message or "",
            )
        on_answer(alter, resp)

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
            done = h.core.on_alter_isr_answer(
                sent,
                resp.error_code,
                resp.isr,
                resp.leader_epoch,
                resp.partition_epoch,
                h.log.log_end_offset,
            )
            finish_acks(done)
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
            if h.transitioning or not h.core.is_leader:
                continue
            alter = h.core.maybe_shrink_isr(h.log.log_end_offset, now_ms, lag_ms)
            what = "shrinking"
            if alter is None:
                alter, what = h.core.alter_isr_to_resend(), "again: changing"
            if alter is not None:
                self.propose(h, alter, what, lambda h=h: is_hosted(h))
                n += 1
        return n

    async def shutdown(self) -> None:
        tasks, self._tasks = list(self._tasks), set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
