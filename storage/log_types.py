"""What a `Log` hands back (append info, fetch data, timestamp lookups) and the errors it
raises beyond bad batches; each error carries the Kafka error code a broker answers with."""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import Errors
from storage.record_batch import RecordBatchError
from storage.segment import FileSlice


class OffsetOutOfRangeError(Exception):
    error_code = Errors.OFFSET_OUT_OF_RANGE


class RecordTooLargeError(RecordBatchError):
    error_code = Errors.MESSAGE_TOO_LARGE


class RecordListTooLargeError(RecordBatchError):
    error_code = Errors.RECORD_LIST_TOO_LARGE


class UnexpectedAppendOffsetError(RecordBatchError):
    """A follower append that does not continue the log (its offsets are not ours)."""


def parse_topic_partition(name: str) -> tuple[str, int]:
    topic, sep, partition = name.rpartition("-")
    if not sep or not topic or not partition.isdigit():
        raise ValueError(f"{name!r} is not a <topic>-<partition> directory name")
    return topic, int(partition)


@dataclass(frozen=True, slots=True)
class LogAppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless message.timestamp.type=LogAppendTime
    append_time_ms: int  # when the append happened (wall clock)
    log_start_offset: int
    num_batches: int
    valid_bytes: int


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    """Bytes for a fetch: a file slice from the batch holding the start offset."""

    records: FileSlice | None
    first_batch_offset: int = -1

    @property
    def size(self) -> int:
        return self.records.size if self.records else 0

    def read(self) -> bytes:
        return self.records.read() if self.records else b""


@dataclass(frozen=True, slots=True)
class TimestampAndOffset:
    timestamp: int
    offset: int
    leader_epoch: int
