"""AlterPartitionReassignments (API 45) and ListPartitionReassignments (API 46): partition
reassignments (KIP-455), as kafka-reassign-partitions.sh and the admin clients use them.

The broker checks the request and forwards it to the active controller, which decides
(kraft/reassignment.py) and answers once the partition changes have committed; brokers
learn the new replicas through the metadata log (adding replicas start following,
removed ones delete their copy).

Authorization as Kafka's ControllerApis: ALTER on the CLUSTER for AlterPartition-
Reassignments (a refusal is CLUSTER_AUTHORIZATION_FAILED at the top and for every
partition asked for), DESCRIBE on the CLUSTER for ListPartitionReassignments (a refusal
is the top-level CLUSTER_AUTHORIZATION_FAILED and no topics).

Version 0 only: all Kafka has for ListPartitionReassignments; AlterPartition-
Reassignments v1 (KIP-1148's allow_replication_factor_change) is not in kio.
"""

from __future__ import annotations

from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer, by_topic
from broker.codec import RequestHeader
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from metadata_log.controller_api import (
    MAX_REASSIGNMENTS,
    AlterPartitionReassignmentsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    ReassignablePartition,
    TopicPartition,
)

# -- AlterPartitionReassignments --------------------------------------------------------------


def _alter_response(
    header: RequestHeader,
    code: int,
    message: str | None,
    results: list[tuple[str, int, int, str | None]],
) -> Response:
    rows = [
        (topic, {"partition_index": partition, "error_code": error, "error_message": msg})
        for topic, partition, error, msg in results
    ]
    return answer(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "error_message": message,
            "responses": by_topic(rows, "name", "partitions"),
        },
    )


def alter_reassignments_error(header: RequestHeader, body: Any, code: int) -> Response:
    asked = [(t.name, p.partition_index) for t in body.topics for p in t.partitions]
    return _alter_response(header, code, None, [(t, p, code, None) for t, p in asked])


async def handle_alter_reassignments(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    if not apis.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return alter_reassignments_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    asked = [
        ReassignablePartition(
            t.name,
            p.partition_index,
            None if p.replicas is None else [int(r) for r in p.replicas],
        )
        for t in body.topics
        for p in t.partitions
    ]
    bad = [
        a for a in asked if a.partition < 0 or any(r < 0 for r in a.replicas or ()) or not a.topic
    ]
    if bad or len(asked) > MAX_REASSIGNMENTS:
        message = (
            f"at most {MAX_REASSIGNMENTS} partitions per request"
            if not bad
            else "partition indexes and broker ids must not be negative"
        )
        return _alter_response(
            header,
            Errors.INVALID_REQUEST,
            message,
            [(a.topic, a.partition, Errors.INVALID_REQUEST, message) for a in asked],
        )
    if not asked:
        return _alter_response(header, Errors.NONE, None, [])
    resp = await apis.admin.alter_partition_reassignments(AlterPartitionReassignmentsRequest(asked))
    return _alter_response(
        header,
        Errors.NONE,
        None,
        [(r.topic, r.partition, r.error_code, r.error_message) for r in resp.results],
    )


# -- ListPartitionReassignments ---------------------------------------------------------------


def _list_response(
    header: RequestHeader, code: int, message: str | None, topics: list[dict[str, Any]]
) -> Response:
    return answer(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        header,
        {"throttle_time": 0, "error_code": code, "error_message": message, "topics": topics},
    )


def list_reassignments_error(header: RequestHeader, body: Any, code: int) -> Response:
    return _list_response(header, code, None, [])


async def handle_list_reassignments(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not apis.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return list_reassignments_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    asked = (
        None
        if body.topics is None
        else [
            TopicPartition(t.name, int(p))
            for t in body.topics
            for p in t.partition_indexes
            if int(p) >= 0 and t.name
        ]
    )
    if asked is not None and len(asked) > MAX_REASSIGNMENTS:
        message = f"at most {MAX_REASSIGNMENTS} partitions per request"
        return _list_response(header, Errors.INVALID_REQUEST, message, [])
    resp = await apis.admin.list_partition_reassignments(ListPartitionReassignmentsRequest(asked))
    if not isinstance(resp, ListPartitionReassignmentsResponse):
        code, message = resp
        return _list_response(header, code, message, [])
    rows = [
        (
            r.topic,
            {
                "partition_index": r.partition,
                "replicas": r.replicas,
                "adding_replicas": r.adding_replicas,
                "removing_replicas": r.removing_replicas,
            },
        )
        for r in resp.reassignments
    ]
    topics = by_topic(rows, "name", "partitions")
    return _list_response(header, Errors.NONE, None, topics)


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        0,
        0,
        handle_alter_reassignments,
        alter_reassignments_error,
    ),
    ApiHandler(
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        0,
        0,
        handle_list_reassignments,
        list_reassignments_error,
    ),
)
