"""What the group and the transaction coordinators' asyncio shells share, defined once.

Both shells drive a sans-I/O core that keeps its state in a compacted internal topic
(`__consumer_offsets`, `__transaction_state`) and work the same way around it:

- a request becomes a future handed to the core as its token (`call`);
- the tasks the shell starts are tracked so `shutdown` can cancel and await them all;
- one timer task sleeps until the core's next deadline (or until an event may have
  moved it) and runs `tick`;
- a metadata publisher, after the replica manager: each partition of the topic we now
  lead (or lead in a new epoch) is loaded from its log, each we stopped leading is
  dropped;
- an append is produced with acks=all through the replica manager.

What differs stays in each shell: the intents it carries out besides replies
(`_carry_out`), how a
partition's load begins (`_begin_load`), what it keeps of the batches it loads (`_load`).
The shells see the partitions only through `Replicas` (what they need of the replica
manager), so nothing above them in `broker/` is imported here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from broker.group.messages import Reply
from broker.metadata_publisher import LoaderManifest
from common.clock import Clock
from common.errors import Errors
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from storage.log import Log
from storage.log_types import OffsetOutOfRangeError
from storage.record_batch import CheckedBatch, RecordBatchView, iter_batches, validate_records

_LOAD_CHUNK = 1 << 20

Token = asyncio.Future[Any]


class LeaderState(Protocol):
    """What a coordinator reads of a partition's replication state."""

    @property
    def is_leader(self) -> bool: ...
    @property
    def leader_epoch(self) -> int: ...


class InternalReplica(Protocol):
    """A hosted partition of an internal topic: its replication state and its log."""

    @property
    def core(self) -> LeaderState: ...
    @property
    def log(self) -> Log: ...


class AppendResult(Protocol):
    @property
    def error_code(self) -> int: ...


class Replicas(Protocol):
    """What a coordinator needs of the replica manager: the partitions hosted here,
    and appends through the normal replication path."""

    def partition(self, topic: str, partition: int) -> InternalReplica | None: ...
    async def produce(
        self,
        topic: str,
        partition: int,
        batches: list[CheckedBatch],
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> AppendResult: ...


class ShellCore(Protocol):
    """What the shared shell calls of a core (the rest is each shell's own)."""

    num_partitions: int

    def next_deadline_ms(self) -> int | None: ...
    def tick(self, now_ms: int) -> Any: ...
    def unload(self, partition: int) -> Any: ...


class CoordinatorShell:
    """The asyncio shell around a coordinator core whose state lives in `topic`.

    `name` prefixes the shell's task names ("group-timer", "txn-load-3"); `what` names
    the coordinator in its logs."""

    core: ShellCore

    def __init__(
        self,
        *,
        topic: str,
        name: str,
        what: str,
        log: logging.Logger,
        replicas: Replicas,
        create_topic: Callable[[], Awaitable[None]],
        append_timeout_ms: int,
        clock: Clock,
    ) -> None:
        self._topic = topic
        self._name = name
        self._what = what
        self._log = log
        self._replicas = replicas
        self._create_topic = create_topic
        self._append_timeout_ms = append_timeout_ms
        self._clock = clock
        self._led: dict[int, int] = {}  # partition -> leader epoch we loaded at
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._creating: asyncio.Task[None] | None = None

    # -- each shell's own ---------------------------------------------------------------------

    def _carry_out(self, out: Any) -> None:
        """Carry out one of the core's intents other than a `Reply` (an append, ...)."""
        raise NotImplementedError

    def _begin_load(self, p: int, epoch: int) -> Any:
        """The core's intents on starting to load partition p at leader epoch `epoch`."""
        raise NotImplementedError

    async def _load(self, p: int) -> None:
        """Read partition p's log (`_read_log`) into the core."""
        raise NotImplementedError

    async def _stop(self) -> None:
        """Stop what the shell runs besides its tasks, before the partitions unload."""

    # -- requests ------------------------------------------------------------------------------

    def _process(self, outs: list[Any]) -> None:
        for o in outs:
            if isinstance(o, Reply):
                if not o.token.done():
                    o.token.set_result(o.result)
            else:
                self._carry_out(o)
        self._wake.set()  # deadlines may have moved

    async def call(self, op: Callable[[Token, int], Any]) -> Any:
        """Run one core operation with a fresh future as its token; await the answer."""
        fut: Token = asyncio.get_running_loop().create_future()
        self._process(op(fut, self._clock.wall_ms()))
        return await fut

    def _ensure_topic(self) -> None:
        """Create the internal topic on first use (FindCoordinator), once at a time."""
        if self._creating is None or self._creating.done():
            self._creating = self._spawn(self._create_topic(), f"create-{self._name}-topic")

    def _spawn(self, coro: Awaitable[None], name: str) -> asyncio.Task[None]:
        # Kept until done, so a task is not garbage-collected mid-way and shutdown
        # finds every one.
        task = asyncio.ensure_future(coro)
        task.set_name(name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _append(
        self, partition: int, batch: bytes, transactional_id: str | None = None
    ) -> tuple[int, int]:
        """Produce one batch to the topic with acks=all; (error code, base offset)."""
        base_offset = -1
        try:
            result = await self._replicas.produce(
                self._topic,
                partition,
                validate_records(batch),
                -1,
                self._append_timeout_ms,
                transactional_id=transactional_id,
            )
            code, base_offset = result.error_code, getattr(result, "base_offset", -1)
        except Exception:
            self._log.exception("append to %s-%d failed", self._topic, partition)
            code = Errors.UNKNOWN_SERVER_ERROR
        if code != Errors.NONE:
            self._log.info("append to %s-%d failed: error %d", self._topic, partition, code)
        return code, base_offset

    # -- timers --------------------------------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.create_task(self._run_timer(), name=f"{self._name}-timer")

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
            except Exception:  # never let one bad entry stop every entry's timers
                self._log.exception("%s tick failed", self._what)

    async def shutdown(self) -> None:
        tasks = [t for t in (self._timer, *self._loads.values(), *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._timer = None
        await self._stop()
        for p in list(self._led):
            self._process(self.core.unload(p))
        self._led.clear()

    # -- leadership ----------------------------------------------------------------------------

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        """MetadataPublisher, after the replica manager applied the update: load the
        partitions we now lead, drop those we no longer lead."""
        topic = image.topic_by_name(self._topic)
        if topic is not None:
            self.core.num_partitions = len(topic.partitions)
        partitions = set(topic.partitions) if topic is not None else set()
        for p in sorted(partitions | set(self._led)):
            h = self._replicas.partition(self._topic, p)
            leading = h is not None and h.core.is_leader and p in partitions
            epoch = h.core.leader_epoch if leading and h is not None else None
            if epoch is not None and self._led.get(p) != epoch:
                self._led[p] = epoch
                self._cancel_load(p)
                self._process(self._begin_load(p, epoch))
                self._restart_load(p)
            elif epoch is None and p in self._led:
                del self._led[p]
                self._cancel_load(p)
                self._process(self.core.unload(p))
                self._log.info("no longer coordinating %s-%d", self._topic, p)

    def _restart_load(self, p: int) -> None:
        self._cancel_load(p)
        self._loads[p] = asyncio.create_task(self._load(p), name=f"{self._name}-load-{p}")

    def _cancel_load(self, p: int) -> None:
        task = self._loads.pop(p, None)
        if task is not None:
            task.cancel()

    async def _read_log(self, p: int, lg: Log, visit: Callable[[RecordBatchView], None]) -> int:
        """Hand each batch of partition p's log, from its start to where it ended when
        the read began, to `visit`; return the offset reached. Read in chunks, letting
        requests in between: a compacted topic's log can still be large."""
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
                    visit(view)
                    offset, moved = view.next_offset, True
                if not moved:
                    break
                await asyncio.sleep(0)  # let requests in between chunks
        except (OffsetOutOfRangeError, ValueError, OSError) as exc:
            self._log.warning("loading %s-%d stopped at offset %d: %r", self._topic, p, offset, exc)
        return offset
