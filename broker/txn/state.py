"""A transactional id's state on its coordinator (Kafka's TransactionState and
TransactionMetadata), with the transitions Kafka allows.

The state byte ids are Kafka's (they are written to `__transaction_state`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class TransactionState(enum.IntEnum):
    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name DescribeTransactions and ListTransactions use ("PrepareCommit")."""
        return "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def from_kafka_name(cls, name: str) -> TransactionState | None:
        for s in cls:
            if s.kafka_name == name:
                return s
        return None


S = TransactionState

# Kafka's TransactionState.validPreviousStates: where each state may be entered from.
VALID_PREVIOUS: dict[TransactionState, frozenset[TransactionState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}

COMPLETED = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
NO_PRODUCER_EPOCH = -1
MAX_EPOCH = 32_767  # Short.MaxValue


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's TransactionMetadata.isEpochExhausted: one epoch is kept back so a
    timed-out transaction can still be fenced by a bump."""
    return epoch >= MAX_EPOCH - 1


@dataclass(frozen=True, slots=True)
class TxnTransit:
    """The metadata a transition leads to (Kafka's TxnTransitMetadata): written to the
    log first, applied in memory once the append succeeded."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[tuple[str, int]]
    start_ms: int
    update_ms: int


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    last_producer_id: int  # the producer id before a rotation (KIP-360 retries)
    producer_epoch: int
    last_producer_epoch: int  # the epoch before the last bump (KIP-360 retries)
    timeout_ms: int
    state: TransactionState
    partitions: set[tuple[str, int]] = field(default_factory=set)
    start_ms: int = -1
    update_ms: int = -1
    pending: TransactionState | None = None  # a transition being written

    def transit(self, **changes: object) -> TxnTransit:
        base = {
            "producer_id": self.producer_id,
            "last_producer_id": self.last_producer_id,
            "producer_epoch": self.producer_epoch,
            "last_producer_epoch": self.last_producer_epoch,
            "timeout_ms": self.timeout_ms,
            "state": self.state,
            "partitions": frozenset(self.partitions),
            "start_ms": self.start_ms,
            "update_ms": self.update_ms,
        }
        base.update(changes)
        t = TxnTransit(**base)  # type: ignore[arg-type]
        if self.state not in VALID_PREVIOUS[t.state]:
            raise ValueError(
                f"{self.transactional_id}: illegal transition {self.state.kafka_name} -> "
                f"{t.state.kafka_name}"
            )
        return t

    def apply(self, t: TxnTransit) -> None:
        self.producer_id, self.last_producer_id = t.producer_id, t.last_producer_id
        self.producer_epoch, self.last_producer_epoch = t.producer_epoch, t.last_producer_epoch
        self.timeout_ms, self.state = t.timeout_ms, t.state
        self.partitions = set(t.partitions)
        self.start_ms, self.update_ms = t.start_ms, t.update_ms
        self.pending = None
