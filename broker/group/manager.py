"""The group coordinator's asyncio shell: moves requests, time, appends and leadership
changes into the sans-I/O core (`coordinator.py`) and carries its intents out.

What it shares with the transaction coordinator's shell (tokens, tasks, the timer, the
load-on-leadership publisher, the chunked read of a partition) is
`broker/coordinator_shell.py`; here is what is the group coordinator's own:

- A request's future is answered now, or later (JoinGroup and SyncGroup wait for the
  rebalance).
- `Append` intents become one record batch each, produced to `__consumer_offsets`;
  appends are started in the order the core asked, so the log keeps that order. A
  TxnOffsetCommit's batch is transactional.
- Loading a partition keeps its offset and group records and the transaction markers
  (a transaction's offsets apply or drop at its marker); a marker appended while we
  lead is handed to the core (`on_txn_marker`).

Time comes from the injected clock: the core's `now_ms` is wall time, as the timestamps
it writes to the log are.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from broker.coordinator_shell import CoordinatorShell, Replicas
from broker.group.config import GroupConfig
from broker.group.coordinator import GroupCoordinatorCore
from broker.group.messages import Append, LoadedRecord, Out, TxnMarker
from common.clock import SYSTEM_CLOCK, Clock
from common.topics import GROUP_METADATA_TOPIC_NAME as OFFSETS_TOPIC
from storage.record_batch import RecordBatchView
from storage.records import Record, build_batch, decode_batch

log = logging.getLogger("broker.group")

_ABORT, _COMMIT = 0, 1  # Kafka's ControlRecordType ids


def _marker_committed(records: list[Record]) -> bool | None:
    """A control batch's EndTransactionMarker: True for COMMIT, False for ABORT, None
    for another control record. Its key is version int16, type int16."""
    key = records[0].key if records else None
    if key is None or len(key) < 4:
        return None
    kind = int.from_bytes(key[2:4], "big", signed=True)
    return {_COMMIT: True, _ABORT: False}.get(kind)


Token = asyncio.Future[Any]


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"  # as Kafka's: the client id and a random UUID


class GroupCoordinator(CoordinatorShell):
    def __init__(
        self,
        config: GroupConfig,
        replicas: Replicas,
        create_offsets_topic: Callable[[], Awaitable[None]],
        commit_timeout_ms: int = 5000,
        *,
        clock: Clock = SYSTEM_CLOCK,
        new_member_id: Callable[[str], str] = _random_member_id,
    ) -> None:
        super().__init__(
            topic=OFFSETS_TOPIC,
            name="group",
            what="group coordinator",
            log=log,
            replicas=replicas,
            create_topic=create_offsets_topic,
            append_timeout_ms=commit_timeout_ms,
            clock=clock,
        )
        self.core: GroupCoordinatorCore[Token] = GroupCoordinatorCore(
            config, new_member_id=new_member_id
        )

    # -- requests ------------------------------------------------------------------------------

    def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets on first use (FindCoordinator), once at a time."""
        self._ensure_topic()

    def _carry_out(self, out: Append) -> None:
        self._spawn(self._write(out), "group-append")

    async def _write(self, a: Append) -> None:
        # A TxnOffsetCommit's batch is transactional with the producer's id and epoch and
        # no sequence, as Kafka's coordinator writes it (the log checks the epoch).
        batch = build_batch(
            [Record(value=v, key=k) for k, v in a.records],
            now_ms=self._clock.wall_ms(),
            producer_id=a.producer_id,
            producer_epoch=a.producer_epoch,
            is_transactional=a.producer_id >= 0,
        )
        # The produce path verifies a transactional batch with the transaction
        # coordinator (KIP-890 part 1) before it opens a transaction here.
        code, base_offset = await self._append(
            a.partition, batch, a.transactional_id if a.producer_id >= 0 else None
        )
        now = self._clock.wall_ms()
        self._process(self.core.on_append_done(a.write_id, code, now, base_offset))

    def on_txn_marker(self, topic: str, partition: int, producer_id: int, committed: bool) -> None:
        """ReplicaManager.marker_listeners: a marker was appended on a partition we lead;
        for __consumer_offsets, the producer's pending transactional offsets of the
        groups there become committed (or are dropped on abort)."""
        if topic != OFFSETS_TOPIC:
            return
        if partition in self._loads:
            # Loading reads the log to where it ended when it started: read it again, so
            # the marker (in the log by now) is seen whatever the timing.
            self._restart_load(partition)
            return
        self._process(self.core.on_txn_marker(partition, producer_id, committed))

    # -- leadership ----------------------------------------------------------------------------

    def _begin_load(self, p: int, epoch: int) -> list[Out[Token]]:
        return self.core.begin_load(p)

    async def _load(self, p: int) -> None:
        h = self._replicas.partition(OFFSETS_TOPIC, p)
        if h is None:
            return
        started = self._clock.monotonic_ms()
        records: list[LoadedRecord | TxnMarker] = []

        def visit(view: RecordBatchView) -> None:
            decoded = decode_batch(view)
            if view.is_control:
                # A transaction's end: its transactional offsets apply or drop.
                committed = _marker_committed(decoded.records)
                if committed is not None:
                    records.append(TxnMarker(view.producer_id, committed))
            else:
                pid = view.producer_id if view.is_transactional else -1
                for r in decoded.records:
                    records.append(LoadedRecord(r.key, r.value, view.base_offset, pid))

        offset = await self._read_log(p, h.log, visit)
        self._loads.pop(p, None)
        bad = self.core.load(p, records, self._clock.wall_ms())
        self._wake.set()
        log.info(
            "loaded %s-%d: %d records to offset %d in %d ms%s",
            OFFSETS_TOPIC,
            p,
            len(records),
            offset,
            self._clock.monotonic_ms() - started,
            f", {bad} unreadable" if bad else "",
        )
