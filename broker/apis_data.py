"""Data-path handlers: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, InitProducerId.

Produce and Fetch are the hot path: work per partition and per batch, never per record;
their responses are hand-written (`codec.encode_produce_response` /
`encode_fetch_response`). Handlers call the replica manager directly. A produce is
checked here, once: authorization, acks, then each batch's header and CRC
(`validate_records`); the checked batches go down to the log, which does not parse or
check them again.

Authorization follows Kafka's KafkaApis: one decision per topic (never per partition or
record), refused topics answer TOPIC_AUTHORIZATION_FAILED and the others go on; with no
authorizer the only cost is reading `apis.authorizer` once per request.

`API_HANDLERS` (at the end) is what this module serves: versions and handlers.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct
import uuid
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any

from broker.apis_common import (
    ApiHandler,
    BrokerApis,
    CloseConnection,
    Response,
    error_code_of,
    to_ms,
)
from broker.apis_txn import init_transactional_producer_id
from broker.codec import (
    FetchTopicOut,
    RequestHeader,
    encode_fetch_response,
    encode_produce_response,
    encode_response,
)
from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    Key,
    SessionError,
)
from broker.results import FetchPartition, FetchResult, ListOffsetResult, ProduceResult
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import INTERNAL_TOPICS
from storage.log_types import FetchDataInfo
from storage.record_batch import (
    ATTRIBUTES,
    CONTROL_MASK,
    PRODUCER_ID,
    TRANSACTIONAL_MASK,
    CheckedBatch,
    RecordBatchError,
    validate_records,
)
from storage.segment import FileSlice

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
_ZERO_UUID = uuid.UUID(int=0)

# -- Produce ---------------------------------------------------------------------------------


def check_produce_records(records: bytes | None) -> list[CheckedBatch] | ProduceResult:
    """Kafka's rule for Produce v3+: exactly one valid magic-2 batch per partition.

    Returns the checked batch (as `validate_records` gives it, for the append), or the
    error result. Header checks and the CRC32C (in C) only: records are never parsed.
    """
    if not records:
        return ProduceResult(
            Errors.INVALID_RECORD, error_message="no record batch for the partition"
        )
    try:
        views = validate_records(records)
    except RecordBatchError as e:
        return ProduceResult(e.error_code, error_message=str(e))
    if len(views) != 1:
        return ProduceResult(
            Errors.INVALID_RECORD,
            error_message=f"{len(views)} record batches: exactly one is allowed",
        )
    if views[0].fields[5] & CONTROL_MASK:  # only coordinators write markers (LogValidator)
        return ProduceResult(
            Errors.INVALID_RECORD, error_message="Clients are not allowed to write control records"
        )
    return views


async def _append(produce: Awaitable[ProduceResult]) -> ProduceResult:
    """Run one partition's append; failures become batch errors, never
    UNKNOWN_SERVER_ERROR (which clients retry into duplicates)."""
    try:
        return await produce
    except RecordBatchError as e:
        return ProduceResult(e.error_code, error_message=str(e))
    except OSError as e:  # the disk: Kafka's KAFKA_STORAGE_ERROR (retriable)
        log.exception("produce failed on storage")
        return ProduceResult(Errors.KAFKA_STORAGE_ERROR, error_message=str(e))
    except Exception as e:
        log.exception("produce failed")
        return ProduceResult(Errors.INVALID_RECORD, error_message=f"broker error: {e!r}")


_PID_EPOCH = struct.Struct(">qh")  # a batch's producer id and epoch, at PRODUCER_ID


def _transactional_producers(body: Any) -> set[tuple[int, int]]:
    """(producer id, epoch) of each partition's transactional first batch: Kafka's
    RequestUtils.hasTransactionalRecords when not empty, and the request may name one
    producer only (handleProduceAppend's INVALID_PRODUCER_ID_MAPPING)."""
    low = ATTRIBUTES + 1  # the attributes' low byte holds the flag
    out: set[tuple[int, int]] = set()
    for t in body.topic_data:
        for p in t.partition_data:
            records = p.records
            if records and len(records) > low and records[low] & TRANSACTIONAL_MASK:
                if len(records) >= PRODUCER_ID + _PID_EPOCH.size:
                    out.add(_PID_EPOCH.unpack_from(records, PRODUCER_ID))
                else:
                    out.add((-1, -1))  # too short: the batch check refuses it
    return out


async def handle_produce(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    rm = apis.replica_manager
    authz = apis.authorizer is not None
    tid = getattr(body, "transactional_id", None)
    # Kafka: transactional records need a transactional id the principal may WRITE (an
    # absent id is refused with or without an authorizer), and one producer.
    txn_producers = _transactional_producers(body)
    if txn_producers:
        if tid is None or (
            authz and not apis.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid)
        ):
            return produce_error(header, body, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if len(txn_producers) > 1:
            return produce_error(header, body, Errors.INVALID_PRODUCER_ID_MAPPING)
    acks = body.acks
    acks_valid = acks in (0, 1, -1)  # the only check of acks on the produce path
    timeout_ms = to_ms(body.timeout)
    image = apis.image()
    out: list[tuple[str, list[list[Any]]]] = []  # (topic, [[partition, result], ...])
    pending: list[tuple[list[Any], Awaitable[ProduceResult]]] = []
    for t in body.topic_data:
        slots: list[list[Any]] = []
        denied = authz and not apis.authorize(AclOperation.WRITE, ResourceType.TOPIC, t.name)
        topic = image.topic_by_name(t.name)
        for p in t.partition_data:
            slot: list[Any] = [p.index, None]
            slots.append(slot)
            if denied:  # before any other check, as Kafka: the topic's existence stays hidden
                slot[1] = ProduceResult(Errors.TOPIC_AUTHORIZATION_FAILED)
            elif not acks_valid:
                why = f"acks={acks}"
                slot[1] = ProduceResult(Errors.INVALID_REQUIRED_ACKS, error_message=why)
            elif topic is None or p.index not in topic.partitions:
                slot[1] = ProduceResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            elif t.name in INTERNAL_TOPICS:  # only the group coordinator writes there
                why = f"cannot append to internal topic {t.name}"
                slot[1] = ProduceResult(Errors.INVALID_TOPIC_EXCEPTION, error_message=why)
            else:
                checked = check_produce_records(p.records)
                if isinstance(checked, ProduceResult):
                    slot[1] = checked
                else:
                    append = rm.produce(t.name, p.index, checked, acks, timeout_ms, tid)
                    pending.append((slot, append))
        out.append((t.name, slots))
    if len(pending) == 1:  # the common case: skip gather's task machinery
        slot, appended = pending[0]
        slot[1] = await _append(appended)
    elif pending:
        results = await asyncio.gather(*(_append(c) for _, c in pending))
        for (slot, _), r in zip(pending, results, strict=True):
            slot[1] = r
    if acks == 0:
        failed = [(name, s[0], s[1].error_code) for name, ss in out for s in ss if s[1].error_code]
        if failed:  # no response carries the error: closing tells the client
            raise CloseConnection(f"acks=0 produce failed: {failed[:5]}")
        return None
    return encode_produce_response(
        header.api_version,
        header.correlation_id,
        [(name, [(s[0], s[1]) for s in ss]) for name, ss in out],
    )


def produce_error(header: RequestHeader, body: Any, code: int) -> Response:
    if body.acks == 0:
        raise CloseConnection(f"acks=0 produce failed with error {code}")
    topics = [
        (t.name, [(p.index, ProduceResult(code)) for p in t.partition_data])
        for t in body.topic_data
    ]
    return encode_produce_response(header.api_version, header.correlation_id, topics)


# -- Fetch -----------------------------------------------------------------------------------

# A fetch plan: per topic (name or UUID), per partition the read to make or an error code.
FetchPlan = list[tuple[str | uuid.UUID, list[tuple[int, FetchPartition | int]]]]


async def handle_fetch(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    rm = apis.replica_manager
    version = header.api_version
    max_bytes = getattr(body, "max_bytes", INT32_MAX)
    if max_bytes < 0:
        return fetch_error(header, body, Errors.INVALID_REQUEST)
    # KIP-227 (v7+): which fetch context the (session id, epoch) select.
    sessions = rm.fetch_sessions
    session: FetchSession | None = None
    create = False
    if version >= 7:
        session_id, epoch = body.session_id, body.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):  # a full fetch, closing any named session
            if session_id != INVALID_SESSION_ID:
                sessions.remove(session_id)
            create = epoch == INITIAL_EPOCH
        else:
            try:
                session = sessions.incremental(session_id, epoch, version >= 13)
            except SessionError as e:
                return encode_fetch_response(version, header.correlation_id, e.error_code, [])
    max_wait_ms = to_ms(body.max_wait)
    if version >= 15:
        replica_id, replica_epoch = body.replica_state.replica_id, body.replica_state.replica_epoch
    else:
        replica_id, replica_epoch = getattr(body, "replica_id", -1), -1
    isolation = getattr(body, "isolation_level", 0)
    requested = _requested(body, version)
    if session is not None:
        session.update((kp for _, ps in requested for kp in ps), _forgotten(body, version))
        requested = _session_topics(session.partitions)
    plan, reads = _plan(apis, requested, version, replica_id, replica_epoch)
    topics, total, answer_now = _read(rm, plan, max_bytes, replica_id, isolation, {})
    # Kafka's DelayedFetch rule: answer at once on errors, enough bytes, or no wait.
    if reads and not answer_now and max_wait_ms > 0 and total < body.min_bytes:
        # The wait's last look read the partitions: the answer reuses those reads.
        found = await rm.wait_for_data(reads, body.min_bytes, max_wait_ms, replica_id, isolation)
        topics, total, answer_now = _read(rm, plan, max_bytes, replica_id, isolation, found)
    out_session = INVALID_SESSION_ID
    now = rm.now_ms()
    if session is not None:
        topics = _incremental_answer(session, topics)
        sessions.touch(session, now)
        out_session = session.id
    elif create:
        cached = dict(kp for _, ps in requested for kp in ps)
        made = sessions.create(replica_id >= 0, version >= 13, cached, now)
        if made is not None:
            _remember(made, topics)
            out_session = made.id
    return encode_fetch_response(
        version,
        header.correlation_id,
        Errors.NONE,
        topics,
        read_committed=isolation == 1,
        session_id=out_session,
    )


# A fetch's partitions by topic: (topic name or id, [(partition, its position)]).
Requested = list[tuple[Any, list[tuple[Key, CachedPartition]]]]


def _requested(body: Any, version: int) -> list[tuple[Any, list[tuple[Key, CachedPartition]]]]:
    out = []
    for t in body.topics:
        topic = (t.topic_id or _ZERO_UUID) if version >= 13 else t.topic
        out.append(
            (
                topic,
                [
                    (
                        (topic, p.partition),
                        CachedPartition(
                            p.fetch_offset,
                            p.partition_max_bytes,
                            getattr(p, "current_leader_epoch", -1),
                            getattr(p, "last_fetched_epoch", -1),
                            getattr(p, "log_start_offset", -1),
                        ),
                    )
                    for p in t.partitions
                ],
            )
        )
    return out


def _forgotten(body: Any, version: int) -> list[Key]:
    out: list[Key] = []
    for t in getattr(body, "forgotten_topics_data", ()):
        topic = (t.topic_id or _ZERO_UUID) if version >= 13 else t.topic
        out.extend((topic, p) for p in t.partitions)
    return out


def _session_topics(parts: dict[Key, CachedPartition]) -> Requested:
    """A session's partitions, adjacent ones of a topic grouped (as Kafka's response)."""
    out: Requested = []
    last: object = None
    for key, p in parts.items():
        if not out or key[0] != last:
            last = key[0]
            out.append((last, []))
        out[-1][1].append((key, p))
    return out


def _plan(
    apis: BrokerApis, requested: Requested, version: int, replica_id: int, replica_epoch: int
) -> tuple[FetchPlan, list[FetchPartition]]:
    # Kafka: a follower needs CLUSTER_ACTION on the cluster, else every partition is
    # refused; a consumer needs READ on each topic.
    authz = apis.authorizer is not None
    follower_denied = (
        authz
        and replica_id >= 0
        and not apis.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    )
    image = apis.image()
    plan: FetchPlan = []
    reads: list[FetchPartition] = []
    for key, parts in requested:
        if version >= 13:
            name = apis.topic_name_by_id(key)
            missing = Errors.UNKNOWN_TOPIC_ID
        else:
            name = key
            missing = Errors.UNKNOWN_TOPIC_OR_PARTITION
        denied = follower_denied or (
            authz
            and replica_id < 0
            and name is not None
            and not apis.authorize(AclOperation.READ, ResourceType.TOPIC, name)
        )
        topic = image.topic_by_name(name) if name is not None else None
        items: list[tuple[int, FetchPartition | int]] = []
        for (_, index), p in parts:
            if denied:
                items.append((index, Errors.TOPIC_AUTHORIZATION_FAILED))
            elif topic is None:
                items.append((index, missing))
            elif index not in topic.partitions:
                items.append((index, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            elif p.max_bytes < 0:
                items.append((index, Errors.INVALID_REQUEST))
            else:
                fp = FetchPartition(
                    topic.name,
                    index,
                    p.fetch_offset,
                    p.max_bytes,
                    p.current_leader_epoch,
                    p.last_fetched_epoch,
                    replica_epoch,
                    p.log_start_offset,
                )
                items.append((index, fp))
                reads.append(fp)
        plan.append((key, items))
    return plan, reads


def _remember(session: FetchSession, topics: list[FetchTopicOut]) -> None:
    """A new session's first (full) answer: what it told each partition."""
    parts = session.partitions
    for key, answered in topics:
        for index, r, _records in answered:
            p = parts.get((key, index))
            if p is not None:
                p.must_respond(r.error_code, r.high_watermark, r.log_start_offset, False, False)


def _incremental_answer(session: FetchSession, topics: list[FetchTopicOut]) -> list[FetchTopicOut]:
    """Only the partitions with news (`CachedPartition.must_respond`)."""
    parts = session.partitions
    out: list[FetchTopicOut] = []
    answered: list[Key] = []
    for key, items in topics:
        kept = []
        for item in items:
            index, r, records = item
            p = parts.get((key, index))
            has_records = (
                records is not None
                and (records.size if isinstance(records, FileSlice) else len(records)) > 0
            )
            other = r.diverging_epoch is not None or r.preferred_read_replica >= 0
            if p is None or p.must_respond(
                r.error_code, r.high_watermark, r.log_start_offset, has_records, other
            ):
                kept.append(item)
                answered.append((key, index))
        if kept:
            out.append((key, kept))
    session.rotate(answered)
    return out


def _read(
    rm: ReplicaManager,
    plan: FetchPlan,
    max_bytes: int,
    replica_id: int,
    isolation: int,
    found: dict[FetchPartition, FetchDataInfo],
) -> tuple[list[FetchTopicOut], int, bool]:
    """One pass over the partitions in request order, within the response's byte budget.

    KIP-74: the first partition with data gets at least its first whole batch (the log
    returns it even past `max_bytes`); later partitions get what the budget leaves, cut
    to it (a partial trailing batch, which clients drop, exactly as Kafka sends).
    `found`: reads `wait_for_data` made of whole partitions (`max_bytes` each), used
    where the budget leaves a partition all of its `max_bytes`.
    """
    budget = max_bytes
    total = 0
    answer_now = False
    topics: list[FetchTopicOut] = []
    for key, items in plan:
        parts: list[tuple[int, FetchResult, FileSlice | bytes | None]] = []
        for index, item in items:
            if isinstance(item, int):
                parts.append((index, FetchResult(item), None))
                answer_now = True
                continue
            limit = min(item.max_bytes, budget)
            try:
                if limit == item.max_bytes:
                    r = rm.fetch(item, replica_id, isolation, found.get(item) if found else None)
                else:
                    r = rm.fetch(dataclasses.replace(item, max_bytes=limit), replica_id, isolation)
            except Exception as e:  # storage errors carry their Kafka code
                if not hasattr(e, "error_code"):
                    log.exception("fetch of %s-%d failed", item.topic, item.partition)
                r = FetchResult(error_code_of(e))
            records = r.records
            size = r.size
            if size > limit and total:  # only the first data may exceed the budget
                records, size = _cut(records, limit), limit
            if r.error_code or r.diverging_epoch is not None or r.preferred_read_replica >= 0:
                answer_now = True
            total += size
            budget = max(0, budget - size)
            parts.append((index, r, records))
        topics.append((key, parts))
    return topics, total, answer_now


def _cut(records: FileSlice | bytes | None, size: int) -> FileSlice | bytes | None:
    if isinstance(records, FileSlice):
        return FileSlice(records.file, records.position, size)
    return records[:size] if records is not None else None


def fetch_error(header: RequestHeader, body: Any, code: int) -> Response:
    v = header.api_version
    topics: list[FetchTopicOut] = [
        (
            (t.topic_id or _ZERO_UUID) if v >= 13 else t.topic,
            [(p.partition, FetchResult(code), None) for p in t.partitions],
        )
        for t in body.topics
    ]
    top_code = code if v >= 7 else Errors.NONE  # v7 added the top-level error code
    return encode_fetch_response(v, header.correlation_id, top_code, topics)


# -- ListOffsets, OffsetForLeaderEpoch, InitProducerId ---------------------------------------


async def handle_list_offsets(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    rm = apis.replica_manager
    image = apis.image()
    authz = apis.authorizer is not None
    isolation = getattr(body, "isolation_level", 0)
    topics = []
    for t in body.topics:
        denied = authz and not apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t.name)
        topic = image.topic_by_name(t.name)
        parts = []
        for p in t.partitions:
            if denied:
                r = ListOffsetResult(Errors.TOPIC_AUTHORIZATION_FAILED)
            elif topic is None or p.partition_index not in topic.partitions:
                r = ListOffsetResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                try:
                    r = rm.list_offset(
                        t.name,
                        p.partition_index,
                        p.timestamp,
                        getattr(p, "current_leader_epoch", -1),
                        isolation,
                    )
                except Exception as e:
                    if not hasattr(e, "error_code"):
                        log.exception("list offsets of %s-%d failed", t.name, p.partition_index)
                    r = ListOffsetResult(error_code_of(e))
            parts.append(
                {
                    "partition_index": p.partition_index,
                    "error_code": r.error_code,
                    "timestamp": r.timestamp,
                    "offset": r.offset,
                    "leader_epoch": r.leader_epoch,
                }
            )
        topics.append({"name": t.name, "partitions": parts})
    return encode_response(
        ApiKey.LIST_OFFSETS,
        header.api_version,
        header.correlation_id,
        {"throttle_time": 0, "topics": topics},
    )


def list_offsets_error(header: RequestHeader, body: Any, code: int) -> Response:
    topics = [
        {
            "name": t.name,
            "partitions": [
                {
                    "partition_index": p.partition_index,
                    "error_code": code,
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                }
                for p in t.partitions
            ],
        }
        for t in body.topics
    ]
    return encode_response(
        ApiKey.LIST_OFFSETS,
        header.api_version,
        header.correlation_id,
        {"throttle_time": 0, "topics": topics},
    )


async def handle_offset_for_leader_epoch(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    rm = apis.replica_manager
    # KIP-320: brokers (CLUSTER_ACTION) see every topic; consumers, those they may
    # DESCRIBE.
    check_topics = apis.authorizer is not None and not apis.authorize(
        AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME
    )
    topics = []
    for t in body.topics:
        parts = []
        denied = check_topics and not apis.authorize(
            AclOperation.DESCRIBE, ResourceType.TOPIC, t.topic
        )
        for p in t.partitions:
            if denied:
                parts.append(
                    {
                        "error_code": Errors.TOPIC_AUTHORIZATION_FAILED,
                        "partition": p.partition,
                        "leader_epoch": -1,
                        "end_offset": -1,
                    }
                )
                continue
            try:
                err, epoch, end = rm.offset_for_leader_epoch(
                    t.topic, p.partition, p.leader_epoch, getattr(p, "current_leader_epoch", -1)
                )
            except Exception as e:
                if not hasattr(e, "error_code"):
                    log.exception("offset for leader epoch of %s-%d failed", t.topic, p.partition)
                err, epoch, end = error_code_of(e), -1, -1
            parts.append(
                {
                    "error_code": err,
                    "partition": p.partition,
                    "leader_epoch": epoch,
                    "end_offset": end,
                }
            )
        topics.append({"topic": t.topic, "partitions": parts})
    return encode_response(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        header.api_version,
        header.correlation_id,
        {"throttle_time": 0, "topics": topics},
    )


def offset_for_epoch_error(header: RequestHeader, body: Any, code: int) -> Response:
    topics = [
        {
            "topic": t.topic,
            "partitions": [
                {"error_code": code, "partition": p.partition, "leader_epoch": -1, "end_offset": -1}
                for p in t.partitions
            ],
        }
        for t in body.topics
    ]
    return encode_response(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        header.api_version,
        header.correlation_id,
        {"throttle_time": 0, "topics": topics},
    )


async def handle_init_producer_id(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if apis.authorizer is not None:
        if body.transactional_id is not None:
            if not apis.authorize(
                AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body.transactional_id
            ):
                return init_producer_id_error(
                    header, body, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
                )
        # KIP-679: an idempotent producer needs IDEMPOTENT_WRITE on the cluster, or
        # WRITE on some topic.
        elif not apis.authorize(
            AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME
        ) and not apis.authorize_any(AclOperation.WRITE, ResourceType.TOPIC):
            return init_producer_id_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    if body.transactional_id is not None:  # the transaction coordinator's (apis_txn)
        return await init_transactional_producer_id(apis, header, body)
    err, producer_id, epoch = await apis.admin.init_producer_id()
    return encode_response(
        ApiKey.INIT_PRODUCER_ID,
        header.api_version,
        header.correlation_id,
        {
            "throttle_time": 0,
            "error_code": err,
            "producer_id": producer_id,
            "producer_epoch": epoch,
        },
    )


def init_producer_id_error(header: RequestHeader, body: Any, code: int) -> Response:
    return encode_response(
        ApiKey.INIT_PRODUCER_ID,
        header.api_version,
        header.correlation_id,
        {"throttle_time": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1},
    )


# What this module serves: Kafka's API, the versions advertised (exactly the ones the
# handler implements), the handler and how it answers a failure with an error code.
API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.PRODUCE, 3, 9, handle_produce, produce_error),
    ApiHandler(ApiKey.FETCH, 4, 15, handle_fetch, fetch_error),
    ApiHandler(ApiKey.LIST_OFFSETS, 1, 7, handle_list_offsets, list_offsets_error),
    ApiHandler(ApiKey.INIT_PRODUCER_ID, 0, 4, handle_init_producer_id, init_producer_id_error),
    ApiHandler(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        2,
        4,
        handle_offset_for_leader_epoch,
        offset_for_epoch_error,
    ),
)
