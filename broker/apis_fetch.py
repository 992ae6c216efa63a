"""The Fetch handler: consumers and followers, full fetches and fetch sessions (KIP-227).

Work per partition and per batch, never per record: the log hands back `FileSlice`s and
`codec.encode_fetch_response` writes the answer around them (the network layer sends
them with sendfile or one write). One pass in request (or session) order fills the
response's byte budget (KIP-74); a fetch that found too little parks in the replica
manager's `wait_for_data` (Kafka's DelayedFetch), and the answer reuses the reads the
wait's last look made.

Sessions (broker/fetch_session.py): the request's (session id, epoch) pick a sessionless
full fetch, a full fetch creating a session, or an incremental one, which updates the
session's partitions from the request, reads those that may have news (`SessionRead`:
named in the request, marked in the broker's change feed since the last fetch, or
with an error; all of them every FULL_SCAN_MS) and answers only those with news.
Session errors are answered with the top-level code and no partitions, as Kafka.

Authorization follows Kafka's KafkaApis: one decision per topic; followers need
CLUSTER_ACTION on the cluster, consumers READ on each topic.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import Iterable
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
# An incremental fetch reads every partition of its session at least this often.
FULL_SCAN_MS = 5_000
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
    out_session = INVALID_SESSION_ID
    if session is not None:
        changed = [kp for _, ps in requested for kp in ps]
        session.update(changed, _forgotten(body, version))
        reading = SessionRead(apis, session, version, replica_id, replica_epoch, isolation)
        topics = await reading.run([k for k, _ in changed], max_bytes, body.min_bytes,
                                   max_wait_ms)  # fmt: skip
        topics = _incremental_answer(session, topics)
        sessions.touch(session, rm.now_ms())
        return encode_fetch_response(
            version,
            header.correlation_id,
            Errors.NONE,
            topics,
            read_committed=isolation == 1,
            session_id=session.id,
        )
    position = rm.change_feed.position  # a new session reads what changes from here
    plan, reads = _plan(apis, requested, version, replica_id, replica_epoch)
    topics, total, answer_now, short = _read(rm, plan, max_bytes, replica_id, isolation, {})
    # Kafka's DelayedFetch rule: answer at once on errors, enough bytes, or no wait.
    if reads and not answer_now and max_wait_ms > 0 and total < body.min_bytes:
        # The wait's last look read the partitions: the answer reuses those reads.
        found = await rm.wait_for_data(reads, body.min_bytes, max_wait_ms, replica_id, isolation)
        topics, total, answer_now, short = _read(rm, plan, max_bytes, replica_id, isolation, found)
    if create:
        now = rm.now_ms()
        cached = dict(kp for _, ps in requested for kp in ps)
        made = sessions.create(replica_id >= 0, version >= 13, cached, now)
        if made is not None:
            _remember(made, topics)
            made.feed_position = position
            made.scanned_brokers = apis.image().brokers
            made.full_scan_ms = now
            _index_session(made, plan, topics, short)
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


def _session_topics(parts: dict[Key, CachedPartition], keys: Iterable[Key]) -> Requested:
    """These partitions of a session, by topic (as Kafka's response)."""
    by_topic: dict[object, list[tuple[Key, CachedPartition]]] = {}
    for key in keys:
        p = parts.get(key)
        if p is not None:  # else forgotten
            by_topic.setdefault(key[0], []).append((key, p))
    return list(by_topic.items())


def _index_plan(session: FetchSession, plan: FetchPlan) -> None:
    """Each partition to read by (topic name, partition), for the change feed's marks
    (before the fetch waits on them)."""
    by_tp = session.by_tp
    for key, items in plan:
        for index, item in items:
            if not isinstance(item, int):
                by_tp[(item.topic, item.partition)] = (key, index)


def _index_session(
    session: FetchSession, plan: FetchPlan, topics: list[FetchTopicOut], short: list[Key]
) -> None:
    """After a read: the plan's partitions indexed (`_index_plan`) and the partitions the
    next fetch reads again whatever happens (errors are answered on every fetch, as
    Kafka; reads the byte budget cut)."""
    _index_plan(session, plan)
    recheck = set(short)
    for key, answered in topics:
        for index, r, _records in answered:
            if r.error_code:
                recheck.add((key, index))
    session.recheck = recheck


class SessionRead:
    """An incremental fetch's reads: only the partitions that may have news (the ones
    the request names, those marked in the change feed since the session's last fetch,
    its `recheck`), all of them after a broker change or every FULL_SCAN_MS (what
    nothing marks: an ISR expansion to try again, a log start moved by retention);
    a fetch that must wait parks on the feed and reads again what gets marked."""

    def __init__(
        self,
        apis: BrokerApis,
        session: FetchSession,
        version: int,
        replica_id: int,
        replica_epoch: int,
        isolation: int,
    ) -> None:
        self.apis = apis
        self.rm = apis.replica_manager
        self.session = session
        self.version = version
        self.replica_id = replica_id
        self.replica_epoch = replica_epoch
        self.isolation = isolation

    def _start(self, named: list[Key]) -> dict[Key, None]:
        s, feed, now = self.session, self.rm.change_feed, self.rm.now_ms()
        brokers = self.apis.image().brokers
        marked = feed.since(s.feed_position) if s.feed_position >= 0 else None
        s.feed_position = feed.position
        if (
            marked is None
            or s.scanned_brokers is not brokers
            or now - s.full_scan_ms >= FULL_SCAN_MS
        ):
            s.scanned_brokers, s.full_scan_ms = brokers, now
            s.by_tp.clear()
            return dict.fromkeys(s.partitions)
        keys = dict.fromkeys(named)
        keys.update(dict.fromkeys(s.recheck))
        by_tp = s.by_tp
        for tp in marked:
            if (key := by_tp.get(tp)) is not None:
                keys[key] = None
        return keys

    async def _marked(self, deadline: float) -> dict[Key, None] | None:
        """Wait until the feed marks one of the session's partitions (those keys), or
        the deadline (the loop's time; empty); None: the feed lost track, read all."""
        s, feed = self.session, self.rm.change_feed
        loop = asyncio.get_running_loop()
        while True:
            marked = feed.since(s.feed_position)
            s.feed_position = feed.position
            if marked is None:
                return None
            by_tp = s.by_tp
            new = {key: None for tp in marked if (key := by_tp.get(tp)) is not None}
            left = deadline - loop.time()
            if new or left <= 0:
                return new
            fut = feed.waiter()
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                pass
            finally:
                feed.discard(fut)

    async def run(
        self, named: list[Key], max_bytes: int, min_bytes: int, max_wait_ms: int
    ) -> list[FetchTopicOut]:
        s, rm = self.session, self.rm
        prev_ms = s.last_used_ms  # the session's previous fetch
        keys = self._start(named)
        fresh = set(named)
        deadline = asyncio.get_running_loop().time() + max(0, max_wait_ms) / 1000
        while True:
            requested = _session_topics(s.partitions, keys)
            plan, _ = _plan(self.apis, requested, self.version, self.replica_id,
                            self.replica_epoch)  # fmt: skip
            _index_plan(s, plan)  # marks of these partitions wake the wait below
            topics, total, answer_now, short = _read(
                rm, plan, max_bytes, self.replica_id, self.isolation, {}, prev_ms, fresh
            )
            # Kafka's DelayedFetch rule: answer at once on errors, enough bytes, no wait.
            if answer_now or total >= min_bytes or max_wait_ms <= 0:
                break
            new = await self._marked(deadline)
            if new is None:
                keys = dict.fromkeys(s.partitions)
            elif not new:
                break  # nothing of ours changed: the last read is the answer
            else:
                keys.update(new)
        _index_session(s, plan, topics, short)
        return topics


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
    prev_fetch_ms: int = -1,
    fresh: set[Key] | frozenset[Key] = frozenset(),
) -> tuple[list[FetchTopicOut], int, bool, list[Key]]:
    """One pass over the partitions in request order, within the response's byte budget.

    KIP-74: the first partition with data gets at least its first whole batch (the log
    returns it even past `max_bytes`); later partitions get what the budget leaves, cut
    to it (a partial trailing batch, which clients drop, exactly as Kafka sends).
    `found`: reads `wait_for_data` made of whole partitions (`max_bytes` each), used
    where the budget leaves a partition all of its `max_bytes`. `prev_fetch_ms`: the
    session's previous fetch, for the partitions the request did not name (`fresh`
    holds those it did; see `Partition.on_follower_fetch`). Also returns the
    partitions whose read the budget cut.
    """
    budget = max_bytes
    total = 0
    answer_now = False
    topics: list[FetchTopicOut] = []
    short: list[Key] = []
    for key, items in plan:
        parts: list[tuple[int, FetchResult, FileSlice | bytes | None]] = []
        for index, item in items:
            if isinstance(item, int):
                parts.append((index, FetchResult(item), None))
                answer_now = True
                continue
            limit = min(item.max_bytes, budget)
            prev = -1 if (key, index) in fresh else prev_fetch_ms
            try:
                if limit == item.max_bytes:
                    data = found.get(item) if found else None
                    r = rm.fetch(item, replica_id, isolation, data, prev)
                else:
                    short.append((key, index))
                    cut = dataclasses.replace(item, max_bytes=limit)
                    r = rm.fetch(cut, replica_id, isolation, None, prev)
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
    return topics, total, answer_now, short


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
