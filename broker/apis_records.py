"""DeleteRecords (API 21) and DescribeProducers (API 61): what an operator does to and
learns of a partition's records on its leader.

DeleteRecords (Kafka's KafkaApis.handleDeleteRecordsRequest): DELETE on each topic
(TOPIC_AUTHORIZATION_FAILED per partition), then on the leader of each partition the log
start offset moves and the answer waits, up to the request's timeout, for every in-sync
replica to follow (broker/record_deletion.py); the answer's low_watermark is then the
smallest log start offset among them. Versions 0-2 (v2 is flexible).

DescribeProducers (KIP-664, KafkaApis.handleDescribeProducersRequest): READ on each
topic; on the leader, the producers with batches in the log, from the producer state
(a transactional producer's coordinator epoch, from its last marker, and the first
offset of its open transaction here; -1 when none, as Kafka answers).
"""

from __future__ import annotations

import asyncio
from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer, to_ms
from broker.codec import RequestHeader
from broker.record_deletion import DeleteRecordsResult, delete_records
from common.acl import AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors

# -- DeleteRecords ---------------------------------------------------------------------------


def _delete_records_answer(
    header: RequestHeader, topics: list[tuple[str, list[tuple[int, DeleteRecordsResult]]]]
) -> Response:
    return answer(
        ApiKey.DELETE_RECORDS,
        header,
        {
            "throttle_time": 0,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "low_watermark": r.low_watermark,
                            "error_code": r.error_code,
                        }
                        for p, r in parts
                    ],
                }
                for name, parts in topics
            ],
        },
    )


def delete_records_error(header: RequestHeader, body: Any, code: int) -> Response:
    return _delete_records_answer(
        header,
        [
            (t.name, [(p.partition_index, DeleteRecordsResult(code)) for p in t.partitions])
            for t in body.topics
        ],
    )


async def handle_delete_records(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    rm = apis.replica_manager
    image = apis.image()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(0, to_ms(body.timeout)) / 1000
    out: list[tuple[str, list[tuple[int, DeleteRecordsResult]]]] = []
    pending: list[tuple[list[Any], Any]] = []
    for t in body.topics:
        denied = not apis.authorize(AclOperation.DELETE, ResourceType.TOPIC, t.name)
        topic = image.topic_by_name(t.name)
        slots: list[Any] = []
        for p in t.partitions:
            slot: list[Any] = [p.partition_index, None]
            slots.append(slot)
            if denied:
                slot[1] = DeleteRecordsResult(Errors.TOPIC_AUTHORIZATION_FAILED)
            elif topic is None or p.partition_index not in topic.partitions:
                slot[1] = DeleteRecordsResult(Errors.UNKNOWN_TOPIC_OR_PARTITION)
            else:
                work = delete_records(rm, t.name, p.partition_index, p.offset, deadline)
                pending.append((slot, work))
        out.append((t.name, slots))
    if pending:
        results = await asyncio.gather(*(w for _, w in pending))
        for (slot, _), r in zip(pending, results, strict=True):
            slot[1] = r
    return _delete_records_answer(header, [(n, [(s[0], s[1]) for s in ss]) for n, ss in out])


# -- DescribeProducers -----------------------------------------------------------------------


def _partition(index: int, code: int, producers: list[dict[str, Any]] | None = None) -> dict:
    return {
        "partition_index": index,
        "error_code": code,
        "error_message": None,
        "active_producers": producers or [],
    }


def describe_producers_error(header: RequestHeader, body: Any, code: int) -> Response:
    topics = [
        {"name": t.name, "partitions": [_partition(p, code) for p in t.partition_indexes]}
        for t in body.topics
    ]
    return answer(ApiKey.DESCRIBE_PRODUCERS, header, {"throttle_time": 0, "topics": topics})


async def handle_describe_producers(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    rm = apis.replica_manager
    image = apis.image()
    topics = []
    for t in body.topics:
        denied = not apis.authorize(AclOperation.READ, ResourceType.TOPIC, t.name)
        topic = image.topic_by_name(t.name)
        parts = []
        for index in t.partition_indexes:
            if denied:
                parts.append(_partition(index, Errors.TOPIC_AUTHORIZATION_FAILED))
                continue
            if topic is None or index not in topic.partitions:
                parts.append(_partition(index, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            h = rm.leader_partition(t.name, index)
            if isinstance(h, int):
                parts.append(_partition(index, h))
                continue
            producers = [
                {
                    "producer_id": pid,
                    "producer_epoch": entry.epoch,
                    "last_sequence": entry.last_seq,
                    "last_timestamp": entry.last_timestamp,
                    "coordinator_epoch": entry.coordinator_epoch,
                    "current_txn_start_offset": entry.current_txn_first_offset,
                }
                for pid, entry in h.producers.active_producers()
            ]
            parts.append(_partition(index, Errors.NONE, producers))
        topics.append({"name": t.name, "partitions": parts})
    return answer(ApiKey.DESCRIBE_PRODUCERS, header, {"throttle_time": 0, "topics": topics})


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.DELETE_RECORDS, 0, 2, handle_delete_records, delete_records_error),
    ApiHandler(
        ApiKey.DESCRIBE_PRODUCERS, 0, 0, handle_describe_producers, describe_producers_error
    ),
)
