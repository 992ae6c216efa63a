"""The Kafka protocol layer (network, codec, apis) driven by real clients.

A FAKE BrokerRuntime stands in for replication and the controller (this is a unit test
of the protocol layer), but it keeps a real `storage.log.Log` per partition under
tmp_path, so produced bytes go through real storage and fetches are real file slices.
The server runs on its own event loop in a thread; confluent-kafka, kafka-python and
aiokafka talk to it over 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import struct
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.apis import KafkaApis
from broker.group.config import GroupConfig
from broker.group.manager import GroupCoordinator
from broker.network import KafkaServer
from broker.runtime import FetchPartition, FetchResult, ListOffsetResult, ProduceResult
from metadata_log.controller_api import (
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    TopicResult,
)
from metadata_log.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    TopicImage,
)
from metadata_log.records import Endpoint
from storage.log import Log
from storage.log_types import OffsetOutOfRangeError

T = TypeVar("T")
BROKER_ID = 1
CLUSTER_ID = "wire-test-cluster"


# -- the fake runtime ------------------------------------------------------------------------


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

    async def _no_offsets_topic(self) -> None:
        return None

    # metadata
    def image(self) -> MetadataImage:
        return self._image

    def advertised_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        return (self.host, self.port) if broker_id == BROKER_ID else None

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
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> ProduceResult:
        self.produce_calls += 1
        log = self.logs[(topic, partition)]
        info = log.append_as_leader(records, leader_epoch=0)
        self._wake()
        return ProduceResult(0, info.first_offset, info.log_append_time_ms, log.log_start_offset)

    def _wake(self) -> None:
        if self._appended is not None:
            self._appended.set()
            self._appended = None

    def fetch(self, p: FetchPartition, replica_id: int, isolation_level: int) -> FetchResult:
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
    ) -> None:
        deadline = time.monotonic() + max_wait_ms / 1000
        while True:
            available = sum(self.fetch(p, -1, 0).size for p in partitions)
            remaining = deadline - time.monotonic()
            if available >= min_bytes or remaining <= 0:
                return
            if self._appended is None:
                self._appended = asyncio.Event()
            try:
                await asyncio.wait_for(self._appended.wait(), remaining)
            except TimeoutError:
                return

    def list_offset(
        self, topic: str, partition: int, timestamp: int, current_leader_epoch: int
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

    def broker_configs(self) -> dict[str, tuple[str, bool]]:
        return {"num.partitions": ("1", True), "log.dirs": (str(self.root), False)}

    def topic_configs(self, topic: str) -> dict[str, tuple[str, bool]] | None:
        if topic not in self._image.topic_ids:
            return None
        return {"retention.ms": ("604800000", True), "cleanup.policy": ("delete", True)}

    def close(self) -> None:
        for log in self.logs.values():
            log.close()


class BrokerThread:
    """The protocol layer on its own event loop in a thread (clients here block)."""

    def __init__(self, root: Path, **server_options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runtime = FakeRuntime(root)
        self.apis = KafkaApis(self.runtime)
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


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path)
    b.runtime.add_topic("wire", 3)
    yield b
    b.stop()


def wait_until(cond: Callable[[], bool], timeout: float = 20, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


N = 1000


def messages(tag: str) -> list[tuple[bytes, bytes, list[tuple[str, bytes]]]]:
    return [
        (
            f"key-{i % 7}".encode(),
            f"{tag}-value-{i}".encode() * (1 + i % 5),
            [("h1", f"{i}".encode()), ("tag", tag.encode())],
        )
        for i in range(N)
    ]


def by_partition(
    msgs: list[tuple[bytes, bytes, list[tuple[str, bytes]]]], partition_of: list[int]
) -> dict[int, list[tuple[bytes, bytes, list[tuple[str, bytes]]]]]:
    out: dict[int, list[Any]] = {}
    for m, p in zip(msgs, partition_of, strict=True):
        out.setdefault(p, []).append(m)
    return out


# -- raw protocol helpers (also used by test_broker_bad_input) ------------------------------


def encode_request(
    api_key: int, version: int, body: Any, correlation_id: int = 1, client_id: str = "raw"
) -> bytes:
    """A framed request, encoded with kio (header v1 or v2 as the version says)."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame (without its size prefix)."""
    cls = load_response_schema(api_key, version)
    header, n = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, n)
    return header.correlation_id, body


class RawClient:
    """A plain blocking socket speaking frames, with a deadline on every read."""

    def __init__(self, host: str, port: int, timeout: float = 10) -> None:
        import socket

        self.sock = socket.create_connection((host, port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        return self.recv_exactly(size)

    def call(self, api_key: int, version: int, body: Any, correlation_id: int = 1) -> Any:
        self.send(encode_request(api_key, version, body, correlation_id))
        cid, resp = decode_response(api_key, version, self.recv_frame())
        assert cid == correlation_id
        return resp

    def is_closed_by_peer(self) -> bool:
        """True once the server has closed (EOF or reset), waiting up to the timeout."""
        try:
            while self.sock.recv(65536):
                pass
            return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


# -- confluent-kafka -------------------------------------------------------------------------


def test_confluent_kafka_produce_and_consume(broker: BrokerThread) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    msgs = messages("ck")
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": True,
        }
    )
    delivered: dict[int, int] = {}  # message index -> partition
    errors: list[Any] = []

    def on_delivery(i: int) -> Callable[[Any, Any], None]:
        def done(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(err)
            else:
                delivered[i] = msg.partition()

        return done

    for i, (key, value, headers) in enumerate(msgs):
        producer.produce("wire", value, key, headers=headers, on_delivery=on_delivery(i))
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors
    assert len(delivered) == N
    expected = by_partition(msgs, [delivered[i] for i in range(N)])

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition("wire", p, 0) for p in range(3)])
        got: dict[int, list[Any]] = {}
        eof: set[int] = set()
        deadline = time.monotonic() + 30
        while len(eof) < len(expected) or sum(map(len, got.values())) < N:
            assert time.monotonic() < deadline, "consumer timed out"
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                eof.add(m.partition())
                continue
            got.setdefault(m.partition(), []).append(
                (m.key(), m.value(), [(k, v) for k, v in m.headers() or []])
            )
        assert got == expected
    finally:
        consumer.close()


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_produce_and_consume(broker: BrokerThread) -> None:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    msgs = messages("kp")
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    futures = [producer.send("wire", value=v, key=k, headers=h) for k, v, h in msgs]
    producer.flush(30)
    metas = [f.get(timeout=30) for f in futures]
    producer.close(10)
    assert all(m.offset >= 0 for m in metas)
    expected = by_partition(msgs, [m.partition for m in metas])

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        consumer_timeout_ms=20000,
    )
    try:
        consumer.assign([TopicPartition("wire", p) for p in range(3)])
        consumer.seek_to_beginning()
        got: dict[int, list[Any]] = {}
        for m in consumer:
            got.setdefault(m.partition, []).append((m.key, m.value, list(m.headers)))
            if sum(map(len, got.values())) == N:
                break
        assert got == expected
    finally:
        consumer.close()


# -- aiokafka --------------------------------------------------------------------------------


def test_aiokafka_produce_and_consume(broker: BrokerThread) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    msgs = messages("aio")

    async def run() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, acks="all", enable_idempotence=True, linger_ms=5
        )
        await producer.start()
        try:
            futures = [await producer.send("wire", value=v, key=k, headers=h) for k, v, h in msgs]
            metas = await asyncio.gather(*futures)
        finally:
            await producer.stop()
        expected = by_partition(msgs, [m.partition for m in metas])
        consumer = AIOKafkaConsumer(
            bootstrap_servers=broker.bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition("wire", p) for p in range(3)])
            await consumer.seek_to_beginning()
            got: dict[int, list[Any]] = {}
            async with asyncio.timeout(30):
                while sum(map(len, got.values())) < N:
                    batch = await consumer.getmany(timeout_ms=500)
                    for tp, records in batch.items():
                        for m in records:
                            got.setdefault(tp.partition, []).append(
                                (m.key, m.value, [(k, bytes(v)) for k, v in m.headers])
                            )
            assert got == expected
        finally:
            await consumer.stop()

    asyncio.run(run())
