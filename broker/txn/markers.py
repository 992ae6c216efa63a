"""The transaction marker channel (Kafka's TransactionMarkerChannelManager): writes a
completed transaction's COMMIT or ABORT markers to every partition in it, by
WriteTxnMarkers to each partition's leader over the inter-broker listener.

One task per transaction: the partitions still unwritten are grouped by their leader,
one request per leader, all leaders at once; then, per partition:
- NONE: written;
- a partition whose topic no longer exists: dropped (nothing left to mark);
- TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH: a newer coordinator or
  producer epoch owns the partition's state now; the send is abandoned and this
  coordinator writes no Complete state (Kafka's abortSending);
- anything else (not leader, no leader yet, the connection failed, the API unknown to
  that broker): tried again after a back-off that doubles up to `max_backoff_ms`.
When every partition is written (or dropped) the coordinator is told, and writes
CompleteCommit/CompleteAbort.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from kio.schema.write_txn_markers.v1.request import WritableTxnMarker, WritableTxnMarkerTopic
from kio.static.primitive import i16, i32, i64

from broker.txn.messages import SendMarkers
from common.api_keys import ApiKey
from common.errors import Errors

log = logging.getLogger("broker.txn.markers")

WRITE_TXN_MARKERS_VERSION = 1
TP = tuple[str, int]
_ABANDON = frozenset({Errors.TRANSACTION_COORDINATOR_FENCED, Errors.INVALID_PRODUCER_EPOCH})


class Sender(Protocol):
    async def send(self, target: int, api_key: int, version: int, **body: Any) -> Any: ...


# (topic, partition) -> leader broker id; -1: none now; None: the topic is gone
LeaderOf = Callable[[str, int], int | None]


class MarkerChannel:
    def __init__(
        self,
        sender: Sender,
        leader_of: LeaderOf,
        on_done: Callable[[SendMarkers, bool], None],
        *,
        backoff_ms: int = 100,
        max_backoff_ms: int = 2_000,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._sender = sender
        self._leader_of = leader_of
        self._on_done = on_done
        self._backoff_ms = backoff_ms
        self._max_backoff_ms = max_backoff_ms
        self._sleep = sleep
        self._tasks: set[asyncio.Task[None]] = set()

    def add(self, m: SendMarkers) -> None:
        task = asyncio.ensure_future(self._send(m))
        task.set_name(f"txn-markers-{m.transactional_id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_report)

    async def shutdown(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t

    async def _send(self, m: SendMarkers) -> None:
        left = set(m.partitions)
        backoff = self._backoff_ms
        while left:
            by_leader: dict[int, list[TP]] = {}
            for tp in sorted(left):
                leader = self._leader_of(*tp)
                if leader is None:
                    log.info("%s: %s-%d was deleted: no marker", m.transactional_id, *tp)
                    left.discard(tp)
                elif leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            answers = await asyncio.gather(
                *(self._write(m, leader, tps) for leader, tps in by_leader.items())
            )
            codes = {tp: code for a in answers for tp, code in a.items()}
            if any(c in _ABANDON for c in codes.values()):
                log.info("%s: markers abandoned: %s", m.transactional_id, codes)
                self._on_done(m, False)
                return
            left -= {tp for tp, c in codes.items() if c == Errors.NONE}
            if left:
                await self._sleep(backoff / 1000)
                backoff = min(backoff * 2, self._max_backoff_ms)
        self._on_done(m, True)

    async def _write(self, m: SendMarkers, leader: int, tps: list[TP]) -> dict[TP, int]:
        topics: dict[str, list[int]] = {}
        for t, p in tps:
            topics.setdefault(t, []).append(p)
        marker = _marker_entity(m, topics)
        try:
            resp = await self._sender.send(
                leader, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, markers=(marker,)
            )
        except (OSError, TimeoutError, EOFError) as exc:
            log.info("WriteTxnMarkers to broker %d failed: %r", leader, exc)
            return dict.fromkeys(tps, Errors.NETWORK_EXCEPTION)
        except Exception:  # an answer that does not decode, ...: retried, never dropped
            log.exception("WriteTxnMarkers to broker %d failed", leader)
            return dict.fromkeys(tps, Errors.UNKNOWN_SERVER_ERROR)
        out = dict.fromkeys(tps, Errors.UNKNOWN_SERVER_ERROR)
        for r in resp.markers:
            if r.producer_id != m.producer_id:
                continue
            for t in r.topics:
                for p in t.partitions:
                    if (t.name, int(p.partition_index)) in out:
                        out[(t.name, int(p.partition_index))] = int(p.error_code)
        return out


def _report(task: asyncio.Task[None]) -> None:
    """A send that died leaves its transaction in Prepare*: say so loudly."""
    if not task.cancelled() and task.exception() is not None:
        log.error("%s failed", task.get_name(), exc_info=task.exception())


def _marker_entity(m: SendMarkers, topics: dict[str, list[int]]) -> Any:
    return WritableTxnMarker(
        producer_id=i64(m.producer_id),
        producer_epoch=i16(m.producer_epoch),
        transaction_result=m.commit,
        topics=tuple(
            WritableTxnMarkerTopic(name=t, partition_indexes=tuple(i32(p) for p in ps))
            for t, ps in topics.items()
        ),
        coordinator_epoch=i32(m.coordinator_epoch),
    )
