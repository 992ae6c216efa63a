"""What the API handler modules share: the handler contract (`BrokerApis`, `ApiHandler`),
the response type, and small helpers. Kept apart so `apis` (the dispatcher) and the
handler modules import it without importing each other (error codes and API keys are
`common.errors.Errors` and `common.api_keys.ApiKey`)."""

from __future__ import annotations

import datetime
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.codec import CloseConnection as CloseConnection  # re-exported for handlers
from broker.codec import RequestHeader, encode_response
from common.acl import SUPPORTED_OPERATIONS, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors

if TYPE_CHECKING:
    from broker.admin import Admin
    from broker.fenced_brokers import RecentlyFencedBrokers
    from broker.group.manager import GroupCoordinator
    from broker.replica_manager import ReplicaManager
    from broker.security.authorizer import StandardAuthorizer
    from broker.txn.manager import TransactionCoordinator
    from metadata_log.image import MetadataImage

NO_AUTHORIZED_OPERATIONS = -(2**31)  # Kafka's "not requested" value

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
    txn: TransactionCoordinator
    admin: Admin
    # None: authorization is off (`authorizer.class.name` unset) and everything is
    # allowed. Handlers test it once per request before any per-resource check, so an
    # unsecured broker pays one attribute read.
    authorizer: StandardAuthorizer | None
    # Which fenced brokers Metadata answers still name (broker/fenced_brokers.py).
    fenced_brokers: RecentlyFencedBrokers

    def image(self) -> MetadataImage: ...

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May the current session's principal, from its host, do `operation` on the
        LITERAL resource `name`? (Kafka's AuthHelper.authorize.)"""
        ...

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May it do `operation` on at least one resource of the type? (Kafka's
        authorizeByResourceType, e.g. KIP-679's "may write some topic".)"""
        ...

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


def authorized_operations(apis: BrokerApis, resource_type: ResourceType, name: str) -> int:
    """Kafka's AuthHelper.authorizedOperations: a bit (1 << operation code) for each
    supported operation the session may do on the resource; all of them when
    authorization is off."""
    ops = SUPPORTED_OPERATIONS[resource_type]
    if apis.authorizer is not None:
        ops = tuple(op for op in ops if apis.authorize(op, resource_type, name))
    bits = 0
    for op in ops:
        bits |= 1 << op
    return bits


def authorized_names(
    apis: BrokerApis, operation: AclOperation, resource_type: ResourceType, names: Iterable[str]
) -> set[str]:
    """The distinct names the session may do `operation` on (Kafka's
    filterByAuthorized): one decision per name, however often a request repeats it."""
    unique = set(names)
    if apis.authorizer is None:
        return unique
    return {n for n in unique if apis.authorize(operation, resource_type, n)}


def to_ms(value: datetime.timedelta | int) -> int:
    """kio hands `*_ms` fields over as timedeltas."""
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    return int(value)


def error_code_of(exc: BaseException, default: int = Errors.UNKNOWN_SERVER_ERROR) -> int:
    """The Kafka error an exception carries (storage errors do), else `default`."""
    code: Any = getattr(exc, "error_code", None)
    return code if isinstance(code, int) else default


def by_topic(
    rows: Iterable[tuple[str, dict[str, Any]]], topic_key: str, partitions_key: str
) -> list[dict[str, Any]]:
    """Per-partition answers (topic, partition entry) nested under their topics in
    first-seen order: the shape of every per-partition response, whose field names
    differ by API (e.g. "topic"/"partition_result" for ElectLeaders)."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, entry in rows:
        topics.setdefault(topic, []).append(entry)
    return [{topic_key: t, partitions_key: ps} for t, ps in topics.items()]


def answer(api_key: ApiKey, header: RequestHeader, body: dict[str, Any]) -> Response:
    """Encode `body` (plain data) as the response to `header`'s request version."""
    return encode_response(api_key, header.api_version, header.correlation_id, body)
