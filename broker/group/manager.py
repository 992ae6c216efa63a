"""The group coordinator's asyncio shell: moves requests, time, appends and leadership
changes into the sans-I/O core (`coordinator.py`) and carries its intents out.

- A request becomes a future handed to the core as its token; the core answers it
  now, or later (JoinGroup and SyncGroup wait for the rebalance).
- `Append` intents become one record batch each, produced to `__consumer_offsets`
  with acks=all through the replica manager (the normal replication path); appends
  are started in the order the core asked, so the log keeps that order.
- One timer task sleeps until the core's next deadline (or until an event may have
  moved it) and runs `tick`.
- A metadata publisher, after the replica manager: for each partition of
  `__consumer_offsets` we now lead (or lead in a new epoch) the core loads its groups
  from the log; for each we stopped leading it drops them.

It sees the partitions only through `Replicas` (what it needs of the replica manager),
so nothing above it in `broker/` is imported here. Time comes from the injected clock:
the core's `now_ms` is wall time, as the timestamps it writes to the log are.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from broker.group.config import GroupConfig
from broker.group.coordinator import GroupCoordinatorCore
from broker.group.messages import Append, LoadedRecord, Out, Reply, TxnMarker
from broker.metadata_publisher import LoaderManifest
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors
from common.topics import GROUP_METADATA_TOPIC_NAME as OFFSETS_TOPIC
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from storage.log import Log
from storage.log_types import OffsetOutOfRangeError
from storage.record_batch import CheckedBatch, iter_batches, validate_records
from storage.records import Record, build_batch, decode_batch

log = logging.getLogger("broker.group")

_LOAD_CHUNK = 1 << 20
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


class LeaderState(Protocol):
    """What the coordinator reads of a partition's replication state."""

    @property
    def is_leader(self) -> bool: ...
    @property
    def leader_epoch(self) -> int: ...


class OffsetsReplica(Protocol):
    """A hosted `__consumer_offsets` partition: its replication state and its log."""

    @property
    def core(self) -> LeaderState: ...
    @property
    def log(self) -> Log: ...


class AppendResult(Protocol):
    @property
    def error_code(self) -> int: ...


class Replicas(Protocol):
    """What the coordinator needs of the replica manager: the partitions hosted here,
    and appends through the normal replication path."""

    def partition(self, topic: str, partition: int) -> OffsetsReplica | None: ...
    async def produce(
        self,
        topic: str,
        partition: int,
        batches: list[CheckedBatch],
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> AppendResult: ...


def _random_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"  # as Kafka's: the client id and a random UUID


class GroupCoordinator:
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
        self.core: GroupCoordinatorCore[Token] = GroupCoordinatorCore(
            config, new_member_id=new_member_id
        )
        self._clock = clock
        self._replicas = replicas
        self._create_offsets_topic = create_offsets_topic
        self._commit_timeout_ms = commit_timeout_ms
        self._led: dict[int, int] = {}  # offsets partition -> leader epoch we loaded at
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._creating: asyncio.Task[None] | None = None

    # -- requests ------------------------------------------------------------------------------

    async def call(self, op: Callable[[Token, int], list[Out[Token]]]) -> Any:
        """Run one core operation with a fresh future as its token; await the answer."""
        fut: Token = asyncio.get_running_loop().create_future()
        self._process(op(fut, self._clock.wall_ms()))
        return await fut

    def ensure_offsets_topic(self) -> None:
        """Create __consumer_offsets on first use (FindCoordinator), once at a time."""
        if self._creating is None or self._creating.done():
            self._creating = self._spawn(self._create_offsets_topic(), "create-offsets-topic")

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def _process(self, outs: list[Out[Token]]) -> None:
        for o in outs:
            if isinstance(o, Reply):
                if not o.token.done():
                    o.token.set_result(o.result)
            else:
                self._spawn(self._write(o), "group-append")
        self._wake.set()  # deadlines may have moved

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
        base_offset = -1
        try:
            # The produce path verifies a transactional batch with the transaction
            # coordinator (KIP-890 part 1) before it opens a transaction here.
            result = await self._replicas.produce(
                OFFSETS_TOPIC,
                a.partition,
                validate_records(batch),
                -1,
                self._commit_timeout_ms,
                transactional_id=a.transactional_id if a.producer_id >= 0 else None,
            )
            code, base_offset = result.error_code, getattr(result, "base_offset", -1)
        except Exception:
            log.exception("append to %s-%d failed", OFFSETS_TOPIC, a.partition)
            code = Errors.UNKNOWN_SERVER_ERROR
        if code != Errors.NONE:
            log.info("append to %s-%d failed: error %d", OFFSETS_TOPIC, a.partition, code)
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
            self._cancel_load(partition)
            self._loads[partition] = asyncio.create_task(
                self._load(partition), name=f"group-load-{partition}"
            )
            return
        self._process(self.core.on_txn_marker(partition, producer_id, committed))

    # -- timers --------------------------------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.create_task(self._run_timer(), name="group-timer")

    async def _run_timer(self) -> None:
        while True:
            deadline = self.core.next_deadline_ms()
            now = self._clock.wall_ms()
            wait = 1.0 if deadline is None else max(0.0, (deadline - now) / 1000)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(wait, 60.0)):
                    await self._wake.wait()
            try:
                self._process(self.core.tick(self._clock.wall_ms()))
            except Exception:  # never let one bad group stop every group's timers
                log.exception("group coordinator tick failed")

    async def shutdown(self) -> None:
        tasks = [t for t in (self._timer, *self._loads.values(), *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._timer = None
        for p in list(self._led):
            self._process(self.core.unload(p))
        self._led.clear()

    # -- leadership ----------------------------------------------------------------------------

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        """MetadataPublisher, after the replica manager applied the update: load the
        offsets partitions we now lead, drop those we no longer lead."""
        topic = image.topic_by_name(OFFSETS_TOPIC)
        if topic is not None:
            self.core.num_partitions = len(topic.partitions)
        partitions = set(topic.partitions) if topic is not None else set()
        for p in sorted(partitions | set(self._led)):
            h = self._replicas.partition(OFFSETS_TOPIC, p)
            leading = h is not None and h.core.is_leader and p in partitions
            epoch = h.core.leader_epoch if leading and h is not None else None
            if epoch is not None and self._led.get(p) != epoch:
                self._led[p] = epoch
                self._cancel_load(p)
                self._process(self.core.begin_load(p))
                self._loads[p] = asyncio.create_task(self._load(p), name=f"group-load-{p}")
            elif epoch is None and p in self._led:
                del self._led[p]
                self._cancel_load(p)
                self._process(self.core.unload(p))
                log.info("no longer coordinating %s-%d", OFFSETS_TOPIC, p)

    def _cancel_load(self, p: int) -> None:
        task = self._loads.pop(p, None)
        if task is not None:
            task.cancel()

    async def _load(self, p: int) -> None:
        h = self._replicas.partition(OFFSETS_TOPIC, p)
        if h is None:
            return
        started = self._clock.monotonic_ms()
        records: list[LoadedRecord | TxnMarker] = []
        lg = h.log
        offset, end = lg.log_start_offset, lg.log_end_offset
        try:
            while offset < end:
                data = lg.read(offset, _LOAD_CHUNK)
                raw = data.records.read() if hasattr(data.records, "read") else data.records
                if not raw:
                    break
                moved = False
                for view in iter_batches(memoryview(bytes(raw))):
                    if view.next_offset <= offset:
                        continue
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
                    offset, moved = view.next_offset, True
                if not moved:
                    break
                await asyncio.sleep(0)  # let requests in between chunks
        except (OffsetOutOfRangeError, ValueError, OSError) as exc:
            log.warning("loading %s-%d stopped at offset %d: %r", OFFSETS_TOPIC, p, offset, exc)
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
