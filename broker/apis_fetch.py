"""The Fetch handler: consumers and followers, full fetches and fetch sessions (KIP-227).

Work per partition and per batch, never per record: the log hands back `FileSlice`s and
`codec.encode_fetch_response` writes the answer around them (the network layer sends
them with sendfile or one write). One pass in request (or session) order fills the
response's byte budget (KIP-74); a fetch that found too little parks in the replica
manager's `wait_for_data` (Kafka's DelayedFetch), and the answer reuses the reads the
wait's last look made.

Sessions (broker/fetch_session.py): the request's (session id, epoch) pick a sessionless
full fetch, a full fetch creating a session, or an incremental one, which updates the
session's partitions from the request, reads them all, and answers only those with
news. Session errors are answered with the top-level code and no partitions, as Kafka.

Authorization follows Kafka's KafkaApis: one decision per topic; followers need
CLUSTER_ACTION on the cluster, consumers READ on each topic.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Any

from broker.apis_common import BrokerApis, Response, error_code_of, to_ms
from broker.codec import FetchTopicOut, RequestHeader, encode_fetch_response
from broker.fetch_session import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    INVALID_SESSION_ID,
    CachedPartition,
    FetchSession,
    Key,
    SessionError,
)
from broker.results import FetchPartition, FetchResult
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.errors import Errors
from storage.log_types import FetchDataInfo
from storage.segment import FileSlice

if TYPE_CHECKING:
    from broker.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

INT32_MAX = 2**31 - 1
_ZERO_UUID = uuid.UUID(int=0)

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
