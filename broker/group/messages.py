"""What goes in and out of the group coordinator core: requests as the API handlers
decode them, results as they encode them, and the core's intents (answer this
request, append these records to `__consumer_offsets`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common.errors import Errors

T = TypeVar("T")


def txn_write_error(code: int) -> int:
    """Kafka's maybeConvertOffsetCommitError for TxnOffsetCommit: the producer's own
    errors (fenced epoch, invalid state) reach it unchanged."""
    if code in (
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.REQUEST_TIMED_OUT,
        Errors.NOT_LEADER_OR_FOLLOWER,
        Errors.KAFKA_STORAGE_ERROR,
        Errors.NOT_COORDINATOR,
        Errors.MESSAGE_TOO_LARGE,
        Errors.RECORD_LIST_TOO_LARGE,
    ):
        return write_error(code, offsets=True)
    return code


def write_error(code: int, offsets: bool) -> int:
    """What a failed append to __consumer_offsets answers (Kafka's GroupMetadataManager:
    the client must find the coordinator again, or retry)."""
    if code in (
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.NOT_ENOUGH_REPLICAS,
        Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        Errors.REQUEST_TIMED_OUT,
    ):
        return Errors.COORDINATOR_NOT_AVAILABLE
    if code in (Errors.NOT_LEADER_OR_FOLLOWER, Errors.KAFKA_STORAGE_ERROR, Errors.NOT_COORDINATOR):
        return Errors.NOT_COORDINATOR
    if code in (Errors.MESSAGE_TOO_LARGE, Errors.RECORD_LIST_TOO_LARGE):
        return Errors.INVALID_COMMIT_OFFSET_SIZE if offsets else Errors.UNKNOWN_SERVER_ERROR
    return code if code in (Errors.COORDINATOR_NOT_AVAILABLE,) else Errors.UNKNOWN_SERVER_ERROR


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    require_known_member_id: bool  # JoinGroup v4+ (KIP-394)
    # JoinGroup v9+ (KIP-814): a leader can be told to skip the assignment.
    supports_skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class JoinResult:
    error_code: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()  # for the leader only
    skip_assignment: bool = False


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: list[tuple[str, bytes]]


@dataclass(frozen=True, slots=True)
class SyncResult:
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class LeaveResult:
    error_code: int
    members: tuple[tuple[str, str | None, int], ...] = ()  # (member id, instance id, error)


@dataclass(frozen=True, slots=True)
class OffsetCommit:
    topic: str
    partition: int
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(frozen=True, slots=True)
class CommitRequest:
    group_id: str
    generation_id: int  # -1: a commit from outside group management
    member_id: str
    group_instance_id: str | None
    offsets: list[OffsetCommit]


@dataclass(frozen=True, slots=True)
class TxnCommitRequest:
    """TxnOffsetCommit: v0-2 carry no member (generation -1, member "")."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    generation_id: int
    member_id: str
    group_instance_id: str | None
    offsets: list[OffsetCommit]


@dataclass(frozen=True, slots=True)
class LoadedRecord:
    """A record of __consumer_offsets as loading reads it: the offset of its batch
    and, for a transactional batch, its producer id (-1 otherwise)."""

    key: bytes | None
    value: bytes | None
    batch_offset: int
    producer_id: int = -1


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """A commit or abort control batch of a producer, as loading reads it."""

    producer_id: int
    committed: bool


@dataclass(frozen=True, slots=True)
class PartitionResults:
    """Per-partition error codes (OffsetCommit, OffsetDelete) plus a group-level one."""

    error_code: int
    partitions: dict[tuple[str, int], int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Reply(Generic[T]):
    token: T
    result: object


@dataclass(frozen=True, slots=True)
class Append:
    """Append these (key, value) records to a partition of __consumer_offsets with
    acks=all, then call the core's `on_append_done(write_id, error code, now_ms)`."""

    write_id: int
    partition: int
    records: tuple[tuple[bytes, bytes | None], ...]
    # A transactional batch (TxnOffsetCommit): the producer's id and epoch, and the
    # transactional id for KIP-890 verification; producer_id -1 for a plain batch.
    producer_id: int = -1
    producer_epoch: int = -1
    transactional_id: str | None = None


Out = Reply[T] | Append
