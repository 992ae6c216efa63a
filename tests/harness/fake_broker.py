"""A broker's protocol layer (network, codec, apis) on its own thread, over a FAKE runtime.

The fake stands in for the replica manager and the admin facade (the protocol layer is
what the broker tests check), but it keeps a real `storage.log.Log` per partition under a
directory, so produced bytes go through real storage and fetches are real file slices.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from broker.apis import KafkaApis
from broker.change_feed import ChangeFeed
from broker.dynamic_config import DynamicBrokerConfig
from broker.fetch_session import FetchSessionCache
from broker.group.config import GroupConfig
from broker.group.manager import GroupCoordinator
from broker.network import KafkaServer
from broker.results import FetchPartition, FetchResult, ListOffsetResult, ProduceResult
from broker.txn.config import TxnConfig
from broker.txn.manager import TransactionCoordinator
from metadata_log.controller_api import (
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    IncrementalAlterConfigsRequest,
    TopicResult,
)
from metadata_log.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from metadata_log.records import Endpoint
from storage.config import LogConfig
from storage.log import Log
from storage.log_types import FetchDataInfo, OffsetOutOfRangeError
from storage.record_batch import CheckedBatch

T = TypeVar("T")
BROKER_ID = 1
CLUSTER_ID = "wire-test-cluster"


class FakeRuntime:
    """One broker leading every partition; a real Log per partition; HW = LEO."""

    def __init__(self, root: Path) -> None:
        self.broker_id = BROKER_ID
        self.cluster_id = CLUSTER_ID
        self.auto_create_topics_enable = False
        self.root = root
        self.host, self.port = "127.0.0.1", 0
        self.logs: dict[tuple[str, int], Log] = {}
        self._image = MetadataImage()
        self._next_pid = itertools.count(1000)
        self._appended: asyncio.Event | None = None  # created on the server's loop
        self.produce_calls = 0
        self.fetch_calls = 0
        # A real coordinator, but __consumer_offsets never gets created here: clients
        # with a group.id hear COORDINATOR_NOT_AVAILABLE, as from a cluster without it.
        self.groups = GroupCoordinator(GroupConfig(), self, self._no_offsets_topic)  # type: ignore[arg-type]
        # Likewise a real transaction coordinator without __transaction_state:
        # transactional ids hear NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE.
        self.txn = TransactionCoordinator(
            BROKER_ID, TxnConfig(), self, self.image, _NoBrokers(),  # type: ignore[arg-type]
            self.init_producer_id, lambda g: ("__consumer_offsets", 0), self._no_offsets_topic,
        )  # fmt: skip
        # The parts the handlers call: this fake plays the replica manager and the admin.
        self.replica_manager = self
        self.admin = self
        # The broker configs DescribeConfigs shows: static only.
        self.dynamic = DynamicBrokerConfig(BROKER_ID, {"log.dirs": str(root)}, LogConfig())
        self.fetch_sessions = FetchSessionCache(max_slots=3)  # KIP-227; small, to test eviction
        self.change_feed = ChangeFeed()  # what incremental fetches read: produces mark it
        self.clock_ms = 0  # what now_ms answers (session eviction ages), moved by tests

    def now_ms(self) -> int:
        return self.clock_ms

    async def _no_offsets_topic(self) -> None:
        return None

    # metadata
    def image(self) -> MetadataImage:
        return self._image

    def set_endpoint(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        reg = BrokerRegistration(
            BROKER_ID, "inc", 1, (Endpoint("PLAINTEXT", host, port),), None, False
        )
        self._image = MetadataImage(
            offset=self._image.offset + 1,
            brokers={BROKER_ID: reg},
            topics=self._image.topics,
            topic_ids=self._image.topic_ids,
        )

    def add_topic(self, name: str, partitions: int) -> None:
        tid = str(uuid.uuid4())
        for p in range(partitions):
            self.logs[(name, p)] = Log(self.root / f"{name}-{p}")
        regs = {
            p: PartitionRegistration((BROKER_ID,), (BROKER_ID,), BROKER_ID, 0, 0)
            for p in range(partitions)
        }
        img = self._image
        self._image = MetadataImage(
            offset=img.offset + 1,
            brokers=img.brokers,
            topics={**img.topics, tid: TopicImage(name, tid, regs)},
            topic_ids={**img.topic_ids, name: tid},
        )

    # data path
    async def produce(
        self,
        topic: str,
        partition: int,
        batches: list[CheckedBatch],
        acks: int,
        timeout_ms: int,
        transactional_id: str | None = None,
    ) -> ProduceResult:
        self.produce_calls += 1
        log = self.logs[(topic, partition)]
        info = log.append_checked_as_leader(batches, leader_epoch=0)
        self.change_feed.mark((topic, partition))
        self._wake()
        return ProduceResult(0, info.first_offset, info.log_append_time_ms, log.log_start_offset)

    def _wake(self) -> None:
        if self._appended is not None:
            self._appended.set()
            self._appended = None

    def fetch(
        self,
        p: FetchPartition,
        replica_id: int,
        isolation_level: int,
        found: FetchDataInfo | None = None,
        prev_fetch_ms: int = -1,
    ) -> FetchResult:
        self.fetch_calls += 1
        log = self.logs.get((p.topic, p.partition))
        if log is None:
            return FetchResult(3)
        hw = log.log_end_offset
        try:
            info = log.read(p.fetch_offset, p.max_bytes, max_offset=hw)
        except OffsetOutOfRangeError as e:
            return FetchResult(e.error_code, hw, hw, log.log_start_offset)
        return FetchResult(0, hw, hw, log.log_start_offset, info.records)

    async def wait_for_data(
        self,
        partitions: list[FetchPartition],
        min_bytes: int,
        max_wait_ms: int,
        replica_id: int = -1,
        isolation_level: int = 0,
    ) -> dict[FetchPartition, FetchDataInfo]:
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            available = sum(self.fetch(p, -1, 0).size for p in partitions)
            remaining = deadline - time.monotonic()
            if available >= min_bytes or remaining <= 0:
                return {}  # nothing kept: the fetch reads again
            if self._appended is None:
                self._appended = asyncio.Event()
            try:
                await asyncio.wait_for(self._appended.wait(), remaining)
            except TimeoutError:
                return {}

    def list_offset(
        self,
        topic: str,
        partition: int,
        timestamp: int,
        current_leader_epoch: int,
        isolation_level: int = 0,
    ) -> ListOffsetResult:
        log = self.logs.get((topic, partition))
        if log is None:
            return ListOffsetResult(3)
        if timestamp == -2:
            return ListOffsetResult(0, -1, log.log_start_offset, 0)
        if timestamp == -1:
            return ListOffsetResult(0, -1, log.log_end_offset, 0)
        found = log.offset_for_timestamp(timestamp)
        if found is None:
            return ListOffsetResult(0, -1, -1, -1)
        return ListOffsetResult(0, found.timestamp, found.offset, found.leader_epoch)

    def offset_for_leader_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int
    ) -> tuple[int, int, int]:
        log = self.logs.get((topic, partition))
        if log is None:
            return 3, -1, -1
        epoch, end = log.leader_epoch_cache.end_offset_for(leader_epoch, log.log_end_offset)
        return 0, epoch, end

    async def init_producer_id(self) -> tuple[int, int, int]:
        return 0, next(self._next_pid), 0

    # admin
    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        out = []
        for t in req.topics:
            if t.name in self._image.topic_ids:
                out.append(CreatableTopicResult(t.name, 36))
                continue
            n = t.num_partitions if t.num_partitions > 0 else 1
            if not req.validate_only:
                self.add_topic(t.name, n)
            tid = self._image.topic_ids.get(t.name)
            out.append(CreatableTopicResult(t.name, 0, tid, n, 1))
        return CreateTopicsResponse(out)

    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        return DeleteTopicsResponse(
            [TopicResult(n, 0 if n in self._image.topic_ids else 3) for n in req.names]
        )

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        return CreatePartitionsResponse([TopicResult(t.name, 37) for t in req.topics])

    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> tuple[int, str | None]:
        return 37, "no controller here"  # as the other admin writes of this fake

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


class _NoBrokers:
    """No other broker to send to."""

    async def send(self, target: int, api_key: int, version: int, **body: Any) -> Any:
        raise ConnectionError("a fake broker has no other brokers")


class BrokerThread:
    """The protocol layer on its own event loop in a thread (clients here block)."""

    def __init__(self, root: Path, **server_options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runtime = FakeRuntime(root)
        rt = self.runtime  # the replica manager and the admin facade, both faked
        self.apis = KafkaApis(BROKER_ID, CLUSTER_ID, rt, rt.groups, rt, txn=rt.txn)  # type: ignore[arg-type]
        self.server = KafkaServer(self.apis.handle, "127.0.0.1", 0, **server_options)
        self.host, self.port = self.call(self.server.start())
        self.runtime.set_endpoint(self.host, self.port)
        self.bootstrap = f"{self.host}:{self.port}"

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 30) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()
        self.runtime.close()


def wait_until(cond: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)
