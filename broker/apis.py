"""Dispatch: one handler per Kafka API key, from the handler modules' `API_HANDLERS`.

`KafkaApis.handle(frame)` turns one request frame (the bytes after the size prefix) into
the framed response: `bytes`, a list of buffers (Fetch: record FileSlices are sent as
they are), or None when no response is due (Produce with acks=0). It raises
`CloseConnection` when Kafka's rules say the connection must go:
- an unknown api key, or a version outside the advertised range (ApiVersions excepted:
  it is answered at v0 with UNSUPPORTED_VERSION and our ranges, so a client can pick);
- a request that does not decode;
- a non-Produce request larger than `MAX_NON_PRODUCE_FRAME` (see below);
- a handler failure for an API without an error field to put it in;
- acks=0 Produce with an error (no response exists to carry it; Kafka closes so the
  client refreshes its metadata).

`KafkaApis` is the `BrokerApis` the handlers see: the replica manager, the group
coordinator and the admin facade, which they call directly. The handlers live by area:
the data path in `apis_data`, metadata in `apis_metadata`, admin in `apis_admin`, configs
in `apis_configs`, groups in `apis_group` and `apis_group_admin`, ACLs and SCRAM
credentials in `apis_acls`, the SASL APIs' post-login answers in `apis_sasl`; each
exports its rows (`API_HANDLERS`: versions and handler together), and the versions
advertised in ApiVersions are built from those rows only.

Versions: floors follow Kafka 4.x (which dropped the pre-2.1 versions, KIP-896) and what
kio has; ceilings are where our handlers stop and where today's clients (confluent-kafka
2.x, kafka-python 3.x, aiokafka 0.14, kcat) are served. Fetch stops at 15 (v15: replica
id and broker epoch in a tagged ReplicaState, KIP-903; v16 adds node endpoints to
NOT_LEADER answers, KIP-951).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker import (
    apis_acls,
    apis_admin,
    apis_configs,
    apis_data,
    apis_describe,
    apis_elect,
    apis_group,
    apis_group_admin,
    apis_metadata,
    apis_reassign,
    apis_records,
    apis_sasl,
    apis_txn,
    apis_txn_markers,
)
from broker.apis_common import ApiHandler, BrokerApis, CloseConnection, Response
from broker.codec import (
    RequestHeader,
    decode_body,
    encode_response,
    parse_header,
    peek_ids,
    request_class,
)
from broker.codec_schema import topic_uuid
from broker.fenced_brokers import RecentlyFencedBrokers
from broker.security.session import current_session
from common.acl import AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors

if TYPE_CHECKING:
    from broker.admin import Admin
    from broker.group.manager import GroupCoordinator
    from broker.replica_manager import ReplicaManager
    from broker.security.authorizer import StandardAuthorizer
    from broker.txn.manager import TransactionCoordinator
    from metadata_log.image import MetadataImage

log = logging.getLogger(__name__)

# Only Produce carries bulk data. Everything else decodes into about 30 Python objects
# per input byte in the worst case (arrays of empty strings), so a 100 MiB Metadata
# request could cost gigabytes; real ones (10k topics, a fetch of 10k partitions) stay
# well under 1 MiB.
MAX_NON_PRODUCE_FRAME = 4 << 20


class KafkaApis:
    """The broker's Kafka APIs over its parts (implements `apis_common.BrokerApis`)."""

    def __init__(
        self,
        broker_id: int,
        cluster_id: str,
        replica_manager: ReplicaManager,
        groups: GroupCoordinator,
        admin: Admin,
        advertised: Mapping[str, tuple[str, int]] | None = None,
        *,
        authorizer: StandardAuthorizer | None = None,
        txn: TransactionCoordinator | None = None,
        fenced_brokers: RecentlyFencedBrokers | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.cluster_id = cluster_id
        self.replica_manager = replica_manager
        self.groups = groups
        # The transaction coordinator (None only in tests that build the APIs bare).
        self.txn: TransactionCoordinator = txn  # type: ignore[assignment]
        self.admin = admin
        self.authorizer = authorizer  # None: authorization off, everything allowed
        # A metadata publisher in a running broker; bare, it names fenced brokers only
        # when none is unfenced.
        self.fenced_brokers = fenced_brokers or RecentlyFencedBrokers()
        # Our own (host, port) by listener name, as configured (the image may lag).
        self._advertised = dict(advertised or {})
        self._uuid_cache: tuple[object, dict[Any, str]] | None = None

    async def handle(self, frame: bytes) -> Response:
        api_key, version, cid = peek_ids(frame)
        api = HANDLERS.get(api_key)
        if api is None or not api.min_version <= version <= api.max_version:
            if api_key == ApiKey.API_VERSIONS:
                return api_versions_response(0, cid, Errors.UNSUPPORTED_VERSION)
            raise CloseConnection(f"unsupported api key {api_key} version {version}")
        if len(frame) > MAX_NON_PRODUCE_FRAME and api_key != ApiKey.PRODUCE:
            raise CloseConnection(f"{len(frame)}-byte request for api key {api_key} is too big")
        header = parse_header(frame, request_class(api_key, version).__flexible__)
        body = decode_body(api_key, version, frame, header.body_offset)
        try:
            return await api.handle(self, header, body)
        except CloseConnection:
            raise
        except Exception as e:
            log.exception(
                "api key %d v%d from client %r failed", api_key, version, header.client_id
            )
            if api.error_answer is None:
                raise CloseConnection(f"api key {api_key} failed: {e!r}") from e
            # Produce answers with INVALID_RECORD, never UNKNOWN_SERVER_ERROR: clients
            # retry that one, and the append may have happened (duplicates).
            if api_key == ApiKey.PRODUCE:
                return api.error_answer(header, body, Errors.INVALID_RECORD)
            return api.error_answer(header, body, Errors.UNKNOWN_SERVER_ERROR)

    # -- BrokerApis: metadata and listener facts -----------------------------------------------

    def image(self) -> MetadataImage:
        """The latest metadata image this broker has applied."""
        return self.replica_manager.image()

    def advertised_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        """(host, port) clients should use for `broker_id` on the listener the request
        came in on (as Kafka answers Metadata: each listener names its own endpoints)."""
        listener = current_session().listener
        if broker_id == self.broker_id and listener in self._advertised:
            return self._advertised[listener]
        b = self.image().brokers.get(broker_id)
        if b is None:
            return None
        ep = b.endpoint(listener)
        return None if ep is None else (ep.host, ep.port)

    # -- BrokerApis: authorization -------------------------------------------------------------

    def authorize(self, operation: AclOperation, resource_type: ResourceType, name: str) -> bool:
        """May the current session do `operation` on the resource? True when off."""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        s = current_session()
        return authorizer.authorize(s.principal, s.client_host, operation, resource_type, name)

    def authorize_any(self, operation: AclOperation, resource_type: ResourceType) -> bool:
        """May the current session do `operation` on some resource of the type?"""
        authorizer = self.authorizer
        if authorizer is None:
            return True
        s = current_session()
        return authorizer.authorize_any(s.principal, s.client_host, operation, resource_type)

    def topic_name_by_id(self, topic_id: Any) -> str | None:
        """Topic name for a UUID (Fetch v13, DeleteTopics v6), cached per image."""
        image = self.image()
        cached = self._uuid_cache
        if cached is None or cached[0] is not image:
            names = {topic_uuid(tid): t.name for tid, t in image.topics.items()}
            cached = self._uuid_cache = (image, names)
        return cached[1].get(topic_id)


def api_versions_response(
    version: int, correlation_id: int, error_code: int = Errors.NONE
) -> bytes:
    return encode_response(
        ApiKey.API_VERSIONS,
        version,
        correlation_id,
        {
            "error_code": error_code,
            "api_keys": [
                {"api_key": k, "min_version": lo, "max_version": hi}
                for k, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
            ],
            "throttle_time": 0,
        },
    )


async def handle_api_versions(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    return api_versions_response(header.api_version, header.correlation_id)


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.API_VERSIONS, 0, 4, handle_api_versions, None),
)


def _by_key(*tables: tuple[ApiHandler, ...]) -> dict[int, ApiHandler]:
    out: dict[int, ApiHandler] = {}
    for row in (row for table in tables for row in table):
        if row.api_key in out:
            raise ValueError(f"two handlers for {row.api_key.name}")
        out[int(row.api_key)] = row
    return out


HANDLERS = _by_key(
    apis_acls.API_HANDLERS,
    apis_data.API_HANDLERS,
    apis_metadata.API_HANDLERS,
    apis_admin.API_HANDLERS,
    apis_configs.API_HANDLERS,
    apis_group.API_HANDLERS,
    apis_group_admin.API_HANDLERS,
    apis_sasl.API_HANDLERS,
    apis_elect.API_HANDLERS,
    apis_describe.API_HANDLERS,
    apis_records.API_HANDLERS,
    apis_reassign.API_HANDLERS,
    apis_txn_markers.API_HANDLERS,
    apis_txn.API_HANDLERS,
    API_HANDLERS,
)
# What ApiVersions advertises: exactly the rows above.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (row.min_version, row.max_version) for key, row in sorted(HANDLERS.items())
}
