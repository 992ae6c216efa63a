"""What the API handler modules share: Kafka error codes, the response type, and small
conversions. Kept apart so `apis` (the dispatcher) and the handler modules import it
without importing each other."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.codec import CloseConnection as CloseConnection  # re-exported for handlers
from broker.codec import RequestHeader
from common.api_keys import ApiKey

if TYPE_CHECKING:
    from broker.admin import Admin
    from broker.group.manager import GroupCoordinator
    from broker.replica_manager import ReplicaManager
    from metadata_log.image import MetadataImage

# Kafka error codes (org.apache.kafka.common.protocol.Errors) used by the handlers.
UNKNOWN_SERVER_ERROR = -1
NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_REQUEST = 42
KAFKA_STORAGE_ERROR = 56
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
INVALID_RECORD = 87
UNKNOWN_TOPIC_ID = 100
MISMATCHED_ENDPOINT_TYPE = 114

# Topics only the broker itself writes (Kafka's Topic.isInternal).
INTERNAL_TOPICS = frozenset({"__consumer_offsets"})

# A framed response: bytes, a list of buffers and FileSlices, or None (no response).
Response = bytes | list[Any] | None


class BrokerApis(Protocol):
    """What a handler reaches: the broker's parts themselves, called directly (the
    replica manager for the data path, the group coordinator, the admin facade that
    forwards to the active controller), plus the metadata image and listener facts."""

    broker_id: int
    cluster_id: str
    replica_manager: ReplicaManager
    groups: GroupCoordinator
    admin: Admin

    def image(self) -> MetadataImage: ...

    def advertised_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) clients should use for `broker_id` on this listener."""
        ...

    def topic_name_by_id(self, topic_id: Any) -> str | None: ...


Handler = Callable[[BrokerApis, RequestHeader, Any], Awaitable[Response]]
ErrorAnswer = Callable[[RequestHeader, Any, int], Response]


@dataclass(frozen=True, slots=True)
class ApiHandler:
    """One API as a broker serves it: the versions it advertises and the handler, in
    one row, so the two cannot drift. Each handler module exports a tuple of these
    (`API_HANDLERS`); `broker.apis` builds ApiVersions and dispatch from them."""

    api_key: ApiKey
    min_version: int
    max_version: int
    handle: Handler
    error_answer: ErrorAnswer | None  # None: no error field to carry a handler failure


def to_ms(value: datetime.timedelta | int) -> int:
    """kio hands `*_ms` fields over as timedeltas."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def error_code_of(exc: BaseException, default: int = UNKNOWN_SERVER_ERROR) -> int:
    """The Kafka error an exception carries (storage errors do), else `default`."""
    code: Any = getattr(exc, "error_code", None)
    return code if isinstance(code, int) else default
