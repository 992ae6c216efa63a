"""Metadata and admin handlers: Metadata, CreateTopics, DeleteTopics, CreatePartitions,
DescribeCluster, DescribeConfigs. Responses are described as plain data for every
version and encoded with kio (`codec.encode_response` keeps the fields a version has).

Admin writes go to the active controller through the admin facade (`broker.admin`); the
image they change arrives later through the metadata log, so a Metadata request right
after CreateTopics may still say LEADER_NOT_AVAILABLE, as with Kafka.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from broker.apis_common import (
    NO_AUTHORIZED_OPERATIONS,
    ApiHandler,
    BrokerApis,
    Response,
    answer,
)
from broker.codec import RequestHeader
from broker.codec_schema import topic_uuid
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import INTERNAL_TOPICS, is_valid_name
from metadata_log.controller_api import (
    CreatableTopic,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
    CreateTopicsRequest,
    DeleteTopicsRequest,
)
from metadata_log.image import MetadataImage

log = logging.getLogger(__name__)

# DescribeConfigs config_source values
_TOPIC_CONFIG, _STATIC_BROKER_CONFIG, _DEFAULT_CONFIG = 1, 4, 5


def _brokers(apis: BrokerApis, image: MetadataImage) -> list[dict[str, Any]]:
    """Unfenced brokers with an endpoint on this listener."""
    out = []
    for b in image.live_brokers():
        ep = apis.advertised_endpoint(b.broker_id)
        if ep is not None:
            out.append(
                {
                    "node_id": b.broker_id,
                    "broker_id": b.broker_id,
                    "host": ep[0],
                    "port": ep[1],
                    "rack": b.rack,
                }
            )
    return out


def _controller_id(brokers: list[dict[str, Any]], correlation_id: int) -> int:
    # KRaft brokers tell clients some live broker is "the controller" (Kafka picks one at
    # random): clients send admin requests there and any broker forwards them to the
    # active controller. Spread by the request's correlation id instead of a random
    # draw, so an answer is a function of its request (no hidden randomness to seed).
    return brokers[correlation_id % len(brokers)]["node_id"] if brokers else -1


# -- Metadata --------------------------------------------------------------------------------


async def handle_metadata(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    v = header.api_version
    image = apis.image()
    brokers = _brokers(apis, image)
    live = {b["node_id"] for b in brokers}
    topics: list[dict[str, Any]] = []
    if body.topics is None or (v == 0 and not body.topics):  # all topics
        for name in sorted(image.topic_ids):
            topics.append(_describe_topic(image, name, live, v))
    else:
        auto = bool(getattr(body, "allow_auto_topic_creation", True)) and bool(
            apis.admin.auto_create_topics_enable
        )
        to_create: list[dict[str, Any]] = []
        seen: set[str] = set()
        for t in body.topics:
            name = t.name
            if name is None:  # v10+: by topic id
                tid = getattr(t, "topic_id", None)
                name = apis.topic_name_by_id(tid) if tid is not None else None
                if name is None:
                    topics.append(_topic_error(Errors.UNKNOWN_TOPIC_ID, None, tid))
                    continue
            if name in seen:
                continue
            seen.add(name)
            if image.topic_by_name(name) is not None:
                topics.append(_describe_topic(image, name, live, v))
            elif not is_valid_name(name):
                topics.append(_topic_error(Errors.INVALID_TOPIC_EXCEPTION, name))
            elif auto:
                entry = _topic_error(Errors.LEADER_NOT_AVAILABLE, name)
                topics.append(entry)
                to_create.append(entry)
            else:
                topics.append(_topic_error(Errors.UNKNOWN_TOPIC_OR_PARTITION, name))
        if to_create:
            await _auto_create(apis, to_create)
    return answer(
        ApiKey.METADATA,
        header,
        {
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": apis.cluster_id,
            "controller_id": _controller_id(brokers, header.correlation_id),
            "topics": topics,
            "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
    )


def _topic_error(code: int, name: str | None, topic_id: Any = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _describe_topic(image: MetadataImage, name: str, live: set[int], v: int) -> dict[str, Any]:
    topic = image.topic_by_name(name)
    assert topic is not None
    partitions = []
    for index, p in sorted(topic.partitions.items()):
        leader_ok = p.leader in live
        replicas, isr = list(p.replicas), list(p.isr)
        if v == 0:  # v0 clients expect only reachable brokers (Kafka filters them too)
            replicas = [r for r in replicas if r in live]
            isr = [r for r in isr if r in live]
        partitions.append(
            {
                "error_code": Errors.NONE if leader_ok else Errors.LEADER_NOT_AVAILABLE,
                "partition_index": index,
                "leader_id": p.leader if leader_ok else -1,
                "leader_epoch": p.leader_epoch,
                "replica_nodes": replicas,
                "isr_nodes": isr,
                "offline_replicas": [r for r in p.replicas if r not in live],
            }
        )
    return {
        "error_code": Errors.NONE,
        "name": name,
        "topic_id": topic_uuid(topic.topic_id),
        "is_internal": name in INTERNAL_TOPICS,
        "partitions": partitions,
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


async def _auto_create(apis: BrokerApis, entries: list[dict[str, Any]]) -> None:
    """`auto.create.topics.enable`: create with the defaults; the answer stays
    Errors.LEADER_NOT_AVAILABLE (clients retry) unless the controller refused the topic."""
    req = CreateTopicsRequest(topics=[CreatableTopic(name=e["name"]) for e in entries])
    try:
        resp = await apis.admin.create_topics(req)
    except Exception:
        log.exception("auto-creating %d topics failed", len(entries))
        return
    codes = {r.name: r.error_code for r in resp.topics}
    for e in entries:
        code = codes.get(e["name"], Errors.LEADER_NOT_AVAILABLE)
        if code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
            e["error_code"] = code


# -- CreateTopics, DeleteTopics, CreatePartitions --------------------------------------------


async def handle_create_topics(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    counts = Counter(t.name for t in body.topics)
    results: dict[str, dict[str, Any]] = {}
    forward: list[CreatableTopic] = []
    for t in body.topics:
        if t.name in results:
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


def _delete_targets(apis: BrokerApis, body: Any) -> list[tuple[str | None, Any]]:
    """(name, topic id) of each topic named in a DeleteTopics request (v1-5 by name,
    v6 by name or id), duplicates dropped."""
    image = apis.image()
    if hasattr(body, "topic_names"):
        pairs = [(n, None) for n in body.topic_names]
    else:
        pairs = [(t.name or apis.topic_name_by_id(t.topic_id), t.topic_id) for t in body.topics]
    out = []
    for name, tid in dict.fromkeys(pairs):
        if tid is None and name is not None:
            topic = image.topic_by_name(name)
            tid = topic_uuid(topic.topic_id) if topic is not None else None
        out.append((name, tid))
    return out


async def handle_delete_topics(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    targets = _delete_targets(apis, body)
    names = list(dict.fromkeys(n for n, _ in targets if n is not None))
    codes: dict[str, tuple[int, str | None]] = {}
    if names:
        resp = await apis.admin.delete_topics(DeleteTopicsRequest(names=names))
        codes = {r.name: (r.error_code, r.error_message) for r in resp.topics}
    responses = []
    for name, tid in targets:
        if name is None:
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
    for t in body.topics:
        if counts[t.name] > 1:
            results[t.name] = {
                "name": t.name,
                "error_code": Errors.INVALID_REQUEST,
                "error_message": "duplicate topic in the request",
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


# -- DescribeCluster, DescribeConfigs --------------------------------------------------------


async def handle_describe_cluster(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    endpoint_type = getattr(body, "endpoint_type", 1)
    if endpoint_type != 1:  # 2 = controllers: brokers do not describe them (KIP-919)
        return describe_cluster_error(header, body, Errors.MISMATCHED_ENDPOINT_TYPE)
    brokers = _brokers(apis, apis.image())
    return answer(
        ApiKey.DESCRIBE_CLUSTER,
        header,
        {
            "throttle_time": 0,
            "error_code": Errors.NONE,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": apis.cluster_id,
            "controller_id": _controller_id(brokers, header.correlation_id),
            "brokers": brokers,
            "cluster_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
    )


def describe_cluster_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.DESCRIBE_CLUSTER,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "error_message": None,
            "endpoint_type": 1,
            "cluster_id": "",
            "controller_id": -1,
            "brokers": [],
        },
    )


async def handle_describe_configs(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    results = []
    for res in body.resources:
        entry: dict[str, Any] = {
            "error_code": Errors.NONE,
            "error_message": None,
            "configs": [],
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
        }
        configs: dict[str, tuple[str | None, bool]] | None
        if res.resource_type == 2:  # topic
            configs = apis.admin.topic_configs(res.resource_name)
            read_only, source = False, _TOPIC_CONFIG
            if configs is None:
                entry["error_code"] = Errors.UNKNOWN_TOPIC_OR_PARTITION
        elif res.resource_type == 4 and res.resource_name in ("", str(apis.broker_id)):
            configs = apis.admin.broker_configs()
            read_only, source = True, _STATIC_BROKER_CONFIG
        else:
            configs = None
            entry["error_code"] = Errors.INVALID_REQUEST
            entry["error_message"] = (
                f"cannot describe resource type {res.resource_type} {res.resource_name!r} here"
            )
        if configs is not None:
            keys = res.configuration_keys
            wanted = (
                configs.items() if keys is None else [(k, configs[k]) for k in keys if k in configs]
            )
            entry["configs"] = [
                {
                    "name": k,
                    "value": value,
                    "read_only": read_only,
                    "config_source": _DEFAULT_CONFIG if is_default else source,
                    "is_sensitive": value is None,  # a secret: never shown
                    "synonyms": [],
                    "config_type": 0,
                    "documentation": None,
                }
                for k, (value, is_default) in sorted(wanted)
            ]
        results.append(entry)
    return answer(ApiKey.DESCRIBE_CONFIGS, header, {"throttle_time": 0, "results": results})


def describe_configs_error(header: RequestHeader, body: Any, code: int) -> Response:
    results = [
        {
            "error_code": code,
            "error_message": None,
            "resource_type": r.resource_type,
            "resource_name": r.resource_name,
            "configs": [],
        }
        for r in body.resources
    ]
    return answer(ApiKey.DESCRIBE_CONFIGS, header, {"throttle_time": 0, "results": results})


# The versions served, beside their handlers (floors and ceilings: see `broker.apis`).
API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.METADATA, 0, 12, handle_metadata, None),  # no error field before v13
    ApiHandler(ApiKey.CREATE_TOPICS, 2, 7, handle_create_topics, create_topics_error),
    ApiHandler(ApiKey.DELETE_TOPICS, 1, 6, handle_delete_topics, delete_topics_error),
    # DescribeConfigs: kio has no v0
    ApiHandler(ApiKey.DESCRIBE_CONFIGS, 1, 4, handle_describe_configs, describe_configs_error),
    ApiHandler(ApiKey.CREATE_PARTITIONS, 0, 3, handle_create_partitions, create_partitions_error),
    ApiHandler(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle_describe_cluster, describe_cluster_error),
)
