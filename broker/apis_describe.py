"""The describing APIs of operations: DescribeLogDirs (35), DescribeTopicPartitions (75,
KIP-966) and DescribeQuorum (55).

- DescribeLogDirs answers from this broker's own logs: per log dir, per partition its
  size and offset lag (Kafka's ReplicaManager.describeLogDirs: max(HW - LEO, 0) for the
  current log, so 0 on a leader and on a caught-up follower), and the dir's total and
  usable bytes (v4). DESCRIBE on the CLUSTER, else CLUSTER_AUTHORIZATION_FAILED at the top.
- DescribeTopicPartitions answers from the metadata image as Kafka's
  KRaftMetadataCache.describeTopicResponse: topics in name order, at most
  `response_partition_limit` partitions (capped by Kafka's
  max.request.partition.size.limit default, 2000), a cursor where the page stopped.
  DESCRIBE on each topic: asked by name and refused, TOPIC_AUTHORIZATION_FAILED; when
  listing all, refused topics are left out (as Metadata). ELR fields are empty: this
  controller does not keep eligible leader replicas yet.
- DescribeQuorum asks the active controller (GET /v1/quorum/status on its HTTP API) and
  answers the __cluster_metadata partition's state. DESCRIBE on the CLUSTER.

Versions: DescribeLogDirs 1-4 (Kafka 4 dropped v0, KIP-896; v5 adds KIP-1066's cordoned
dirs, which we do not have), DescribeTopicPartitions 0 (the only one), DescribeQuorum 0-2
(all kio has).
"""

from __future__ import annotations

import shutil
import uuid
from collections import defaultdict
from typing import Any

from broker.apis_common import (
    ApiHandler,
    BrokerApis,
    Response,
    answer,
    authorized_operations,
)
from broker.codec import RequestHeader
from broker.codec_schema import topic_uuid
from broker.controller_channel import ControllerError, ControllerUnavailable
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import INTERNAL_TOPICS
from metadata_log.image import PartitionRegistration

METADATA_TOPIC = "__cluster_metadata"  # the quorum's log, as Kafka names it
MAX_PARTITIONS_PER_PAGE = 2000  # Kafka's max.request.partition.size.limit default
_NO_DIRECTORY = uuid.UUID(int=0)  # Kafka's Uuid.ZERO_UUID: directory ids are not tracked


# -- DescribeLogDirs ---------------------------------------------------------------------------


def _disk(path: Any) -> tuple[int, int]:
    """(total, usable) bytes of the filesystem holding `path`; -1s when unreadable."""
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return -1, -1
    return usage.total, usage.free


def describe_log_dirs_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.DESCRIBE_LOG_DIRS, header, {"throttle_time": 0, "error_code": code, "results": []}
    )


async def handle_describe_log_dirs(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not apis.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return describe_log_dirs_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    wanted: set[tuple[str, int]] | None = None
    if body.topics is not None:
        wanted = {(t.topic, p) for t in body.topics for p in t.partitions}
    rm = apis.replica_manager
    hosted = rm.partitions
    per_dir: dict[Any, dict[str, list[dict[str, Any]]]] = {
        d: defaultdict(list) for d in rm.log_manager.log_dirs
    }
    for (topic, partition), log in sorted(rm.log_manager.logs.items()):
        if wanted is not None and (topic, partition) not in wanted:
            continue
        h = hosted.get((topic, partition))
        hw = h.core.high_watermark if h is not None else log.log_end_offset
        per_dir.setdefault(log.dir.parent, defaultdict(list))[topic].append(
            {
                "partition_index": partition,
                "partition_size": log.size_in_bytes,
                "offset_lag": max(hw - log.log_end_offset, 0),
                "is_future_key": False,  # no intra-broker moves (AlterReplicaLogDirs)
            }
        )
    results = []
    for d, topics in per_dir.items():
        total, usable = _disk(d)
        results.append(
            {
                "error_code": Errors.NONE,
                "log_dir": str(d),
                "topics": [{"name": t, "partitions": ps} for t, ps in sorted(topics.items())],
                "total_bytes": total,
                "usable_bytes": usable,
            }
        )
    return answer(
        ApiKey.DESCRIBE_LOG_DIRS,
        header,
        {"throttle_time": 0, "error_code": Errors.NONE, "results": results},
    )


# -- DescribeTopicPartitions -------------------------------------------------------------------


def _topic_error(code: int, name: str) -> dict[str, Any]:
    return {"error_code": code, "name": name, "topic_id": None, "partitions": []}


def _partition(p: PartitionRegistration, index: int, live: set[int]) -> dict[str, Any]:
    leader_ok = p.leader in live
    return {
        "error_code": Errors.NONE if leader_ok else Errors.LEADER_NOT_AVAILABLE,
        "partition_index": index,
        "leader_id": p.leader if leader_ok else -1,
        "leader_epoch": p.leader_epoch,
        "replica_nodes": list(p.replicas),
        "isr_nodes": list(p.isr),
        "eligible_leader_replicas": list(p.elr),  # KIP-966
        "last_known_elr": list(p.last_known_elr),
        "offline_replicas": [r for r in p.replicas if r not in live],
    }


def describe_topic_partitions_error(header: RequestHeader, body: Any, code: int) -> Response:
    topics = [_topic_error(code, t.name) for t in body.topics]
    return answer(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        header,
        {"throttle_time": 0, "topics": topics, "next_cursor": None},
    )


async def handle_describe_topic_partitions(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    image = apis.image()
    live = {b.broker_id for b in image.live_brokers() if apis.advertised_endpoint(b.broker_id)}
    cursor = body.cursor
    every = not body.topics
    if every:
        names = [
            n
            for n in sorted(image.topic_ids)
            if apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, n)
        ]
    else:
        names = sorted({t.name for t in body.topics})
        if cursor is not None and cursor.topic_name not in names:
            # Kafka: the cursor's topic must be one of the topics asked for.
            return describe_topic_partitions_error(header, body, Errors.INVALID_REQUEST)
    if cursor is not None:
        names = [n for n in names if n >= cursor.topic_name]
    remaining = max(0, min(body.response_partition_limit, MAX_PARTITIONS_PER_PAGE))
    topics: list[dict[str, Any]] = []
    next_cursor = None
    for name in names:
        if remaining <= 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        if not every and not apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
            topics.append(_topic_error(Errors.TOPIC_AUTHORIZATION_FAILED, name))
            continue
        topic = image.topic_by_name(name)
        if topic is None:
            topics.append(_topic_error(Errors.UNKNOWN_TOPIC_OR_PARTITION, name))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        indexes = [p for p in sorted(topic.partitions) if p >= start]
        page, rest = indexes[:remaining], indexes[remaining:]
        remaining -= len(page)
        topics.append(
            {
                "error_code": Errors.NONE,
                "name": name,
                "topic_id": topic_uuid(topic.topic_id),
                "is_internal": name in INTERNAL_TOPICS,
                "partitions": [_partition(topic.partitions[p], p, live) for p in page],
                "topic_authorized_operations": authorized_operations(
                    apis, ResourceType.TOPIC, name
                ),
            }
        )
        if rest:
            next_cursor = {"topic_name": name, "partition_index": rest[0]}
            break
    return answer(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        header,
        {"throttle_time": 0, "topics": topics, "next_cursor": next_cursor},
    )


# -- DescribeQuorum ----------------------------------------------------------------------------


def describe_quorum_error(
    header: RequestHeader, body: Any, code: int, message: str | None = None
) -> Response:
    return answer(
        ApiKey.DESCRIBE_QUORUM,
        header,
        {"error_code": code, "error_message": message, "topics": [], "nodes": []},
    )


def _replica(r: Any) -> dict[str, Any]:
    return {
        "replica_id": r.replica_id,
        "replica_directory_id": _NO_DIRECTORY,
        "log_end_offset": r.log_end_offset,
        "last_fetch_timestamp": r.last_fetch_timestamp,
        "last_caught_up_timestamp": r.last_caught_up_timestamp,
    }


async def handle_describe_quorum(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not apis.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return describe_quorum_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    asked = [(t.topic_name, p.partition_index) for t in body.topics for p in t.partitions]
    if asked != [(METADATA_TOPIC, 0)]:
        # Kafka's KafkaRaftClient: only the metadata partition has a quorum to describe.
        return describe_quorum_error(header, body, Errors.UNKNOWN_TOPIC_OR_PARTITION)
    try:
        status = await apis.admin.quorum_status()
    except (ControllerError, ControllerUnavailable) as exc:
        code = exc.error_code if isinstance(exc, ControllerError) else Errors.REQUEST_TIMED_OUT
        return describe_quorum_error(header, body, code, str(exc))
    partition = {
        "partition_index": 0,
        "error_code": Errors.NONE,
        "error_message": None,
        "leader_id": status.leader_id,
        "leader_epoch": status.term,
        "high_watermark": status.high_watermark,
        "current_voters": [_replica(v) for v in status.voters],
        "observers": [_replica(o) for o in status.observers],
    }
    nodes = [
        {
            "node_id": v.replica_id,
            "listeners": [{"name": "CONTROLLER", "host": v.host, "port": v.port}],
        }
        for v in status.voters
        if v.host is not None and v.port is not None
    ]
    return answer(
        ApiKey.DESCRIBE_QUORUM,
        header,
        {
            "error_code": Errors.NONE,
            "error_message": None,
            "topics": [{"topic_name": METADATA_TOPIC, "partitions": [partition]}],
            "nodes": nodes,
        },
    )


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.DESCRIBE_LOG_DIRS, 1, 4, handle_describe_log_dirs, describe_log_dirs_error),
    ApiHandler(
        ApiKey.DESCRIBE_TOPIC_PARTITIONS,
        0,
        0,
        handle_describe_topic_partitions,
        describe_topic_partitions_error,
    ),
    ApiHandler(ApiKey.DESCRIBE_QUORUM, 0, 2, handle_describe_quorum, describe_quorum_error),
)
