"""Follower fetchers: pull replication from partition leaders over the Kafka protocol.

One fetcher task per source broker (as Kafka's ReplicaFetcherThread), one connection,
one Fetch v15 request at a time for all the partitions it follows there, carrying our
replica id and broker epoch (KIP-903: the leader refuses fetches of a dead incarnation
and never adds it to the ISR), the current leader epoch and the last fetched epoch
(KIP-320) so the leader can tell us where our log diverges. Only I/O lives here: what
an answer means for a partition (append, truncate, HW) is the replica manager's
`process_follower_data`.

Fetches go through a fetch session (KIP-227, `fetch_session.ClientSession`): after the
first full fetch, a request carries only the partitions whose state changed (an append
moved the fetch offset) and the leader answers only those with news (records, a new HW
or log start, an error), so idle partitions cost nothing per round trip. A lost session
(the leader restarted or evicted it) is replaced by a full fetch at once. A round
looks only at the partitions whose state may have moved (answered, added, removed,
done resting), and at all of them every FULL_REFRESH_MS: its cost is what changed, not
the thousands of partitions a fetcher follows at scale.

Requests are encoded with kio; answers are decoded by hand (broker/fetch_wire.py) with each
partition's records a view into the response frame: the log appends from it, so the
bytes are not copied between the socket buffer and the page cache, and their CRCs are
checked once, by the log's `append_as_follower`.

Removing a partition waits for the answer being applied (if any) to finish, so the
replica manager can change a partition's role without racing its fetcher.

Leaders are reached on their `inter.broker.listener.name` endpoint, with that listener's
TLS context and SASL login (broker/security/inter_broker_login.py); a refused login is
retried with the usual backoff, like any other connection failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import itertools
import logging
import re
import uuid
from collections.abc import Callable, Iterable
from typing import Protocol

from broker.connection import FrameReceiver
from broker.fetch_session import ClientSession
from broker.fetch_wire import (
    FETCH_VERSION,
    DecodedFetch,
    FetcherConfig,
    FollowerData,
    FollowerFetchState,
    _uuid,
    decode_fetch,
    encode_fetch,
)
from broker.security.inter_broker_login import connect
from broker.security.listener_security import InterBrokerClientSecurity
from broker.shutdownable import ShutdownableTask
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors

# The wire side lives in broker/fetch_wire.py; these names are the fetcher's interface.
__all__ = [
    "FETCH_VERSION",
    "DecodedFetch",
    "FetcherConfig",
    "FetcherManager",
    "FollowerData",
    "FollowerFetchState",
    "LeaderFetcher",
    "ReplicaTarget",
    "decode_fetch",
    "encode_fetch",
]

log = logging.getLogger("broker.fetcher")

TP = tuple[str, int]
THROTTLE_CHECK_MS = 100  # how often a throttled partition looks at its quota again
FULL_REFRESH_MS = 2_000  # how often a fetcher looks at every partition's fetch state


class ReplicaTarget(Protocol):
    # Optional: `follower_quota` (broker.replication_quota.ReplicationQuota), the byte rate
    # of the throttled partitions; read with getattr, absent means unthrottled.
    def follower_fetch_state(self, tp: TP) -> FollowerFetchState | None: ...
    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None: ...
    async def process_follower_data(
        self, tp: TP, sent: FollowerFetchState, data: FollowerData
    ) -> int: ...


# Answers that mean our session is gone or out of step: start a new one at once.
SESSION_ERRORS = frozenset(
    {
        Errors.FETCH_SESSION_ID_NOT_FOUND,
        Errors.INVALID_FETCH_SESSION_EPOCH,
        Errors.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


class LeaderFetcher:
    """Fetches every partition we follow on one source broker."""

    def __init__(
        self,
        broker_id: int,
        source_id: int,
        target: ReplicaTarget,
        cfg: FetcherConfig,
        broker_epoch: Callable[[], int],
        clock: Clock = SYSTEM_CLOCK,
        security: InterBrokerClientSecurity | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.security = security
        self.source_id = source_id
        self.target = target
        self.cfg = cfg
        self.clock = clock
        self.partitions: dict[TP, int] = {}  # tp -> clock ms before which it rests
        # What the next fetch asks for each partition, kept between rounds: a round
        # looks again only at `_dirty` (answered, added, removed) and `_resting` ones
        # whose rest is over, so it costs what changed, not every partition followed.
        self._ready: dict[TP, FollowerFetchState] = {}
        self._dirty: set[TP] = set()
        self._resting: dict[TP, int] = {}
        self._full_at = 0  # clock ms of the next look at every partition
        self._names: dict[uuid.UUID, str] = {}  # topic names by id, for decoding answers
        self.lock = asyncio.Lock()  # held while an answer is applied
        self._wake = asyncio.Event()
        self._correlation = itertools.count(1)
        self._reader: FrameReceiver | None = None
        self._writer: asyncio.StreamWriter | None = None
        # KIP-227: only partitions whose state changed are sent.
        self.session: ClientSession[TP, FollowerFetchState] = ClientSession()
        self.client_id = f"broker-{broker_id}-fetcher"
        self._loop = ShutdownableTask(f"fetcher-{source_id}", self._run)
        # Told the source's id when a connection to it is refused: its process is gone
        # while its host is up (broker/lifecycle.py reports it to the controller).
        self.on_refused: Callable[[int], None] | None = None

    def start(self) -> None:
        self._loop.start()

    def add(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.partitions[tp] = 0
            self._dirty.add(tp)
        self._wake.set()

    async def stop(self) -> None:
        await self._loop.stop()
        self._close()

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
        # An answer may have been lost with the connection: the next fetch is full and
        # replaces the session.
        self.session.reset(close_existing=True)

    async def _connect(self) -> None:
        endpoint = self.target.leader_endpoint(self.source_id)
        if endpoint is None:
            raise ConnectionError(f"no endpoint known for broker {self.source_id}")
        async with asyncio.timeout(self.cfg.socket_timeout_ms / 1000):
            reader, self._writer = await connect(
                *endpoint, self.security, f"broker-{self.broker_id}-fetcher"
            )
        # From here frames are read straight into their buffers (no StreamReader
        # copies); what the login left unread (nothing, in lock-step) is kept.
        leftover = bytes(getattr(reader, "_buffer", b""))
        self._reader = FrameReceiver(2 * self.cfg.max_bytes + (1 << 20), leftover)
        self._writer.transport.set_protocol(self._reader)

    def discard(self, tp: TP) -> None:
        """Stop fetching `tp` (the caller holds `lock`)."""
        self.partitions.pop(tp, None)
        self._dirty.add(tp)

    def _state(self, tp: TP, now: int, throttle: bool) -> FollowerFetchState | None:
        """What the next fetch asks for `tp`, or None to leave it out (resting, not a
        follower here now, throttled)."""
        rest_until = self.partitions.get(tp)
        if rest_until is None:
            return None
        if rest_until > now:
            self._resting[tp] = rest_until
            return None
        self._resting.pop(tp, None)
        st = self.target.follower_fetch_state(tp)
        if st is None:
            return None
        if throttle and st.throttled:
            # Kafka's follower throttle: left out while the quota is exceeded.
            self.partitions[tp] = self._resting[tp] = now + THROTTLE_CHECK_MS
            return None
        self._names.setdefault(_uuid(st.topic_id), tp[0])
        return st

    def _refresh(self, now: int, throttle: bool) -> set[TP] | None:
        """Bring `_ready` up to date: the partitions whose state may have moved (their
        answer was applied, added, removed, done resting), or every one of them each
        FULL_REFRESH_MS (what no answer tells us: a retention-moved log start, a
        throttle). Returns the partitions it looked at (None: all)."""
        ready = self._ready
        if now >= self._full_at:
            self._full_at = now + FULL_REFRESH_MS
            self._dirty.clear()
            self._resting.clear()
            self._ready = {}
            for tp in self.partitions:
                if (st := self._state(tp, now, throttle)) is not None:
                    self._ready[tp] = st
            return None
        dirty, self._dirty = self._dirty, set()
        dirty.update(tp for tp, t in self._resting.items() if t <= now)
        for tp in dirty:
            st = self._state(tp, now, throttle)
            if st is None:
                ready.pop(tp, None)
            else:
                ready[tp] = st
        return dirty

    async def _run(self) -> None:
        clock = self.clock
        backoff = 0.05
        while not self._loop.stopping:
            now = clock.monotonic_ms()
            quota = getattr(self.target, "follower_quota", None)
            throttle = quota is not None and quota.is_exceeded(now)
            touched = self._refresh(now, throttle)
            ready = self._ready
            if not ready:
                pending = list(self._resting.values())
                wait = (min(pending) - now) / 1000 if pending else 1.0
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.01, wait)):
                        await self._wake.wait()
                continue
            try:
                answers = await self._fetch(ready, touched)
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # network errors, a bad frame: reconnect and retry
                if _refused(exc) and self.on_refused is not None:
                    self.on_refused(self.source_id)
                log.info(
                    "fetch from broker %d failed: %r; retrying in %.2fs",
                    self.source_id,
                    exc,
                    backoff,
                )
                self._close()
                await clock.sleep(backoff)
                backoff = min(self.cfg.backoff_ms / 1000, backoff * 2)
                continue
            if quota is not None:
                quota.record(
                    sum(
                        len(d.records or b"")
                        for tp, d in answers.items()
                        if tp in ready and ready[tp].throttled
                    ),
                    clock.monotonic_ms(),
                )
            async with self.lock:
                for tp, data in answers.items():
                    sent = ready.get(tp)
                    if tp not in self.partitions or sent is None:
                        continue  # removed while the request was out
                    self._dirty.add(tp)  # its state moves with the answer
                    try:
                        code = await self.target.process_follower_data(tp, sent, data)
                    except Exception:
                        log.exception("applying fetched data to %s-%d failed", *tp)
                        code = Errors.UNKNOWN_SERVER_ERROR
                    if code:
                        self.partitions[tp] = clock.monotonic_ms() + self.cfg.backoff_ms

    async def _fetch(
        self, ready: dict[TP, FollowerFetchState], touched: set[TP] | None = None
    ) -> dict[TP, FollowerData]:
        """One fetch for `ready`; `touched`: the only partitions whose state may differ
        from the session's (None: any)."""
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        cid = next(self._correlation) & 0x7FFFFFFF
        session, send, gone = self.session.request(ready, touched)
        forgotten = [(self.session.sent[tp].topic_id, tp[1]) for tp in gone]
        frame = encode_fetch(
            cid,
            self.client_id,
            self.broker_id,
            self.broker_epoch(),
            self.cfg,
            send,
            session,
            forgotten,
        )
        self._writer.write(frame)
        await self._writer.drain()
        async with asyncio.timeout((self.cfg.max_wait_ms + self.cfg.socket_timeout_ms) / 1000):
            body = await self._reader.read_frame()
        for tp, st in send.items():
            self._names.setdefault(_uuid(st.topic_id), tp[0])
        answer = decode_fetch(body, self._names)
        if answer.correlation_id != cid:
            raise ConnectionError(f"correlation id {answer.correlation_id} does not match {cid}")
        if answer.error_code in SESSION_ERRORS:
            # The leader evicted or lost our session (a restart): start a new one now.
            log.info(
                "fetch session %d with broker %d ended: %s",
                session[0],
                self.source_id,
                Errors(answer.error_code).name,
            )
            self.session.reset(close_existing=False)
            return {}
        if answer.error_code:
            raise ConnectionError(
                f"broker {self.source_id} answered fetch with error {answer.error_code}"
            )
        self.session.answered(answer.session_id, ready, (send, gone))
        return {tp: d for tp, d in answer.answers.items() if tp in ready}


def _refused(exc: BaseException) -> bool:
    """ECONNREFUSED, also as asyncio's "Multiple exceptions" when every address refused."""
    if isinstance(exc, ConnectionRefusedError):
        return True
    errnos = re.findall(r"\[Errno (\d+)\]", str(exc)) if isinstance(exc, OSError) else []
    return bool(errnos) and all(int(n) == errno.ECONNREFUSED for n in errnos)


class FetcherManager:
    """Fetchers by source broker; partitions move between them as leaders change."""

    def __init__(
        self,
        broker_id: int,
        cfg: FetcherConfig | None = None,
        broker_epoch: Callable[[], int] = lambda: -1,
        clock: Clock = SYSTEM_CLOCK,
        security: InterBrokerClientSecurity | None = None,
    ) -> None:
        self.broker_id = broker_id
        self.security = security  # how we connect to leaders (TLS, SASL), None: PLAINTEXT
        self.cfg = cfg or FetcherConfig()
        self.broker_epoch = broker_epoch  # named in each fetch (KIP-903)
        self.clock = clock
        self.target: ReplicaTarget | None = None
        self._fetchers: dict[int, LeaderFetcher] = {}
        self._source_of: dict[TP, int] = {}
        self.on_refused: Callable[[int], None] | None = None  # see LeaderFetcher.on_refused

    def add_partitions(self, leaders: dict[TP, int]) -> None:
        assert self.target is not None, "set FetcherManager.target first"
        by_source: dict[int, list[TP]] = {}
        for tp, leader in leaders.items():
            by_source.setdefault(leader, []).append(tp)
            self._source_of[tp] = leader
        for source, tps in by_source.items():
            fetcher = self._fetchers.get(source)
            if fetcher is None:
                fetcher = LeaderFetcher(
                    self.broker_id,
                    source,
                    self.target,
                    self.cfg,
                    self.broker_epoch,
                    self.clock,
                    self.security,
                )
                fetcher.on_refused = self.on_refused
                self._fetchers[source] = fetcher
                fetcher.start()
            fetcher.add(tps)

    async def remove_partitions(self, tps: Iterable[TP]) -> None:
        by_source: dict[int, list[TP]] = {}
        for tp in tps:
            source = self._source_of.pop(tp, None)
            if source is not None:
                by_source.setdefault(source, []).append(tp)
        for source, gone in by_source.items():
            fetcher = self._fetchers.get(source)
            if fetcher is None:
                continue
            async with fetcher.lock:  # no answer is being applied to them after this
                for tp in gone:
                    fetcher.discard(tp)
            if not fetcher.partitions:
                del self._fetchers[source]
                await fetcher.stop()

    async def shutdown(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._source_of.clear()
        for f in fetchers:
            await f.stop()
