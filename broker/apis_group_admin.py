"""Group APIs about offsets and groups as a whole: OffsetCommit, OffsetFetch,
OffsetDelete, ListGroups, DescribeGroups, DeleteGroups (see `apis_group`)."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any

from broker.apis_common import NO_AUTHORIZED_OPERATIONS, ApiHandler, BrokerApis, Response, answer
from broker.codec import RequestHeader
from broker.group import messages as gm
from broker.group.group import GroupState
from common.api_keys import ApiKey
from common.errors import Errors

TP = tuple[str, int]


def _known(apis: BrokerApis, topic: str, partition: int) -> bool:
    t = apis.image().topic_by_name(topic)
    return t is not None and partition in t.partitions


def _by_topic(codes: dict[TP, int]) -> list[dict[str, Any]]:
    topics: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (topic, p), code in codes.items():
        topics[topic].append({"partition_index": p, "error_code": code})
    return [{"name": t, "partitions": ps} for t, ps in topics.items()]


# -- OffsetCommit --------------------------------------------------------------------------------


async def handle_offset_commit(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    codes: dict[TP, int] = {}
    offsets: list[gm.OffsetCommit] = []
    for t in body.topics:
        for p in t.partitions:
            if not _known(apis, t.name, p.partition_index):
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
    return answer(ApiKey.OFFSET_COMMIT, header, {"throttle_time": 0, "topics": _by_topic(codes)})


def offset_commit_error(header: RequestHeader, body: Any, code: int) -> Response:
    codes = {(t.name, p.partition_index): code for t in body.topics for p in t.partitions}
    return answer(ApiKey.OFFSET_COMMIT, header, {"throttle_time": 0, "topics": _by_topic(codes)})


# -- OffsetFetch ---------------------------------------------------------------------------------


def _fetch_group(apis: BrokerApis, group_id: str, topics: Any) -> tuple[int, list[dict[str, Any]]]:
    wanted = None
    if topics is not None:
        wanted = [(t.name, p) for t in topics for p in t.partition_indexes]
    code, found = apis.groups.core.fetch_offsets(group_id, wanted)
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if code != Errors.NONE:
        found = dict.fromkeys(wanted or [])
    for (topic, p), v in found.items():
        out[topic].append(
            {
                "partition_index": p,
                "committed_offset": v.offset if v else -1,
                "committed_leader_epoch": v.leader_epoch if v else -1,
                "metadata": v.metadata if v else "",
                "error_code": code,
            }
        )
    return code, [{"name": t, "partitions": ps} for t, ps in out.items()]


async def handle_offset_fetch(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if header.api_version >= 8:
        groups = []
        for g in body.groups:
            code, topics = _fetch_group(apis, g.group_id, g.topics)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return answer(ApiKey.OFFSET_FETCH, header, {"throttle_time": 0, "groups": groups})
    code, topics = _fetch_group(apis, body.group_id, body.topics)
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
    codes: dict[TP, int] = {}
    wanted: list[TP] = []
    for t in body.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            known = _known(apis, *tp)
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
        {"error_code": Errors.NONE, "throttle_time": 0, "topics": _by_topic(codes)},
    )


def offset_delete_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.OFFSET_DELETE, header, {"error_code": code, "throttle_time": 0, "topics": []}
    )


async def handle_delete_groups(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    groups = apis.groups
    core = groups.core
    names = list(dict.fromkeys(body.groups_names))
    codes = await asyncio.gather(
        *(groups.call(lambda t, _now, g=g: core.delete_group(t, g)) for g in names)
    )
    results = [{"group_id": g, "error_code": c} for g, c in zip(names, codes, strict=True)]
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
    described = [_describe(apis, g) for g in body.groups]
    return answer(ApiKey.DESCRIBE_GROUPS, header, {"throttle_time": 0, "groups": described})


def describe_groups_error(header: RequestHeader, body: Any, code: int) -> Response:
    described = [
        {"error_code": code, "group_id": g, "group_state": "", "protocol_type": "",
         "protocol_data": "", "members": [], "authorized_operations": NO_AUTHORIZED_OPERATIONS}
        for g in body.groups
    ]  # fmt: skip
    return answer(ApiKey.DESCRIBE_GROUPS, header, {"throttle_time": 0, "groups": described})


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.OFFSET_COMMIT, 2, 9, handle_offset_commit, offset_commit_error),
    ApiHandler(ApiKey.OFFSET_FETCH, 1, 9, handle_offset_fetch, offset_fetch_error),
    ApiHandler(ApiKey.DESCRIBE_GROUPS, 0, 5, handle_describe_groups, describe_groups_error),
    ApiHandler(ApiKey.LIST_GROUPS, 0, 5, handle_list_groups, list_groups_error),
    ApiHandler(ApiKey.DELETE_GROUPS, 0, 2, handle_delete_groups, delete_groups_error),
    ApiHandler(ApiKey.OFFSET_DELETE, 0, 0, handle_offset_delete, offset_delete_error),
)
