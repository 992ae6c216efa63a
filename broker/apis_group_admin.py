"""Group APIs about offsets and groups as a whole: OffsetCommit, OffsetFetch,
OffsetDelete, ListGroups, DescribeGroups, DeleteGroups (see `apis_group`).

Authorization as Kafka's KafkaApis: the group first (READ to commit, DESCRIBE to fetch
offsets or describe, DELETE to delete it or its offsets), then each topic (READ to
commit or delete offsets, DESCRIBE to see them); ListGroups shows every group to a
principal that may DESCRIBE the cluster, else only the groups it may DESCRIBE.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from broker.apis_common import (
    NO_AUTHORIZED_OPERATIONS,
    ApiHandler,
    BrokerApis,
    Response,
    answer,
    authorized_names,
    authorized_operations,
)
from broker.codec import RequestHeader
from broker.group import messages as gm
from broker.group.group import GroupState
from broker.group.records import OffsetValue
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors

TP = tuple[str, int]


def known_partition(apis: BrokerApis, topic: str, partition: int) -> bool:
    t = apis.image().topic_by_name(topic)
    return t is not None and partition in t.partitions


def _may(apis: BrokerApis, operation: AclOperation, group_id: str) -> bool:
    return apis.authorizer is None or apis.authorize(operation, ResourceType.GROUP, group_id)


def refused_topics(apis: BrokerApis, operation: AclOperation, topics: Any) -> set[str]:
    """The names among `topics` (request entries with a `name`) the session may not
    `operation`: empty without an authorizer."""
    if apis.authorizer is None:
        return set()
    names = {t.name for t in topics}
    return names - authorized_names(apis, operation, ResourceType.TOPIC, names)


def by_topic(codes: dict[TP, int]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, p), code in codes.items():
        topics[topic].append({"partition_index": p, "error_code": code})
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


# -- OffsetCommit --------------------------------------------------------------------------------


async def handle_offset_commit(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not _may(apis, AclOperation.READ, body.group_id):
        return offset_commit_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    refused = refused_topics(apis, AclOperation.READ, body.topics)
    codes: dict[TP, int] = {}
    offsets: list[gm.OffsetCommit] = []
    for t in body.topics:
        for p in t.partitions:
            if t.name in refused:
                codes[(t.name, p.partition_index)] = Errors.TOPIC_AUTHORIZATION_FAILED
                continue
            if not known_partition(apis, t.name, p.partition_index):
                codes[(t.name, p.partition_index)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
                continue
            offsets.append(
                gm.OffsetCommit(
                    t.name,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    p.committed_metadata,
                )
            )
            codes[(t.name, p.partition_index)] = Errors.NONE  # keeps the request's order
    if offsets:
        req = gm.CommitRequest(
            body.group_id,
            body.generation_id_or_member_epoch,
            body.member_id,
            getattr(body, "group_instance_id", None),
            offsets,
        )
        core = apis.groups.core
        r: gm.PartitionResults = await apis.groups.call(lambda t, now: core.commit(t, req, now))
        codes.update(r.partitions)
    return answer(ApiKey.OFFSET_COMMIT, header, {"throttle_time": 0, "topics": by_topic(codes)})


def offset_commit_error(header: RequestHeader, body: Any, code: int) -> Response:
    codes = {(t.name, p.partition_index): code for t in body.topics for p in t.partitions}
    return answer(ApiKey.OFFSET_COMMIT, header, {"throttle_time": 0, "topics": by_topic(codes)})


# -- OffsetFetch ---------------------------------------------------------------------------------


def _fetch_group(
    apis: BrokerApis, group_id: str, topics: Any, require_stable: bool = False
) -> tuple[int, list[dict[str, Any]]]:
    if not _may(apis, AclOperation.DESCRIBE, group_id):
        return Errors.GROUP_AUTHORIZATION_FAILED, []
    wanted = None
    refused: set[str] = set()
    if topics is not None:
        # Kafka: offsets of topics the principal may not DESCRIBE stay hidden.
        refused = refused_topics(apis, AclOperation.DESCRIBE, topics)
        wanted = [(t.name, p) for t in topics if t.name not in refused for p in t.partition_indexes]
    code, found = apis.groups.core.fetch_offsets(group_id, wanted)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if code != Errors.NONE:
        found = dict.fromkeys(wanted or [])
    elif topics is None and apis.authorizer is not None:  # all topics: drop the hidden ones
        visible = authorized_names(
            apis, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in found)
        )
        found = {tp: v for tp, v in found.items() if tp[0] in visible}
    # v7+ require_stable (KIP-447): an offset an open transaction will change is not
    # answered yet; the consumer retries until the transaction completes.
    unstable = apis.groups.core.unstable_partitions(group_id, list(found))
    unstable = unstable if require_stable and code == Errors.NONE else set()
    for (topic, p), v in found.items():
        if (topic, p) in unstable:
            out[topic].append(_offset(p, None, Errors.UNSTABLE_OFFSET_COMMIT))
        else:
            out[topic].append(_offset(p, v, code))
    if code == Errors.NONE:
        for t in topics or ():
            if t.name in refused:
                out[t.name] += [
                    _offset(p, None, Errors.TOPIC_AUTHORIZATION_FAILED) for p in t.partition_indexes
                ]
    return code, [{"name": t, "partitions": ps} for t, ps in out.items()]


def _offset(partition: int, v: OffsetValue | None, code: int) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "committed_offset": v.offset if v else -1,
        "committed_leader_epoch": v.leader_epoch if v else -1,
        "metadata": v.metadata if v else "",
        "error_code": code,
    }


async def handle_offset_fetch(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    stable = bool(getattr(body, "require_stable", False))
    if header.api_version >= 8:
        groups = []
        for g in body.groups:
            code, topics = _fetch_group(apis, g.group_id, g.topics, stable)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return answer(ApiKey.OFFSET_FETCH, header, {"throttle_time": 0, "groups": groups})
    code, topics = _fetch_group(apis, body.group_id, body.topics, stable)
    return answer(
        ApiKey.OFFSET_FETCH, header, {"throttle_time": 0, "topics": topics, "error_code": code}
    )


def offset_fetch_error(header: RequestHeader, body: Any, code: int) -> Response:
    if header.api_version >= 8:
        groups = [{"group_id": g.group_id, "topics": [], "error_code": code} for g in body.groups]
        return answer(ApiKey.OFFSET_FETCH, header, {"throttle_time": 0, "groups": groups})
    return answer(
        ApiKey.OFFSET_FETCH, header, {"throttle_time": 0, "topics": [], "error_code": code}
    )


# -- OffsetDelete, DeleteGroups ------------------------------------------------------------------


async def handle_offset_delete(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not _may(apis, AclOperation.DELETE, body.group_id):
        return offset_delete_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    refused = refused_topics(apis, AclOperation.READ, body.topics)
    codes: dict[TP, int] = {}
    wanted: list[TP] = []
    for t in body.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name in refused:
                codes[tp] = Errors.TOPIC_AUTHORIZATION_FAILED
                continue
            known = known_partition(apis, *tp)
            codes[tp] = Errors.NONE if known else Errors.UNKNOWN_TOPIC_OR_PARTITION
            if known:
                wanted.append(tp)
    core = apis.groups.core
    r: gm.PartitionResults = await apis.groups.call(
        lambda t, _now: core.delete_offsets(t, body.group_id, wanted)
    )
    if r.error_code != Errors.NONE:
        return offset_delete_error(header, body, r.error_code)
    codes.update(r.partitions)
    return answer(
        ApiKey.OFFSET_DELETE,
        header,
        {"error_code": Errors.NONE, "throttle_time": 0, "topics": by_topic(codes)},
    )


def offset_delete_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.OFFSET_DELETE, header, {"error_code": code, "throttle_time": 0, "topics": []}
    )


async def handle_delete_groups(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    groups = apis.groups
    core = groups.core
    names = list(dict.fromkeys(body.groups_names))
    allowed = names
    if apis.authorizer is not None:
        allowed = [g for g in names if _may(apis, AclOperation.DELETE, g)]
    codes = await asyncio.gather(
        *(groups.call(lambda t, _now, g=g: core.delete_group(t, g)) for g in allowed)
    )
    by_group = dict(zip(allowed, codes, strict=True))
    results = [
        {"group_id": g, "error_code": by_group.get(g, Errors.GROUP_AUTHORIZATION_FAILED)}
        for g in names
    ]
    return answer(ApiKey.DELETE_GROUPS, header, {"throttle_time": 0, "results": results})


def delete_groups_error(header: RequestHeader, body: Any, code: int) -> Response:
    results = [{"group_id": g, "error_code": code} for g in body.groups_names]
    return answer(ApiKey.DELETE_GROUPS, header, {"throttle_time": 0, "results": results})


# -- ListGroups, DescribeGroups ------------------------------------------------------------------


async def handle_list_groups(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    core = apis.groups.core
    states = {s.lower() for s in getattr(body, "states_filter", ())}
    types = {t.lower() for t in getattr(body, "types_filter", ())}
    loading = any(not loaded for loaded in core.owned.values())
    # Kafka: DESCRIBE on the cluster lists every group; otherwise each group needs it.
    check_each = apis.authorizer is not None and not apis.authorize(
        AclOperation.DESCRIBE, ResourceType.CLUSTER, CLUSTER_NAME
    )
    listed = [
        {
            "group_id": g.group_id,
            "protocol_type": g.protocol_type or "",
            "group_state": g.state.value,
            "group_type": "classic",
        }
        for g in core.groups.values()
        if core.owned.get(g.partition)
        and (not states or g.state.value.lower() in states)
        and (not types or "classic" in types)
        and (not check_each or _may(apis, AclOperation.DESCRIBE, g.group_id))
    ]
    code = Errors.COORDINATOR_LOAD_IN_PROGRESS if loading else Errors.NONE
    return answer(
        ApiKey.LIST_GROUPS, header, {"throttle_time": 0, "error_code": code, "groups": listed}
    )


def list_groups_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.LIST_GROUPS, header, {"throttle_time": 0, "error_code": code, "groups": []}
    )


def _describe(apis: BrokerApis, group_id: str) -> dict[str, Any]:
    core = apis.groups.core
    out: dict[str, Any] = {
        "error_code": core.check(group_id),
        "group_id": group_id,
        "group_state": GroupState.DEAD.value,
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }
    g = core.groups.get(group_id)
    if out["error_code"] != Errors.NONE or g is None:
        return out
    stable = g.state == GroupState.STABLE
    out.update(
        group_state=g.state.value,
        protocol_type=g.protocol_type or "",
        protocol_data=(g.protocol_name or "") if stable else "",
        members=[
            {
                "member_id": x.member_id,
                "group_instance_id": x.group_instance_id,
                "client_id": x.client_id,
                "client_host": x.client_host,
                "member_metadata": x.metadata(g.protocol_name) if stable else b"",
                "member_assignment": x.assignment if stable else b"",
            }
            for x in g.members.values()
        ],
    )
    return out


async def handle_describe_groups(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    with_ops = header.api_version >= 3 and body.include_authorized_operations
    described = []
    for group_id in body.groups:
        if not _may(apis, AclOperation.DESCRIBE, group_id):
            described.append(_group_error(group_id, Errors.GROUP_AUTHORIZATION_FAILED))
            continue
        out = _describe(apis, group_id)
        if with_ops and out["error_code"] == Errors.NONE:
            out["authorized_operations"] = authorized_operations(apis, ResourceType.GROUP, group_id)
        described.append(out)
    return answer(ApiKey.DESCRIBE_GROUPS, header, {"throttle_time": 0, "groups": described})


def _group_error(group_id: str, code: int) -> dict[str, Any]:
    return {
        "error_code": code,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def describe_groups_error(header: RequestHeader, body: Any, code: int) -> Response:
    described = [_group_error(g, code) for g in body.groups]
    return answer(ApiKey.DESCRIBE_GROUPS, header, {"throttle_time": 0, "groups": described})


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.OFFSET_COMMIT, 2, 9, handle_offset_commit, offset_commit_error),
    ApiHandler(ApiKey.OFFSET_FETCH, 1, 9, handle_offset_fetch, offset_fetch_error),
    ApiHandler(ApiKey.DESCRIBE_GROUPS, 0, 5, handle_describe_groups, describe_groups_error),
    ApiHandler(ApiKey.LIST_GROUPS, 0, 5, handle_list_groups, list_groups_error),
    ApiHandler(ApiKey.DELETE_GROUPS, 0, 2, handle_delete_groups, delete_groups_error),
    ApiHandler(ApiKey.OFFSET_DELETE, 0, 0, handle_offset_delete, offset_delete_error),
)
