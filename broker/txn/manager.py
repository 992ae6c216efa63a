"""The transaction coordinator's asyncio shell (as `broker/group/manager.py` for groups):
moves requests, time, appends, marker acknowledgements and leadership changes into the
sans-I/O core (`coordinator.py`) and carries its intents out.

- A request becomes a future handed to the core as its token.
- `Append` intents are produced to `__transaction_state` with acks=all through the
  replica manager, in the order the core asked.
- `SendMarkers` intents go to the marker channel (`markers.py`).
- One timer task runs `tick` at the core's next deadline.
- A metadata publisher, after the replica manager: each `__transaction_state`
  partition we now lead (or lead in a new epoch, the coordinator epoch) is loaded from
  the log; each we stopped leading is dropped.
- New producer ids come from the controller's blocks (`allocate`, Admin's); one is
  kept at hand so the core can take it synchronously (`ensure_producer_id`).
- `verify` is the KIP-890 verifier the produce path calls (ReplicaManager.verifier).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.static.primitive import i16, i32, i64

from broker.group.manager import Replicas
from broker.group.messages import Append, Reply
from broker.metadata_publisher import LoaderManifest
from broker.txn.coordinator import TransactionCoordinatorCore
from broker.txn.markers import MarkerChannel, Sender
from broker.txn.messages import Out, SendMarkers, TxnConfig
from common.api_keys import ApiKey
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors
from common.topics import TRANSACTION_STATE_TOPIC_NAME as TXN_TOPIC
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from storage.log_types import OffsetOutOfRangeError
from storage.record_batch import iter_batches, validate_records
from storage.records import Record, build_batch, decode_batch

log = logging.getLogger("broker.txn")

_LOAD_CHUNK = 1 << 20
Token = asyncio.Future[Any]


class TransactionCoordinator:
    def __init__(
        self,
        broker_id: int,
        config: TxnConfig,
        replicas: Replicas,
        image: Callable[[], MetadataImage],
        sender: Sender,
        allocate: Callable[[], Awaitable[tuple[int, int, int]]],
        offsets_partition_for: Callable[[str], tuple[str, int]],
        create_txn_topic: Callable[[], Awaitable[None]],
        append_timeout_ms: int = 5000,
        *,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.broker_id = broker_id
        self._spare_pid: int | None = None
        self.core: TransactionCoordinatorCore[Token] = TransactionCoordinatorCore(
            config, self._take_pid, offsets_partition_for
        )
        self._clock = clock
        self._replicas = replicas
        self._image = image
        self._sender = sender
        self._allocate = allocate
        self._create_txn_topic = create_txn_topic
        self._append_timeout_ms = append_timeout_ms
        self.markers = MarkerChannel(sender, self._leader_of, self._markers_done)
        self._led: dict[int, int] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._timer: asyncio.Task[None] | None = None
        self._creating: asyncio.Task[None] | None = None
        self._pid_lock = asyncio.Lock()

    # -- producer ids --------------------------------------------------------------------------

    def _take_pid(self) -> int | None:
        pid, self._spare_pid = self._spare_pid, None
        return pid

    async def ensure_producer_id(self) -> None:
        """Have a producer id at hand before InitProducerId reaches the core."""
        async with self._pid_lock:
            if self._spare_pid is None:
                code, pid, _ = await self._allocate()
                if code == Errors.NONE:
                    self._spare_pid = pid

    # -- requests ------------------------------------------------------------------------------

    def now_ms(self) -> int:
        return self._clock.wall_ms()

    async def call(self, op: Callable[[Token, int], list[Out[Token]]]) -> Any:
        fut: Token = asyncio.get_running_loop().create_future()
        self._process(op(fut, self._clock.wall_ms()))
        return await fut

    def ensure_txn_topic(self) -> None:
        """Create __transaction_state on first use (FindCoordinator), once at a time."""
        if self._creating is None or self._creating.done():
            self._creating = self._spawn(self._create_txn_topic(), "create-txn-topic")

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
            elif isinstance(o, SendMarkers):
                self.markers.add(o)
            else:
                self._spawn(self._write(o), "txn-append")
        self._wake.set()

    async def _write(self, a: Append) -> None:
        batch = build_batch(
            [Record(value=v, key=k) for k, v in a.records], now_ms=self._clock.wall_ms()
        )
        try:
            result = await self._replicas.produce(
                TXN_TOPIC, a.partition, validate_records(batch), -1, self._append_timeout_ms
            )
            code = result.error_code
        except Exception:
            log.exception("append to %s-%d failed", TXN_TOPIC, a.partition)
            code = Errors.UNKNOWN_SERVER_ERROR
        if code != Errors.NONE:
            log.info("append to %s-%d failed: error %d", TXN_TOPIC, a.partition, code)
        self._process(self.core.on_append_done(a.write_id, code, self._clock.wall_ms()))

    # -- markers -------------------------------------------------------------------------------

    def _leader_of(self, topic: str, partition: int) -> int | None:
        t = self._image().topic_by_name(topic)
        if t is None or partition not in t.partitions:
            return None
        return t.partitions[partition].leader

    def _markers_done(self, m: SendMarkers, written: bool) -> None:
        self._process(
            self.core.on_markers_done(
                m.transactional_id, m.producer_id, m.producer_epoch, m.coordinator_epoch,
                written, self._clock.wall_ms(),
            )
        )  # fmt: skip

    # -- KIP-890 verification --------------------------------------------------------------------

    async def verify(
        self, transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> int:
        """Is (topic, partition) in the producer's ongoing transaction? Asks the
        transactional id's coordinator (this core when it is us): NONE, or the error
        the produce answers."""
        t = self._image().topic_by_name(TXN_TOPIC)
        p = self.core.partition_for(transactional_id)
        leader = t.partitions[p].leader if t is not None and p in t.partitions else -1
        if leader < 0:
            return Errors.NOT_ENOUGH_REPLICAS  # Kafka: retriable for the producer
        if leader == self.broker_id:
            core = self.core
            result = await self.call(
                lambda tok, _now: core.verify_partitions(
                    tok, transactional_id, producer_id, epoch, [(topic, partition)]
                )
            )
            return _verify_code(int(result[(topic, partition)]))
        try:
            resp = await self._sender.send(
                leader, ApiKey.ADD_PARTITIONS_TO_TXN, 4, transactions=(
                    _verify_entity(transactional_id, producer_id, epoch, topic, partition),
                ),
            )  # fmt: skip
        except (OSError, TimeoutError, EOFError) as exc:
            log.info("verification by broker %d failed: %r", leader, exc)
            return Errors.NOT_ENOUGH_REPLICAS
        except Exception:  # retriable for the producer, whatever went wrong here
            log.exception("verification by broker %d failed", leader)
            return Errors.NOT_ENOUGH_REPLICAS
        if resp.error_code != Errors.NONE:
            return _verify_code(int(resp.error_code))
        for r in resp.results_by_transaction:
            for tr in r.topic_results:
                for pr in tr.results_by_partition:
                    if tr.name == topic and pr.partition_index == partition:
                        return _verify_code(int(pr.partition_error_code))
        return Errors.UNKNOWN_SERVER_ERROR

    # -- timers --------------------------------------------------------------------------------

    def start(self) -> None:
        self._timer = asyncio.create_task(self._run_timer(), name="txn-timer")

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
            except Exception:
                log.exception("transaction coordinator tick failed")

    async def shutdown(self) -> None:
        tasks = [t for t in (self._timer, *self._loads.values(), *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._timer = None
        await self.markers.shutdown()
        for p in list(self._led):
            self._process(self.core.unload(p))
        self._led.clear()

    # -- leadership ----------------------------------------------------------------------------

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        topic = image.topic_by_name(TXN_TOPIC)
        if topic is not None:
            self.core.num_partitions = len(topic.partitions)
        partitions = set(topic.partitions) if topic is not None else set()
        for p in sorted(partitions | set(self._led)):
            h = self._replicas.partition(TXN_TOPIC, p)
            leading = h is not None and h.core.is_leader and p in partitions
            epoch = h.core.leader_epoch if leading and h is not None else None
            if epoch is not None and self._led.get(p) != epoch:
                self._led[p] = epoch
                self._cancel_load(p)
                self._process(self.core.begin_load(p, epoch))
                self._loads[p] = asyncio.create_task(self._load(p), name=f"txn-load-{p}")
            elif epoch is None and p in self._led:
                del self._led[p]
                self._cancel_load(p)
                self._process(self.core.unload(p))
                log.info("no longer coordinating %s-%d", TXN_TOPIC, p)

    def _cancel_load(self, p: int) -> None:
        task = self._loads.pop(p, None)
        if task is not None:
            task.cancel()

    async def _load(self, p: int) -> None:
        h = self._replicas.partition(TXN_TOPIC, p)
        if h is None:
            return
        records: list[tuple[bytes | None, bytes | None]] = []
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
                    if view.next_offset <= offset or view.is_control:
                        continue
                    for r in decode_batch(view).records:
                        records.append((r.key, r.value))
                    offset, moved = view.next_offset, True
                if not moved:
                    break
                await asyncio.sleep(0)
        except (OffsetOutOfRangeError, ValueError, OSError) as exc:
            log.warning("loading %s-%d stopped at offset %d: %r", TXN_TOPIC, p, offset, exc)
        self._loads.pop(p, None)
        outs, bad = self.core.load(p, records, self._clock.wall_ms())
        self._process(outs)
        log.info(
            "loaded %s-%d: %d records%s", TXN_TOPIC, p, len(records),
            f", {bad} unreadable" if bad else "",
        )  # fmt: skip


def _verify_code(code: int) -> int:
    """What a produce answers for a failed verification (Kafka's
    AddPartitionsToTxnManager): coordinator moves are retriable for the producer."""
    if code in (Errors.NOT_COORDINATOR, Errors.COORDINATOR_NOT_AVAILABLE,
                Errors.COORDINATOR_LOAD_IN_PROGRESS, Errors.CONCURRENT_TRANSACTIONS):  # fmt: skip
        return Errors.NOT_ENOUGH_REPLICAS
    if code == Errors.PRODUCER_FENCED:
        return Errors.INVALID_PRODUCER_EPOCH  # what a produce answers a fenced producer
    return code


def _verify_entity(tid: str, pid: int, epoch: int, topic: str, partition: int) -> Any:
    return AddPartitionsToTxnTransaction(
        transactional_id=tid,
        producer_id=i64(pid),
        producer_epoch=i16(epoch),
        verify_only=True,
        topics=(AddPartitionsToTxnTopic(name=topic, partitions=(i32(partition),)),),
    )
