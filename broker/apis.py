"""One handler per Kafka API key; handlers see the broker only through `BrokerRuntime`.

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

The data-path handlers live in `apis_data.py`, the admin ones in `apis_admin.py`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker import apis_admin, apis_data, apis_group, apis_group_admin
from broker.apis_common import (
    INVALID_RECORD,
    UNKNOWN_SERVER_ERROR,
    UNSUPPORTED_VERSION,
    CloseConnection,
    Response,
)
from broker.codec import (
    API_VERSIONS_KEY,
    RequestHeader,
    decode_body,
    encode_response,
    parse_header,
    peek_ids,
    request_class,
)
from broker.codec_schema import topic_uuid
from broker.runtime import BrokerRuntime

log = logging.getLogger(__name__)

# The versions we implement, advertised exactly. Floors follow Kafka 4.x (which dropped
# the pre-2.1 versions, KIP-896) and what kio has; ceilings are where our handlers stop
# and where today's clients (confluent-kafka 2.x, kafka-python 3.x, aiokafka 0.14, kcat)
# are served. Fetch stops at 15 (v15: replica id and broker epoch in a tagged
# ReplicaState, KIP-903; v16 adds node endpoints to NOT_LEADER answers, KIP-951).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    0: (3, 9),  # Produce
    1: (4, 15),  # Fetch
    2: (1, 7),  # ListOffsets
    3: (0, 12),  # Metadata
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics
    20: (1, 6),  # DeleteTopics
    22: (0, 4),  # InitProducerId
    23: (2, 4),  # OffsetForLeaderEpoch
    32: (1, 4),  # DescribeConfigs (kio has no v0)
    37: (0, 3),  # CreatePartitions
    60: (0, 1),  # DescribeCluster
    # The group coordinator (classic protocol).
    8: (2, 9),  # OffsetCommit
    9: (1, 9),  # OffsetFetch
    10: (0, 4),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
}

PRODUCE_KEY = 0
# Only Produce carries bulk data. Everything else decodes into about 30 Python objects
# per input byte in the worst case (arrays of empty strings), so a 100 MiB Metadata
# request could cost gigabytes; real ones (10k topics, a fetch of 10k partitions) stay
# well under 1 MiB.
MAX_NON_PRODUCE_FRAME = 4 << 20

Handler = Callable[[Any, RequestHeader, Any], Awaitable[Response]]
ErrorAnswer = Callable[[RequestHeader, Any, int], Response]


class KafkaApis:
    def __init__(self, runtime: BrokerRuntime) -> None:
        self.runtime = runtime
        self._uuid_cache: tuple[object, dict[Any, str]] | None = None
        self._handlers: dict[int, tuple[Handler, ErrorAnswer | None]] = {
            0: (apis_data.handle_produce, apis_data.produce_error),
            1: (apis_data.handle_fetch, apis_data.fetch_error),
            2: (apis_data.handle_list_offsets, apis_data.list_offsets_error),
            3: (apis_admin.handle_metadata, None),  # no error field before v13
            18: (handle_api_versions, None),
            19: (apis_admin.handle_create_topics, apis_admin.create_topics_error),
            20: (apis_admin.handle_delete_topics, apis_admin.delete_topics_error),
            22: (apis_data.handle_init_producer_id, apis_data.init_producer_id_error),
            23: (apis_data.handle_offset_for_leader_epoch, apis_data.offset_for_epoch_error),
            32: (apis_admin.handle_describe_configs, apis_admin.describe_configs_error),
            37: (apis_admin.handle_create_partitions, apis_admin.create_partitions_error),
            60: (apis_admin.handle_describe_cluster, apis_admin.describe_cluster_error),
            8: (apis_group_admin.handle_offset_commit, apis_group_admin.offset_commit_error),
            9: (apis_group_admin.handle_offset_fetch, apis_group_admin.offset_fetch_error),
            10: (apis_group.handle_find_coordinator, apis_group.find_coordinator_error),
            11: (apis_group.handle_join_group, apis_group.join_group_error),
            12: (apis_group.handle_heartbeat, apis_group.heartbeat_error),
            13: (apis_group.handle_leave_group, apis_group.leave_group_error),
            14: (apis_group.handle_sync_group, apis_group.sync_group_error),
            15: (apis_group_admin.handle_describe_groups, apis_group_admin.describe_groups_error),
            16: (apis_group_admin.handle_list_groups, apis_group_admin.list_groups_error),
            42: (apis_group_admin.handle_delete_groups, apis_group_admin.delete_groups_error),
            47: (apis_group_admin.handle_offset_delete, apis_group_admin.offset_delete_error),
        }

    async def handle(self, frame: bytes) -> Response:
        api_key, version, cid = peek_ids(frame)
        supported = SUPPORTED_VERSIONS.get(api_key)
        if supported is None or not supported[0] <= version <= supported[1]:
            if api_key == API_VERSIONS_KEY:
                return api_versions_response(0, cid, UNSUPPORTED_VERSION)
            raise CloseConnection(f"unsupported api key {api_key} version {version}")
        if api_key != PRODUCE_KEY and len(frame) > MAX_NON_PRODUCE_FRAME:
            raise CloseConnection(f"{len(frame)}-byte request for api key {api_key} is too big")
        header = parse_header(frame, request_class(api_key, version).__flexible__)
        body = decode_body(api_key, version, frame, header.body_offset)
        handler, error_answer = self._handlers[api_key]
        try:
            return await handler(self, header, body)
        except CloseConnection:
            raise
        except Exception as e:
            log.exception(
                "api key %d v%d from client %r failed", api_key, version, header.client_id
            )
            if error_answer is None:
                raise CloseConnection(f"api key {api_key} failed: {e!r}") from e
            # Produce answers with INVALID_RECORD, never UNKNOWN_SERVER_ERROR: clients
            # retry that one, and the append may have happened (duplicates).
            code = INVALID_RECORD if api_key == PRODUCE_KEY else UNKNOWN_SERVER_ERROR
            return error_answer(header, body, code)

    # -- a bridge to the handler contract (apis_common.BrokerApis) until this class is
    # built from the broker's parts: the data handlers already call them directly.

    @property
    def replica_manager(self) -> Any:
        return self.runtime.replica_manager  # type: ignore[attr-defined]

    @property
    def admin(self) -> Any:
        return getattr(self.runtime, "admin", self.runtime)

    def image(self) -> Any:
        return self.runtime.image()

    def topic_name_by_id(self, topic_id: Any) -> str | None:
        """Topic name for a UUID (Fetch v13, DeleteTopics v6), cached per image."""
        image = self.runtime.image()
        cached = self._uuid_cache
        if cached is None or cached[0] is not image:
            names = {topic_uuid(tid): t.name for tid, t in image.topics.items()}
            cached = self._uuid_cache = (image, names)
        return cached[1].get(topic_id)


def api_versions_response(version: int, correlation_id: int, error_code: int = 0) -> bytes:
    return encode_response(
        API_VERSIONS_KEY,
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


async def handle_api_versions(apis: KafkaApis, header: RequestHeader, body: Any) -> Response:
    return api_versions_response(header.api_version, header.correlation_id)
