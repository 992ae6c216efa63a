"""Fetch sessions (KIP-227), sans I/O: Kafka's FetchSession.scala.

A client (consumer or follower) that sends Fetch v7+ with session id 0 and epoch 0 asks
for a session: the broker answers the full fetch with a new session id, and remembers
each partition's fetch position and what it last told the client (HW, log start).
Later fetches name (session id, epoch) and carry only the partitions whose position
changed (and `forgotten_topics_data`: those to drop); the broker reads every partition
of the session and answers only those with news: records, an error, a diverging epoch,
or a HW / log start offset the client has not seen. A follower of 1,000 idle partitions
then sends and receives a few bytes per fetch instead of 1,000 partition entries.

The request's (session id, epoch) select the context, as Kafka's FetchManager.newContext:
- (0, -1): sessionless full fetch; (X, -1): close session X, then a sessionless one;
- (0, 0): full fetch creating a session (when the cache has or can free a slot);
  (X, 0): close X, then as (0, 0);
- (X, n > 0): incremental: FETCH_SESSION_ID_NOT_FOUND when X is unknown (evicted),
  INVALID_FETCH_SESSION_EPOCH when n is not the epoch X expects, and
  FETCH_SESSION_TOPIC_ID_ERROR when X was made with topic names and this fetch uses ids
  (or the reverse).

The cache holds `max.incremental.fetch.session.cache.slots` sessions (default 1000).
When full, a new session takes a slot from (Kafka's FetchSessionCache.tryEvict): the
least recently used session idle for more than `eviction_ms` (120 s, Kafka's
MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS); else the lowest-ranked evictable session if
it ranks no higher than the new one, ranked by (privileged, partition count, id).
Follower sessions are privileged; a session may be evicted by a follower's new session
if it is a client's or older than `eviction_ms`, and by a client's only if it is older
than `eviction_ms`.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common.errors import Errors

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_CACHE_SLOTS = 1000  # max.incremental.fetch.session.cache.slots
EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
INT32_MAX = 2**31 - 1

# A partition's key in a session: (topic name or topic id, partition).
Key = tuple[object, int]


def next_epoch(epoch: int) -> int:
    """Kafka's FetchMetadata.nextEpoch: epochs run 1 .. INT32_MAX, then wrap to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


@dataclass(slots=True)
class CachedPartition:
    """A session's partition: the position the client last sent, and what the broker
    last told it (-1: nothing yet, so the next answer includes it)."""

    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # the client's (followers name theirs)
    high_watermark: int = -1  # the HW last sent
    leader_log_start: int = -1  # the log start offset last sent

    def must_respond(
        self, error_code: int, hw: int, log_start: int, has_records: bool, other: bool
    ) -> bool:
        """Kafka's CachedPartition.maybeUpdateResponseData: whether an incremental
        answer includes the partition, remembering what it tells. `other`: a diverging
        epoch or a preferred read replica, always told."""
        respond = has_records or other
        if hw != self.high_watermark:
            self.high_watermark = hw
            respond = True
        if log_start != self.leader_log_start:
            self.leader_log_start = log_start
            respond = True
        if error_code:
            # Re-sent once the error goes away: the cached HW is forgotten.
            self.high_watermark = -1
            respond = True
        return respond


@dataclass(eq=False)
class FetchSession:
    id: int
    privileged: bool  # a follower's
    uses_topic_ids: bool
    created_ms: int
    last_used_ms: int
    epoch: int = 1  # the epoch the next incremental fetch must carry
    partitions: dict[Key, CachedPartition] = field(default_factory=dict)
    # What an incremental fetch reads (broker/change_feed.py): the partitions marked in
    # the broker's change feed since `feed_position` (-1: read all), found by (topic
    # name, partition) in `by_tp`, plus `recheck` (errors, reads the byte budget cut)
    # and the request's own; all of them after a broker change or every FULL_SCAN_MS.
    feed_position: int = -1
    by_tp: dict[tuple[str, int], Key] = field(default_factory=dict)
    recheck: set[Key] = field(default_factory=set)
    scanned_brokers: object = None
    full_scan_ms: int = 0

    def rank(self) -> tuple[bool, int, int]:
        return (self.privileged, len(self.partitions), self.id)

    def update(
        self, changed: Iterable[tuple[Key, CachedPartition]], forgotten: Iterable[Key]
    ) -> None:
        """An incremental fetch's partitions (added or moved) and forgotten ones."""
        parts = self.partitions
        for key, p in changed:
            old = parts.get(key)
            if old is None:
                parts[key] = p
            else:  # the position moves; what we last told the client stays
                old.fetch_offset = p.fetch_offset
                old.max_bytes = p.max_bytes
                old.current_leader_epoch = p.current_leader_epoch
                old.last_fetched_epoch = p.last_fetched_epoch
                old.log_start_offset = p.log_start_offset
        for key in forgotten:
            parts.pop(key, None)

    def rotate(self, answered: list[Key]) -> None:
        """Partitions just answered go to the end (Kafka's fairness rule: the next
        fetch's byte budget serves the others first)."""
        parts = self.partitions
        for key in answered:
            p = parts.pop(key, None)
            if p is not None:
                parts[key] = p


class SessionError(Exception):
    def __init__(self, error_code: int) -> None:
        super().__init__(Errors(error_code).name)
        self.error_code = error_code


class FetchSessionCache:
    """The broker's fetch sessions, by id (one cache per broker, shared by listeners)."""

    def __init__(
        self,
        max_slots: int = DEFAULT_CACHE_SLOTS,
        eviction_ms: int = EVICTION_MS,
        rng: random.Random | None = None,
    ) -> None:
        self.max_slots = max_slots
        self.eviction_ms = eviction_ms
        self._sessions: dict[int, FetchSession] = {}  # in last-used order (oldest first)
        self._rng = rng or random.Random()
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> FetchSession | None:
        return self._sessions.pop(session_id, None)

    def incremental(self, session_id: int, epoch: int, uses_topic_ids: bool) -> FetchSession:
        """The session an incremental fetch names, checked; its epoch moves on."""
        s = self._sessions.get(session_id)
        if s is None:
            raise SessionError(Errors.FETCH_SESSION_ID_NOT_FOUND)
        if s.epoch != epoch:
            raise SessionError(Errors.INVALID_FETCH_SESSION_EPOCH)
        if s.uses_topic_ids != uses_topic_ids:
            raise SessionError(Errors.FETCH_SESSION_TOPIC_ID_ERROR)
        s.epoch = next_epoch(s.epoch)
        return s

    def touch(self, s: FetchSession, now_ms: int) -> None:
        s.last_used_ms = now_ms
        if self._sessions.get(s.id) is s:  # to the end of the last-used order
            del self._sessions[s.id]
            self._sessions[s.id] = s

    def create(
        self,
        privileged: bool,
        uses_topic_ids: bool,
        partitions: dict[Key, CachedPartition],
        now_ms: int,
    ) -> FetchSession | None:
        """A new session for a full fetch's partitions, or None when no slot is free
        and none may be taken (the fetch is then answered without a session)."""
        if len(self._sessions) >= self.max_slots and not self._try_evict(
            (privileged, len(partitions), 0), privileged, now_ms
        ):
            return None
        sid = self._new_id()
        s = FetchSession(sid, privileged, uses_topic_ids, now_ms, now_ms, 1, partitions)
        self._sessions[sid] = s
        return s

    def _new_id(self) -> int:
        for _ in itertools.count():
            sid = self._rng.randint(1, INT32_MAX)
            if sid not in self._sessions:
                return sid
        raise AssertionError("unreachable")

    def _try_evict(self, rank: tuple[bool, int, int], privileged: bool, now_ms: int) -> bool:
        if not self._sessions:
            return False
        oldest = next(iter(self._sessions.values()))
        if now_ms - oldest.last_used_ms > self.eviction_ms:
            del self._sessions[oldest.id]
            self.evictions += 1
            return True
        # Evictable by anyone: sessions older than eviction_ms; by a follower's new
        # session, also any client's session.
        old_enough = [
            s
            for s in self._sessions.values()
            if now_ms - s.created_ms > self.eviction_ms or (privileged and not s.privileged)
        ]
        if not old_enough:
            return False
        victim = min(old_enough, key=FetchSession.rank)
        if rank < victim.rank():
            return False
        del self._sessions[victim.id]
        self.evictions += 1
        return True


# -- the client side (our follower fetcher) -----------------------------------------------------

K = TypeVar("K", bound=Hashable)
S = TypeVar("S")


class ClientSession(Generic[K, S]):
    """A fetcher's side of a session with one leader (Kafka's FetchSessionHandler):
    each partition's fetch state as we last sent it, so the next fetch carries only
    those whose state changed and forgets those we no longer fetch."""

    def __init__(self) -> None:
        self.id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH  # the next fetch is full and asks for a (new) session
        self.sent: dict[K, S] = {}

    def request(
        self, ready: dict[K, S], touched: Iterable[K] | None = None
    ) -> tuple[tuple[int, int], dict[K, S], list[K]]:
        """((session id, epoch), the partitions to send, the ones to forget).
        `touched`: the only partitions whose state may differ from what was sent (None:
        compare them all); a fetcher of thousands of partitions knows which moved."""
        if self.epoch == INITIAL_EPOCH:
            return (self.id, INITIAL_EPOCH), ready, []
        sent = self.sent
        if touched is None:
            changed = {k: st for k, st in ready.items() if sent.get(k) != st}
            return (self.id, self.epoch), changed, [k for k in sent if k not in ready]
        changed = {}
        gone = []
        for k in touched:
            st = ready.get(k)
            if st is None:
                if k in sent:
                    gone.append(k)
            elif sent.get(k) != st:
                changed[k] = st
        return (self.id, self.epoch), changed, gone

    def answered(
        self,
        session_id: int,
        ready: dict[K, S],
        sent: tuple[dict[K, S], list[K]] | None = None,
    ) -> None:
        """The leader answered the fetch built from `ready` without error; `sent`: the
        (changed, forgotten) partitions `request` gave (None: take `ready` whole)."""
        if self.epoch == INITIAL_EPOCH:
            self.id = session_id
            # No session (no slot for us): full fetches go on, each asking again.
            self.epoch = 1 if session_id != INVALID_SESSION_ID else INITIAL_EPOCH
            self.sent = dict(ready)
            return
        if session_id != self.id:  # the leader ended it (an error answer): start again
            self.reset(close_existing=False)
            return
        self.epoch = next_epoch(self.epoch)
        if sent is None:
            self.sent = dict(ready)
            return
        changed, gone = sent
        self.sent.update(changed)
        for k in gone:
            self.sent.pop(k, None)

    def reset(self, close_existing: bool) -> None:
        """The next fetch is full: it replaces our session (`close_existing`, e.g. after
        a lost connection) or starts from none (the leader no longer knows it)."""
        if not close_existing:
            self.id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.sent = {}
