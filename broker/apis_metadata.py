"""Cluster metadata handlers: Metadata and DescribeCluster. Responses are described as
plain data for every version and encoded with kio.

With an authorizer, Metadata shows only the topics the principal may DESCRIBE (a topic
asked for by name and refused answers TOPIC_AUTHORIZATION_FAILED, whether or not it
exists), and auto-creates only with CREATE on the cluster or the topic, as Kafka's
KafkaApis.handleTopicMetadataRequest.
"""

from __future__ import annotations

import logging
from typing import Any

from broker.apis_common import (
    NO_AUTHORIZED_OPERATIONS,
    ApiHandler,
    BrokerApis,
    Response,
    answer,
    authorized_operations,
)
from broker.codec import RequestHeader
from broker.codec_schema import topic_uuid
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import INTERNAL_TOPICS, is_valid_name
from metadata_log.controller_api import CreatableTopic, CreateTopicsRequest
from metadata_log.image import MetadataImage

log = logging.getLogger(__name__)


def _brokers(
    apis: BrokerApis, image: MetadataImage, *, for_metadata: bool = False
) -> list[dict[str, Any]]:
    """Brokers with an endpoint on this listener: the unfenced ones, and for a Metadata
    answer also the recently fenced, or every registered one when none is unfenced
    (broker/fenced_brokers.py says why)."""
    regs = apis.fenced_brokers.named(image) if for_metadata else image.live_brokers()
    out = []
    for b in regs:
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
    brokers = _brokers(apis, image, for_metadata=True)
    # Partitions are described against the unfenced brokers, whatever `brokers` lists.
    live = {b.broker_id for b in image.live_brokers() if apis.advertised_endpoint(b.broker_id)}
    authz = apis.authorizer is not None
    topics: list[dict[str, Any]] = []
    described: list[dict[str, Any]] = []  # entries of topics the principal may describe
    if body.topics is None or (v == 0 and not body.topics):  # all topics
        # Kafka lists only the topics the principal may describe, silently.
        for name in sorted(image.topic_ids):
            if not authz or apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                described.append(_describe_topic(image, name, live, v))
        topics = described
    else:
        auto = bool(getattr(body, "allow_auto_topic_creation", True)) and bool(
            apis.admin.auto_create_topics_enable
        )
        to_create: list[dict[str, Any]] = []
        seen: set[str] = set()
        for t in body.topics:
            name = t.name
            tid = None
            if name is None:  # v10+: by topic id
                tid = getattr(t, "topic_id", None)
                name = apis.topic_name_by_id(tid) if tid is not None else None
                if name is None:
                    topics.append(_topic_error(Errors.UNKNOWN_TOPIC_ID, None, tid))
                    continue
            if name in seen:
                continue
            seen.add(name)
            if authz and not apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                # Not even whether it exists: a topic asked by id keeps its id (ids are
                # not secret), one asked by name its name.
                topics.append(
                    _topic_error(Errors.TOPIC_AUTHORIZATION_FAILED, None if tid else name, tid)
                )
                continue
            if image.topic_by_name(name) is not None:
                entry = _describe_topic(image, name, live, v)
            elif auto and authz and not _may_create(apis, name):
                topics.append(_topic_error(Errors.TOPIC_AUTHORIZATION_FAILED, name))
                continue
            elif not is_valid_name(name):
                entry = _topic_error(Errors.INVALID_TOPIC_EXCEPTION, name)
            elif auto:
                entry = _topic_error(Errors.LEADER_NOT_AVAILABLE, name)
                to_create.append(entry)
            else:
                entry = _topic_error(Errors.UNKNOWN_TOPIC_OR_PARTITION, name)
            topics.append(entry)
            described.append(entry)
        if to_create:
            await _auto_create(apis, to_create)
    if v >= 8 and getattr(body, "include_topic_authorized_operations", False):
        for entry in described:
            entry["topic_authorized_operations"] = authorized_operations(
                apis, ResourceType.TOPIC, entry["name"]
            )
    cluster_ops = NO_AUTHORIZED_OPERATIONS
    if getattr(body, "include_cluster_authorized_operations", False):  # v8-10
        cluster_ops = _cluster_authorized_operations(apis)
    return answer(
        ApiKey.METADATA,
        header,
        {
            "throttle_time": 0,
            "brokers": brokers,
            "cluster_id": apis.cluster_id,
            "controller_id": _controller_id(brokers, header.correlation_id),
            "topics": topics,
            "cluster_authorized_operations": cluster_ops,
        },
    )


def _may_create(apis: BrokerApis, name: str) -> bool:
    """Kafka: CREATE on the cluster, or on the topic."""
    return apis.authorize(
        AclOperation.CREATE, ResourceType.CLUSTER, CLUSTER_NAME
    ) or apis.authorize(AclOperation.CREATE, ResourceType.TOPIC, name)


def _cluster_authorized_operations(apis: BrokerApis) -> int:
    """Kafka: the bitfield if the principal may DESCRIBE the cluster, else 0."""
    if not apis.authorize(AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME):
        return 0
    return authorized_operations(apis, ResourceType.CLUSTER, CLUSTER_NAME)


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


# -- DescribeCluster -----------------------------------------------------------------------


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
            "cluster_authorized_operations": _cluster_authorized_operations(apis)
            if body.include_cluster_authorized_operations
            else NO_AUTHORIZED_OPERATIONS,
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


# The versions served, beside their handlers (floors and ceilings: see `broker.apis`).
API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.METADATA, 0, 12, handle_metadata, None),  # no error field before v13
    ApiHandler(ApiKey.DESCRIBE_CLUSTER, 0, 1, handle_describe_cluster, describe_cluster_error),
)
