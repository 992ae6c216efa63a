"""ElectLeaders (API 43): preferred and unclean leader elections an operator asks for.

The broker checks the request and forwards it to the active controller, which decides
(kraft/election.py `elect_on_request`, with Kafka's per-partition errors) and answers
once the partition changes have committed; brokers learn the new leaders through the
metadata log, as Kafka's.

Authorization: ALTER on the CLUSTER (Kafka's ControllerApis.handleElectLeaders); a
refusal is CLUSTER_AUTHORIZATION_FAILED at the top and for every partition asked for.

Versions 0-2: all kio has and what clients send (v1 adds election_type and the top-level
error, v2 is flexible).
"""

from __future__ import annotations

from typing import Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer, by_topic
from broker.codec import RequestHeader
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors
from metadata_log.controller_api import ElectLeadersRequest, TopicPartition

_ELECTION_TYPES = (0, 1)  # PREFERRED, UNCLEAN


def _asked(body: Any) -> list[tuple[str, int]] | None:
    """The (topic, partition) pairs of the request, in order, once each; None: all."""
    if body.topic_partitions is None:
        return None
    return list(dict.fromkeys((t.topic, p) for t in body.topic_partitions for p in t.partitions))


def _response(
    header: RequestHeader, code: int, results: list[tuple[str, int, int, str | None]]
) -> Response:
    rows = [
        (topic, {"partition_id": partition, "error_code": error, "error_message": message})
        for topic, partition, error, message in results
    ]
    return answer(
        ApiKey.ELECT_LEADERS,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "replica_election_results": by_topic(rows, "topic", "partition_result"),
        },
    )


def elect_leaders_error(header: RequestHeader, body: Any, code: int) -> Response:
    asked = _asked(body) or []
    return _response(header, code, [(t, p, code, None) for t, p in asked])


async def handle_elect_leaders(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    if not apis.authorize(AclOperation.ALTER, ResourceType.CLUSTER, CLUSTER_NAME):
        return elect_leaders_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    election_type = getattr(body, "election_type", 0)  # v0: preferred only
    asked = _asked(body)
    if election_type not in _ELECTION_TYPES:
        message = f"unknown election type {election_type}: 0 (preferred) or 1 (unclean)"
        return _response(
            header,
            Errors.INVALID_REQUEST,
            [(t, p, Errors.INVALID_REQUEST, message) for t, p in asked or []],
        )
    req = ElectLeadersRequest(
        election_type=election_type,
        partitions=None if asked is None else [TopicPartition(t, p) for t, p in asked],
    )
    resp = await apis.admin.elect_leaders(req)
    return _response(
        header,
        Errors.NONE,
        [(r.topic, r.partition, r.error_code, r.error_message) for r in resp.results],
    )


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(ApiKey.ELECT_LEADERS, 0, 2, handle_elect_leaders, elect_leaders_error),
)
