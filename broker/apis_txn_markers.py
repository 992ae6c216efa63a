"""WriteTxnMarkers (API 27, v1): the transaction coordinator asks the leaders of a
transaction's partitions to end it with a COMMIT or ABORT marker.

Versions: 1 only. Kafka 4 dropped v0 (KIP-896; kio has no v0 schema either), and v2
carries KIP-890 part 2's transaction version, which we do not build.

Kafka's KafkaApis.handleWriteTxnMarkersRequest: the caller needs ALTER or
CLUSTER_ACTION on the cluster (only brokers send it), else every partition answers
CLUSTER_AUTHORIZATION_FAILED. Each marker's partitions are written independently:
UNKNOWN_TOPIC_OR_PARTITION for one that does not exist, NOT_LEADER_OR_FOLLOWER where
we do not lead, the producer or coordinator epoch fencing the partition's producer
state decides (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED), else the
append with acks=all (internal topics included: __consumer_offsets gets the markers
of transactional offset commits) within request.timeout.ms.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer
from broker.codec import RequestHeader
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_MS = 30000  # request.timeout.ms, Kafka's timeout for the markers' append


def _answer(header: RequestHeader, body: Any, codes: list[list[list[int]]]) -> Response:
    markers = [
        {
            "producer_id": m.producer_id,
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p, "error_code": code}
                        for p, code in zip(t.partition_indexes, tcodes, strict=True)
                    ],
                }
                for t, tcodes in zip(m.topics, mcodes, strict=True)
            ],
        }
        for m, mcodes in zip(body.markers, codes, strict=True)
    ]
    return answer(ApiKey.WRITE_TXN_MARKERS, header, {"markers": markers})


def write_txn_markers_error(header: RequestHeader, body: Any, code: int) -> Response:
    codes = [[[code] * len(t.partition_indexes) for t in m.topics] for m in body.markers]
    return _answer(header, body, codes)


async def _write(apis: BrokerApis, m: Any, topic: str, partition: int, timeout_ms: int) -> int:
    try:
        return await apis.replica_manager.write_txn_marker(
            topic,
            partition,
            m.producer_id,
            m.producer_epoch,
            bool(m.transaction_result),
            m.coordinator_epoch,
            timeout_ms,
        )
    except OSError as exc:
        log.error("marker for %s-%d failed on storage: %r", topic, partition, exc)
        return Errors.KAFKA_STORAGE_ERROR
    except Exception:
        log.exception("marker for %s-%d failed", topic, partition)
        return Errors.UNKNOWN_SERVER_ERROR


async def handle_write_txn_markers(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if apis.authorizer is not None and not (
        apis.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME)
        or apis.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME)
    ):
        return write_txn_markers_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    image = apis.image()
    config = getattr(apis.replica_manager, "config", None)
    timeout_ms = getattr(config, "request_timeout_ms", DEFAULT_TIMEOUT_MS)
    codes: list[list[list[int]]] = []
    pending: list[tuple[list[int], int, Any]] = []
    for m in body.markers:
        mcodes: list[list[int]] = []
        for t in m.topics:
            topic = image.topic_by_name(t.name)
            tcodes: list[int] = []
            for i, p in enumerate(t.partition_indexes):
                if topic is None or p not in topic.partitions:
                    tcodes.append(Errors.UNKNOWN_TOPIC_OR_PARTITION)
                    continue
                tcodes.append(Errors.NONE)
                pending.append((tcodes, i, _write(apis, m, t.name, p, timeout_ms)))
            mcodes.append(tcodes)
        codes.append(mcodes)
    if pending:
        results = await asyncio.gather(*(c for _, _, c in pending))
        for (slot, i, _), code in zip(pending, results, strict=True):
            slot[i] = code
    return _answer(header, body, codes)


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.WRITE_TXN_MARKERS, 1, 1, handle_write_txn_markers, write_txn_markers_error),
)
