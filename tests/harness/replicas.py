"""Replica managers without a controller: broker configs, metadata updates built from real
records with `MetadataDelta` (an in-memory metadata log), data batches, and `run` /
`eventually` for async tests that wait with a deadline, never a sleep.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from broker.config import BrokerConfig, from_properties
from broker.metadata_publisher import LoaderManifest
from broker.results import FetchPartition
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.records import (
    Endpoint,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
)
from metadata_log.snapshot import snapshot_records
from storage.record_batch import CheckedBatch, RecordBatchView, validate_records
from storage.records import Record as DataRecord
from storage.records import build_batch, decode_batch

T = TypeVar("T")
TOPIC = "orders"
TID = "0b8c1a52-3d5b-4d7e-9a55-0a4b2f3c1d10"


def run(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def eventually(probe: Callable[[], T | None], timeout_s: float, what: str) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)


def batch(*values: bytes, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    return build_batch(
        [DataRecord(v) for v in values], producer_id=pid, producer_epoch=epoch, base_sequence=seq
    )


def checked(records: bytes) -> list[CheckedBatch]:
    """What a produce hands the replica manager: the batches checked at the edge."""
    return validate_records(records)


def values_in(data: bytes) -> list[bytes | None]:
    out: list[bytes | None] = []
    pos = 0
    while pos + 61 <= len(data):
        view = RecordBatchView(data, pos)
        if pos + view.size > len(data):
            break
        out += [r.value for r in decode_batch(view).records]
        pos += view.size
    return out


def broker_config(tmp_path: Path, node_id: int = 1, **props: str) -> BrokerConfig:
    return from_properties(
        {
            "process.roles": "broker",
            "node.id": str(node_id),
            "controller.quorum.http.endpoints": "1@127.0.0.1:1",
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "log.dirs": str(tmp_path / f"logs-{node_id}"),
            "replica.fetch.wait.max.ms": "200",
            "replica.fetch.backoff.ms": "50",
            **props,
        }
    )


def register(broker_id: int, port: int) -> RegisterBrokerRecord:
    ep = Endpoint("PLAINTEXT", "127.0.0.1", port)
    return RegisterBrokerRecord(broker_id, f"inc-{broker_id}", broker_id, (ep,), None, False)


Update = tuple[MetadataDelta, MetadataImage, LoaderManifest]  # (delta, image, manifest)


class Metadata:
    """A metadata log in memory: records in, what the loader hands its publishers out."""

    def __init__(self, brokers: tuple[int, ...] = (1, 2, 3)) -> None:
        self.image = MetadataImage()
        self.offset = -1
        self.pending: list[Record] = [register(b, 1) for b in brokers]

    def update(self, *records: Record) -> Update:
        delta = MetadataDelta(self.image)
        for r in [*self.pending, *records]:
            self.offset += 1
            delta.replay(r, self.offset)
        self.pending = []
        old, self.image = self.image, delta.apply()
        return delta, self.image, LoaderManifest(old, snapshot=False)

    def snapshot(self) -> Update:
        """The whole image as a broker that loads a snapshot sees it."""
        delta = MetadataDelta(MetadataImage())
        for i, r in enumerate(snapshot_records(self.image)):
            delta.replay(r, i)
        return delta, self.image, LoaderManifest(MetadataImage(), snapshot=True)


def topic(
    replicas: tuple[int, ...] = (1,),
    isr: tuple[int, ...] | None = None,
    leader: int = 1,
    epoch: int = 0,
    partitions: int = 1,
    name: str = TOPIC,
    topic_id: str = TID,
) -> list[Record]:
    out: list[Record] = [TopicRecord(name, topic_id)]
    for p in range(partitions):
        out.append(PartitionRecord(topic_id, p, replicas, isr or replicas, leader, epoch, 0))
    return out


def fp(
    offset: int, max_bytes: int = 1 << 20, epoch: int = -1, last_epoch: int = -1
) -> FetchPartition:
    return FetchPartition(TOPIC, 0, offset, max_bytes, epoch, last_epoch)  # fmt: skip
