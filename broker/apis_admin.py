"""Admin handlers: CreateTopics, DeleteTopics, CreatePartitions (configs: apis_configs).
Responses are described as plain data for every version and encoded with kio
(`codec.encode_response` keeps the fields a version has).

Admin writes go to the active controller through the admin facade (`broker.admin`); the
image they change arrives later through the metadata log, so a Metadata request right
after CreateTopics may still say LEADER_NOT_AVAILABLE, as with Kafka.

Authorization follows Kafka's rules for these requests (ControllerApis, which checks
them with the client's principal once forwarded); here the broker checks them before
forwarding, since our controller API acts for the broker, not for the client.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.apis_common import (
    ApiHandler,
    BrokerApis,
    Response,
    answer,
    authorized_names,
)
from broker.codec import RequestHeader
from broker.codec_schema import topic_uuid
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import is_valid_name
from metadata_log.controller_api import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)

# -- CreateTopics, DeleteTopics, CreatePartitions --------------------------------------------


async def handle_create_topics(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    counts = Counter(t.name for t in body.topics)
    results: dict[str, dict[str, Any]] = {}
    forward: list[CreatableTopic] = []
    # Kafka (ControllerApis.createTopics): CREATE on the cluster, or on each topic;
    # a created topic's configs are shown only with DESCRIBE_CONFIGS on it.
    creatable: set[str] | None = None  # None: every topic
    hidden_configs: set[str] = set()
    if apis.authorizer is not None:
        if not apis.authorize(AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME):
            creatable = authorized_names(apis, AclOperation.CREATE, ResourceType.TOPIC, counts)
        shown = authorized_names(apis, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, counts)
        hidden_configs = counts.keys() - shown
    for t in body.topics:
        if t.name in results:
            continue
        if creatable is not None and counts[t.name] == 1 and t.name not in creatable:
            results[t.name] = {
                "name": t.name,
                "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                "error_message": "Authorization failed.",
            }
            continue
        error = _check_creatable(t, counts[t.name])
        if error is not None:
            results[t.name] = {"name": t.name, "error_code": error[0], "error_message": error[1]}
            continue
        results[t.name] = {}  # filled from the controller's answer
        forward.append(
            CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments={a.partition_index: list(a.broker_ids) for a in t.assignments} or None,
                configs={c.name: c.value for c in t.configs if c.value is not None},
            )
        )
    if forward:
        resp = await apis.admin.create_topics(
            CreateTopicsRequest(topics=forward, validate_only=getattr(body, "validate_only", False))
        )
        for r in resp.topics:
            results[r.name] = {
                "name": r.name,
                "error_code": r.error_code,
                "error_message": r.error_message,
                "topic_id": topic_uuid(r.topic_id) if r.topic_id else None,
                "num_partitions": r.num_partitions,
                "replication_factor": r.replication_factor,
            }
            if r.error_code == Errors.NONE and r.name in hidden_configs:
                results[r.name]["topic_config_error_code"] = Errors.TOPIC_AUTHORIZATION_FAILED
    topics = []
    for name, entry in results.items():
        if not entry:  # the controller did not mention it
            entry = {
                "name": name,
                "error_code": Errors.INVALID_REQUEST,
                "error_message": "no answer from the controller",
            }
        topics.append(
            {
                "topic_id": None,
                "error_message": None,
                "num_partitions": -1,
                "replication_factor": -1,
                "configs": None,
                **entry,
            }
        )
    return answer(ApiKey.CREATE_TOPICS, header, {"throttle_time": 0, "topics": topics})


def _check_creatable(t: Any, count: int) -> tuple[int, str] | None:
    """What would break the controller API's bounds, answered here so one bad topic
    does not fail the others of the request."""
    if count > 1:
        return Errors.INVALID_REQUEST, f"topic {t.name!r} appears {count} times in the request"
    if not is_valid_name(t.name):
        return Errors.INVALID_TOPIC_EXCEPTION, f"illegal topic name {t.name!r}"
    if not (t.num_partitions == -1 or 1 <= t.num_partitions <= 100_000):
        return Errors.INVALID_PARTITIONS, f"number of partitions {t.num_partitions} is out of range"
    if not (t.replication_factor == -1 or t.replication_factor >= 1):
        why = f"replication factor {t.replication_factor} is invalid"
        return Errors.INVALID_REPLICATION_FACTOR, why
    return None


def create_topics_error(header: RequestHeader, body: Any, code: int) -> Response:
    topics = [
        {
            "name": n,
            "topic_id": None,
            "error_code": code,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": None,
        }
        for n in dict.fromkeys(t.name for t in body.topics)
    ]
    return answer(ApiKey.CREATE_TOPICS, header, {"throttle_time": 0, "topics": topics})


def _delete_targets(apis: BrokerApis, body: Any) -> list[tuple[str | None, Any, bool]]:
    """(name, topic id, named by id) of each topic in a DeleteTopics request (v1-5 by
    name, v6 by name or id), duplicates dropped; the id is None for an unknown name."""
    image = apis.image()
    if hasattr(body, "topic_names"):
        pairs = [(n, None) for n in body.topic_names]
    else:
        pairs = [(t.name or apis.topic_name_by_id(t.topic_id), t.topic_id) for t in body.topics]
    out = []
    for name, tid in dict.fromkeys(pairs):
        by_id = tid is not None
        if tid is None and name is not None:
            topic = image.topic_by_name(name)
            tid = topic_uuid(topic.topic_id) if topic is not None else None
        out.append((name, tid, by_id))
    return out


def _delete_refusal(
    apis: BrokerApis, targets: list[tuple[str | None, Any, bool]]
) -> dict[tuple[str | None, Any], tuple[str | None, Any]]:
    """Kafka (ControllerApis.deleteTopics): without DELETE on the cluster, each topic
    needs DELETE on it. A name the principal may not DESCRIBE is refused before its
    existence is looked at, and an id it maps to is not shown; a topic asked by id keeps
    its id, and its name only when describable. Returns target -> (name, id) to answer
    TOPIC_AUTHORIZATION_FAILED with."""
    if apis.authorizer is None or apis.authorize(
        AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME
    ):
        return {}
    named = [n for n, _, _ in targets if n is not None]
    describable = authorized_names(apis, AclOperation.DESCRIBE, ResourceType.TOPIC, named)
    deletable = authorized_names(apis, AclOperation.DELETE, ResourceType.TOPIC, named)
    refused: dict[tuple[str | None, Any], tuple[str | None, Any]] = {}
    for name, tid, by_id in targets:
        if name is None or name in deletable:
            continue
        if by_id:
            refused[(name, tid)] = (name if name in describable else None, tid)
        elif name not in describable or tid is not None:  # an unknown name: not found
            refused[(name, tid)] = (name, None)
    return refused


async def handle_delete_topics(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    targets = _delete_targets(apis, body)
    refused = _delete_refusal(apis, targets)
    names = list(
        dict.fromkeys(n for n, tid, _ in targets if n is not None and (n, tid) not in refused)
    )
    codes: dict[str, tuple[int, str | None]] = {}
    if names:
        resp = await apis.admin.delete_topics(DeleteTopicsRequest(names=names))
        codes = {r.name: (r.error_code, r.error_message) for r in resp.topics}
    responses = []
    for name, tid, _ in targets:
        if (name, tid) in refused:
            name, tid = refused[(name, tid)]
            code, msg = Errors.TOPIC_AUTHORIZATION_FAILED, None
        elif name is None:
            code, msg = Errors.UNKNOWN_TOPIC_ID, None
        else:
            code, msg = codes.get(name, (Errors.UNKNOWN_TOPIC_OR_PARTITION, None))
        responses.append({"name": name, "topic_id": tid, "error_code": code, "error_message": msg})
    return answer(
        ApiKey.DELETE_TOPICS,
        header,
        {"throttle_time": 0, "responses": responses},
    )


def delete_topics_error(header: RequestHeader, body: Any, code: int) -> Response:
    if hasattr(body, "topic_names"):
        pairs = [(n, None) for n in body.topic_names]
    else:
        pairs = [(t.name, t.topic_id) for t in body.topics]
    responses = [
        {"name": n, "topic_id": tid, "error_code": code, "error_message": None}
        for n, tid in dict.fromkeys(pairs)
    ]
    return answer(
        ApiKey.DELETE_TOPICS,
        header,
        {"throttle_time": 0, "responses": responses},
    )


async def handle_create_partitions(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    counts = Counter(t.name for t in body.topics)
    results: dict[str, dict[str, Any]] = {}
    forward = []
    alterable = None  # Kafka: ALTER on each topic (None: authorization is off)
    if apis.authorizer is not None:
        alterable = authorized_names(apis, AclOperation.ALTER, ResourceType.TOPIC, counts)
    for t in body.topics:
        if counts[t.name] > 1:
            results[t.name] = {
                "name": t.name,
                "error_code": Errors.INVALID_REQUEST,
                "error_message": "duplicate topic in the request",
            }
        elif alterable is not None and t.name not in alterable:
            results[t.name] = {
                "name": t.name,
                "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                "error_message": None,
            }
        elif not 1 <= t.count <= 100_000:
            results[t.name] = {
                "name": t.name,
                "error_code": Errors.INVALID_PARTITIONS,
                "error_message": f"partition count {t.count} is out of range",
            }
        else:
            results[t.name] = {
                "name": t.name,
                "error_code": Errors.INVALID_REQUEST,
                "error_message": "no answer from the controller",
            }
            assigned = t.assignments
            assignments = [list(a.broker_ids) for a in assigned] if assigned is not None else None
            forward.append(CreatePartitionsTopic(t.name, t.count, assignments))
    if forward:
        resp = await apis.admin.create_partitions(
            CreatePartitionsRequest(topics=forward, validate_only=body.validate_only)
        )
        for r in resp.topics:
            results[r.name] = {
                "name": r.name,
                "error_code": r.error_code,
                "error_message": r.error_message,
            }
    return answer(
        ApiKey.CREATE_PARTITIONS,
        header,
        {"throttle_time": 0, "results": list(results.values())},
    )


def create_partitions_error(header: RequestHeader, body: Any, code: int) -> Response:
    results = [
        {"name": n, "error_code": code, "error_message": None}
        for n in dict.fromkeys(t.name for t in body.topics)
    ]
    return answer(ApiKey.CREATE_PARTITIONS, header, {"throttle_time": 0, "results": results})


# The versions served, beside their handlers (floors and ceilings: see `broker.apis`).
API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.CREATE_TOPICS, 2, 7, handle_create_topics, create_topics_error),
    ApiHandler(ApiKey.DELETE_TOPICS, 1, 6, handle_delete_topics, delete_topics_error),
    ApiHandler(ApiKey.CREATE_PARTITIONS, 0, 3, handle_create_partitions, create_partitions_error),
)
