"""Group APIs: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
TxnOffsetCommit (the others about offsets and groups are in `apis_group_admin`).

Each handler turns the request (any supported version: fields a version lacks are
read with defaults) into calls on the group coordinator and describes the answer
once, as plain data, for every version (`build` keeps the fields a version has).

Authorization as Kafka's KafkaApis: FindCoordinator needs DESCRIBE on the group (or the
transactional id); joining, syncing, heartbeating and leaving need READ on the group,
refused with GROUP_AUTHORIZATION_FAILED before the coordinator sees the request.
"""

from __future__ import annotations

from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer, to_ms
from broker.apis_group_admin import by_topic, known_partition, refused_topics
from broker.codec import RequestHeader
from broker.group import messages as gm
from broker.security.session import current_session
from common.acl import AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME

GROUP_KEY, TRANSACTION_KEY = 0, 1  # FindCoordinator key types


# -- FindCoordinator -----------------------------------------------------------------------------


def _coordinator(apis: BrokerApis, key: str, key_type: int) -> dict[str, Any]:
    out: dict[str, Any] = {"key": key, "node_id": -1, "host": "", "port": -1}
    if apis.authorizer is not None:
        refused = _coordinator_refusal(apis, key, key_type)
        if refused is not None:
            return {**out, "error_code": refused, "error_message": None}
    if key_type not in (GROUP_KEY, TRANSACTION_KEY) or not key:
        what = "a group id" if key_type == GROUP_KEY else "a transactional id"
        return {**out, "error_code": Errors.INVALID_REQUEST, "error_message": f"not {what}"}
    if key_type == TRANSACTION_KEY:
        # __transaction_state, by the hash of the transactional id (as groups)
        txn = apis.txn
        topic = apis.image().topic_by_name(TRANSACTION_STATE_TOPIC_NAME)
        if topic is None:
            txn.ensure_txn_topic()
            return {**out, "error_code": Errors.COORDINATOR_NOT_AVAILABLE, "error_message": None}
        partition = txn.core.partition_for(key)
    else:
        groups = apis.groups
        topic = apis.image().topic_by_name(GROUP_METADATA_TOPIC_NAME)
        if topic is None:
            groups.ensure_offsets_topic()
            return {**out, "error_code": Errors.COORDINATOR_NOT_AVAILABLE, "error_message": None}
        partition = groups.core.partition_for(key)
    reg = topic.partitions.get(partition)
    endpoint = apis.advertised_endpoint(reg.leader) if reg and reg.leader >= 0 else None
    if reg is None or endpoint is None:
        return {**out, "error_code": Errors.COORDINATOR_NOT_AVAILABLE, "error_message": None}
    host, port = endpoint
    return {**out, "error_code": Errors.NONE, "error_message": None, "node_id": reg.leader} | {
        "host": host,
        "port": port,
    }


def _coordinator_refusal(apis: BrokerApis, key: str, key_type: int) -> int | None:
    """DESCRIBE on the group or transactional id the key names, else the error."""
    if key_type == GROUP_KEY and not apis.authorize(AclOperation.DESCRIBE, ResourceType.GROUP, key):
        return Errors.GROUP_AUTHORIZATION_FAILED
    if key_type == TRANSACTION_KEY and not apis.authorize(
        AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key
    ):
        return Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    return None


def _may_read_group(apis: BrokerApis, group_id: str) -> bool:
    """Kafka: a member needs READ on its group to join, sync, heartbeat or leave."""
    return apis.authorizer is None or apis.authorize(
        AclOperation.READ, ResourceType.GROUP, group_id
    )


async def handle_find_coordinator(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    key_type = getattr(body, "key_type", GROUP_KEY)
    if header.api_version >= 4:
        found = [_coordinator(apis, k, key_type) for k in body.coordinator_keys]
        return answer(ApiKey.FIND_COORDINATOR, header, {"throttle_time": 0, "coordinators": found})
    found = _coordinator(apis, body.key, key_type)
    return answer(ApiKey.FIND_COORDINATOR, header, {"throttle_time": 0, **found})


def find_coordinator_error(header: RequestHeader, body: Any, code: int) -> Response:
    keys = list(body.coordinator_keys) if header.api_version >= 4 else [body.key]
    found = [
        {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": None}
        for k in keys
    ]
    body_out = {"throttle_time": 0, "coordinators": found, **found[0]}
    return answer(ApiKey.FIND_COORDINATOR, header, body_out)


# -- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ---------------------------------------------------


def _client_host() -> str:
    """The member's host as Kafka shows it: "/127.0.0.1" ("" outside a connection)."""
    host = current_session().client_host
    return f"/{host}" if host else ""


async def handle_join_group(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not _may_read_group(apis, body.group_id):
        return join_group_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    v = header.api_version
    session = to_ms(body.session_timeout)
    req = gm.JoinRequest(
        body.group_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        header.client_id or "",
        _client_host(),
        session,
        to_ms(body.rebalance_timeout) if v >= 1 else session,
        body.protocol_type,
        [(p.name, bytes(p.metadata)) for p in body.protocols],
        require_known_member_id=v >= 4,
        supports_skip_assignment=v >= 9,
    )
    core = apis.groups.core
    r: gm.JoinResult = await apis.groups.call(lambda t, now: core.join(t, req, now))
    return _join_answer(header, r)


def _join_answer(header: RequestHeader, r: gm.JoinResult) -> Response:
    nullable = header.api_version >= 7
    return answer(
        ApiKey.JOIN_GROUP,
        header,
        {
            "throttle_time": 0,
            "error_code": r.error_code,
            "generation_id": r.generation_id,
            "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name if nullable else r.protocol_name or "",
            "leader": r.leader,
            "skip_assignment": r.skip_assignment,
            "member_id": r.member_id,
            "members": [
                {"member_id": mid, "group_instance_id": inst, "metadata": meta}
                for mid, inst, meta in r.members
            ],
        },
    )


def join_group_error(header: RequestHeader, body: Any, code: int) -> Response:
    return _join_answer(header, gm.JoinResult(code, body.member_id))


async def handle_sync_group(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not _may_read_group(apis, body.group_id):
        return sync_group_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    req = gm.SyncRequest(
        body.group_id,
        body.generation_id,
        body.member_id,
        getattr(body, "group_instance_id", None),
        getattr(body, "protocol_type", None),
        getattr(body, "protocol_name", None),
        [(a.member_id, bytes(a.assignment)) for a in body.assignments],
    )
    core = apis.groups.core
    r: gm.SyncResult = await apis.groups.call(lambda t, now: core.sync(t, req, now))
    return _sync_answer(header, r)


def _sync_answer(header: RequestHeader, r: gm.SyncResult) -> Response:
    return answer(
        ApiKey.SYNC_GROUP,
        header,
        {
            "throttle_time": 0,
            "error_code": r.error_code,
            "protocol_type": r.protocol_type,
            "protocol_name": r.protocol_name,
            "assignment": r.assignment,
        },
    )


def sync_group_error(header: RequestHeader, body: Any, code: int) -> Response:
    return _sync_answer(header, gm.SyncResult(code))


async def handle_heartbeat(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not _may_read_group(apis, body.group_id):
        return heartbeat_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    core = apis.groups.core
    instance = getattr(body, "group_instance_id", None)
    code = await apis.groups.call(
        lambda t, now: core.heartbeat(
            t, body.group_id, body.member_id, instance, body.generation_id, now
        )
    )
    return heartbeat_error(header, body, code)


def heartbeat_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(ApiKey.HEARTBEAT, header, {"throttle_time": 0, "error_code": code})


async def handle_leave_group(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not _may_read_group(apis, body.group_id):
        return leave_group_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    v = header.api_version
    if v >= 3:
        members = [(x.member_id, x.group_instance_id) for x in body.members]
    else:
        members = [(body.member_id, None)]
    core = apis.groups.core
    r: gm.LeaveResult = await apis.groups.call(
        lambda t, now: core.leave(t, body.group_id, members, now)
    )
    code = r.error_code
    if v < 3 and code == Errors.NONE and r.members:
        code = r.members[0][2]  # one member: its error is the answer's
    return answer(
        ApiKey.LEAVE_GROUP,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "members": [
                {"member_id": mid, "group_instance_id": inst, "error_code": c}
                for mid, inst, c in r.members
            ],
        },
    )


def leave_group_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.LEAVE_GROUP, header, {"throttle_time": 0, "error_code": code, "members": []}
    )


# -- TxnOffsetCommit ------------------------------------------------------------------------------


async def handle_txn_offset_commit(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    """Kafka's handleTxnOffsetCommitRequest: WRITE on the transactional id, then READ on
    the group, then READ on each topic; unknown topics and partitions answer
    UNKNOWN_TOPIC_OR_PARTITION; the rest go to the coordinator as one transactional
    batch of the producer (visible to the group at the transaction's commit marker)."""
    if apis.authorizer is not None and not apis.authorize(
        AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
    ):
        return txn_offset_commit_error(header, body, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not _may_read_group(apis, body.group_id):
        return txn_offset_commit_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    refused = refused_topics(apis, AclOperation.READ, body.topics)
    codes: dict[tuple[str, int], int] = {}
    offsets: list[gm.OffsetCommit] = []
    for t in body.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if t.name in refused:
                codes[tp] = Errors.TOPIC_AUTHORIZATION_FAILED
            elif not known_partition(apis, *tp):
                codes[tp] = Errors.UNKNOWN_TOPIC_OR_PARTITION
            else:
                leader_epoch = getattr(p, "committed_leader_epoch", -1)
                offsets.append(
                    gm.OffsetCommit(*tp, p.committed_offset, leader_epoch, p.committed_metadata)
                )
                codes[tp] = Errors.NONE  # keeps the request's order
    if offsets:
        req = gm.TxnCommitRequest(
            body.transactional_id,
            body.group_id,
            body.producer_id,
            body.producer_epoch,
            getattr(body, "generation_id", -1),
            getattr(body, "member_id", ""),
            getattr(body, "group_instance_id", None),
            offsets,
        )
        core = apis.groups.core
        r: gm.PartitionResults = await apis.groups.call(lambda t, now: core.txn_commit(t, req, now))
        codes.update(r.partitions)
    if header.api_version < 2:
        # Kafka: clients before 2.0 (KAFKA-7296) do not retry COORDINATOR_LOAD_IN_PROGRESS.
        load = Errors.COORDINATOR_LOAD_IN_PROGRESS
        codes = {
            tp: Errors.COORDINATOR_NOT_AVAILABLE if c == load else c for tp, c in codes.items()
        }
    return answer(ApiKey.TXN_OFFSET_COMMIT, header, {"throttle_time": 0, "topics": by_topic(codes)})


def txn_offset_commit_error(header: RequestHeader, body: Any, code: int) -> Response:
    codes = {(t.name, p.partition_index): code for t in body.topics for p in t.partitions}
    return answer(ApiKey.TXN_OFFSET_COMMIT, header, {"throttle_time": 0, "topics": by_topic(codes)})


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.FIND_COORDINATOR, 0, 4, handle_find_coordinator, find_coordinator_error),
    ApiHandler(ApiKey.JOIN_GROUP, 0, 9, handle_join_group, join_group_error),
    ApiHandler(ApiKey.HEARTBEAT, 0, 4, handle_heartbeat, heartbeat_error),
    ApiHandler(ApiKey.LEAVE_GROUP, 0, 5, handle_leave_group, leave_group_error),
    ApiHandler(ApiKey.SYNC_GROUP, 0, 5, handle_sync_group, sync_group_error),
    ApiHandler(ApiKey.TXN_OFFSET_COMMIT, 0, 3, handle_txn_offset_commit, txn_offset_commit_error),
)
