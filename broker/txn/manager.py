"""The transaction coordinator's asyncio shell: moves requests, time, appends, marker
acknowledgements and leadership changes into the sans-I/O core (`coordinator.py`) and
carries its intents out.

What it shares with the group coordinator's shell (tokens, tasks, the timer, the
load-on-leadership publisher, the chunked read of a partition, appends) is
`broker/coordinator_shell.py`; here is what is the transaction coordinator's own:

- `Append` intents are produced to `__transaction_state`, in the order the core asked.
- `SendMarkers` intents go to the marker channel (`markers.py`).
- A partition's load begins at its leader epoch, the coordinator epoch; it keeps the
  log's records (the topic holds no control batches).
- New producer ids come from the controller's blocks (`allocate`, Admin's); one is
  kept at hand so the core can take it synchronously (`ensure_producer_id`).
- `verify` is the KIP-890 verifier the produce path calls (ReplicaManager.verifier).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.add_partitions_to_txn.v4.request import (
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from kio.static.primitive import i16, i32, i64

from broker.coordinator_shell import CoordinatorShell, Replicas
from broker.group.messages import Append
from broker.txn.coordinator import TransactionCoordinatorCore
from broker.txn.markers import MarkerChannel, Sender
from broker.txn.messages import Out, SendMarkers, TxnConfig
from common.api_keys import ApiKey
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors
from common.topics import TRANSACTION_STATE_TOPIC_NAME as TXN_TOPIC
from metadata_log.image import MetadataImage
from storage.record_batch import RecordBatchView
from storage.records import Record, build_batch, decode_batch

log = logging.getLogger("broker.txn")

Token = asyncio.Future[Any]


class TransactionCoordinator(CoordinatorShell):
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
        super().__init__(
            topic=TXN_TOPIC,
            name="txn",
            what="transaction coordinator",
            log=log,
            replicas=replicas,
            create_topic=create_txn_topic,
            append_timeout_ms=append_timeout_ms,
            clock=clock,
        )
        self.broker_id = broker_id
        self._spare_pid: int | None = None
        self.core: TransactionCoordinatorCore[Token] = TransactionCoordinatorCore(
            config, self._take_pid, offsets_partition_for
        )
        self._image = image
        self._sender = sender
        self._allocate = allocate
        self.markers = MarkerChannel(sender, self._leader_of, self._markers_done)
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

    def ensure_txn_topic(self) -> None:
        """Create __transaction_state on first use (FindCoordinator), once at a time."""
        self._ensure_topic()

    def _carry_out(self, out: Append | SendMarkers) -> None:
        if isinstance(out, SendMarkers):
            self.markers.add(out)
        else:
            self._spawn(self._write(out), "txn-append")

    async def _write(self, a: Append) -> None:
        batch = build_batch(
            [Record(value=v, key=k) for k, v in a.records], now_ms=self._clock.wall_ms()
        )
        code, _ = await self._append(a.partition, batch)
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

    # -- shutdown and leadership -------------------------------------------------------------

    async def _stop(self) -> None:
        await self.markers.shutdown()

    def _begin_load(self, p: int, epoch: int) -> list[Out[Token]]:
        return self.core.begin_load(p, epoch)

    async def _load(self, p: int) -> None:
        h = self._replicas.partition(TXN_TOPIC, p)
        if h is None:
            return
        records: list[tuple[bytes | None, bytes | None]] = []

        def visit(view: RecordBatchView) -> None:
            if not view.is_control:
                for r in decode_batch(view).records:
                    records.append((r.key, r.value))

        await self._read_log(p, h.log, visit)
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
