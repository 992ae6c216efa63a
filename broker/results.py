"""What the data path answers, per partition: the results of a produce, a fetch and a
ListOffsets, and a fetch's request for one partition.

Kept in a module of their own, below everything that makes or reads them (the replica
manager and its hosted partitions, the group coordinator, the handlers, the codec), so
none of those imports another just for a result type."""

from __future__ import annotations

from dataclasses import dataclass

from storage.segment import FileSlice
from storage.txn_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class ProduceResult:
    error_code: int  # Kafka error code; 0 = NONE
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None
    record_errors: tuple[RecordError, ...] = ()


@dataclass(frozen=True, slots=True)
class FetchResult:
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: FileSlice | bytes | None = None  # whole batches (a partial tail is allowed)
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset) for followers
    preferred_read_replica: int = -1
    # read_committed: the aborted transactions of what was read (None: not asked)
    aborted: tuple[AbortedTxn, ...] | None = None

    @property
    def size(self) -> int:
        if self.records is None:
            return 0
        return self.records.size if isinstance(self.records, FileSlice) else len(self.records)


@dataclass(frozen=True, slots=True)
class FetchPartition:
    topic: str
    partition: int
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1  # -1: not checked
    last_fetched_epoch: int = -1  # followers (Fetch v12+): for divergence checks
    replica_epoch: int = -1  # followers (Fetch v15+): their broker epoch, KIP-903
    log_start_offset: int = -1  # followers: their log start offset (DeleteRecords' low watermark)


@dataclass(frozen=True, slots=True)
class RecordError:
    """Produce v8+: one record a batch was refused for (Kafka's ProduceResponse.RecordError)."""

    batch_index: int
    message: str | None = None


@dataclass(frozen=True, slots=True)
class ListOffsetResult:
    error_code: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1
