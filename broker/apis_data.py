"""Data-path handlers: Produce, Fetch, ListOffsets, OffsetForLeaderEpoch, InitProducerId.

Produce and Fetch are the hot path: work per partition and per batch, never per record;
their responses are hand-written (`codec.encode_produce_response` /
`encode_fetch_response`). Fetch lives in broker/apis_fetch.py (with fetch sessions).
Handlers call the replica manager directly. A produce is checked here, once:
authorization, acks, then each batch's header and CRC (`validate_records`); the checked
batches go down to the log, which does not parse or check them again.

Authorization follows Kafka's KafkaApis: one decision per topic (never per partition or
record), refused topics answer TOPIC_AUTHORIZATION_FAILED and the others go on; with no
authorizer the only cost is reading `apis.authorizer` once per request.

`API_HANDLERS` (at the end) is what this module serves: versions and handlers.
"""

from __future__ import annotations

import asyncio
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
from broker.apis_fetch import fetch_error, handle_fetch
from broker.apis_txn import init_transactional_producer_id
from broker.codec import (
    RequestHeader,
    encode_produce_response,
    encode_response,
)
from broker.results import ListOffsetResult, ProduceResult
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from common.topics import INTERNAL_TOPICS
from storage.record_batch import (
    ATTRIBUTES,
    CONTROL_MASK,
    PRODUCER_ID,
    TRANSACTIONAL_MASK,
    CheckedBatch,
    RecordBatchError,
    validate_records,
)

if TYPE_CHECKING:
    pass

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
