"""What goes in and out of the transaction coordinator core: its results and its
intents (answer this request, append to `__transaction_state`, send these markers)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from broker.group.messages import Append, Reply
from broker.txn.config import TxnConfig

T = TypeVar("T")

__all__ = ["Append", "Reply", "SendMarkers", "InitResult", "TxnDescription", "Out", "TxnConfig"]


@dataclass(frozen=True, slots=True)
class SendMarkers:
    """Write these markers (WriteTxnMarkers to each partition's leader), then call the
    core's `on_markers_done(transactional_id, producer_id, producer_epoch,
    coordinator_epoch, written, now_ms)`; written=False: the send was abandoned (this
    coordinator was fenced)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class InitResult:
    error_code: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True, slots=True)
class TxnDescription:
    transactional_id: str
    error_code: int
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = -1
    producer_epoch: int = -1
    partitions: tuple[tuple[str, int], ...] = ()


Out = Reply[T] | Append | SendMarkers
