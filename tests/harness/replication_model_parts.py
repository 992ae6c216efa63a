"""The pieces of the replication model (tests/harness/replication_model.py) that are not
rules: the messages on its network, the acks=all token, a broker's state as the model
sees it. Nothing here imports the model: an ack reports to any `AckListener`."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from hypothesis import event as hypothesis_event
from hypothesis.errors import InvalidArgument

from broker.fetcher import FollowerData, FollowerFetchState
from broker.hosted import HostedPartition, log_headers
from broker.partition import AlterIsr
from metadata_log.controller_api import AlterPartitionRequest, AlterPartitionResponse
from storage.config import LogConfig
from storage.log import Log

TOPIC = "model"
TOPIC_ID = "00000000-0000-0000-0000-000000000001"
BROKERS = (1, 2, 3)
MIN_ISR = 2
SESSION_MS = 9_000
LAG_MS = 10_000
LOG_CONFIG = LogConfig(segment_bytes=300)  # a few batches per segment: truncations cross them
Entry = tuple[int, int, int]  # (base offset, leader epoch, value id) of a one-record batch


@dataclass(frozen=True)
class FetchReq:
    src: int
    dst: int
    sent: FollowerFetchState
    src_incarnation: int
    broker_epoch: int  # what the fetch names (KIP-903)


@dataclass(frozen=True)
class FetchResp:
    dst: int
    sent: FollowerFetchState
    data: FollowerData
    dst_incarnation: int


@dataclass(frozen=True)
class AlterReq:
    src: int
    alter: AlterIsr
    req: AlterPartitionRequest
    src_incarnation: int


@dataclass(frozen=True)
class AlterResp:
    dst: int
    alter: AlterIsr
    resp: AlterPartitionResponse
    dst_incarnation: int


Message = FetchReq | FetchResp | AlterReq | AlterResp


class AckListener(Protocol):
    """Who is told when an acks=all produce completes (the model)."""

    def on_ack(self, ack: Ack, code: int) -> None: ...


class Ack:
    """A pending acks=all produce: the core completes it like the broker's future."""

    def __init__(self, machine: AckListener, value_id: int, offset: int) -> None:
        self.machine, self.value_id, self.offset = machine, value_id, offset
        self._done = False

    def done(self) -> bool:
        return self._done

    def set_result(self, code: int) -> None:
        self._done = True
        self.machine.on_ack(self, code)


@dataclass
class Broker:
    id: int
    dir: Path
    h: HostedPartition | None = None
    up: bool = True
    paused: bool = False
    # False after a machine crash, until a new incarnation registered and the broker is
    # out of the ISR: before that, a fetch the crashed incarnation sent can still bring it
    # back in (KIP-903 only refuses one once the new incarnation is registered).
    intact: bool = True
    incarnation: int = 1
    registered: bool = False
    broker_epoch: int = -1
    metadata_offset: int = -1
    checkpoint_hw: int = 0
    committed: list[Entry] = field(default_factory=list)  # longest prefix seen below HW
    last_entries: list[Entry] = field(default_factory=list)
    leader_hw: tuple[int, int, int] | None = None  # (incarnation, epoch, HW) while leading

    @property
    def active(self) -> bool:
        return self.up and not self.paused and self.h is not None and self.registered


def event(what: str) -> None:
    """A statistic for --hypothesis-show-statistics (ignored outside Hypothesis)."""
    with contextlib.suppress(InvalidArgument):
        hypothesis_event(what)


def entries(lg: Log) -> list[Entry]:
    return [(v.base_offset, v.partition_leader_epoch, v.max_timestamp) for v in log_headers(lg)]
