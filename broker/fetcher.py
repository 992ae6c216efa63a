"""Follower fetchers: pull replication from partition leaders over the Kafka protocol.

One fetcher task per source broker (as Kafka's ReplicaFetcherThread), one connection,
one Fetch v15 request at a time for all the partitions it follows there, carrying our
replica id and broker epoch (KIP-903: the leader refuses fetches of a dead incarnation
and never adds it to the ISR), the current leader epoch and the last fetched epoch
(KIP-320) so the leader can tell us where our log diverges. Only I/O lives here: what
an answer means for a partition (append, truncate, HW) is the replica manager's
`process_follower_data`. Requests are encoded and answers decoded with kio.

Removing a partition waits for the answer being applied (if any) to finish, so the
replica manager can change a partition's role without racing its fetcher.

Leaders are reached on their `inter.broker.listener.name` endpoint, with that listener's
TLS context and SASL login (broker/security/inter_broker_login.py); a refused login is
retried with the usual backoff, like any other connection failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import errno
import io
import itertools
import logging
import re
import struct
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

from kio.schema.fetch.v15.request import FetchPartition, FetchRequest, FetchTopic, ReplicaState
from kio.schema.fetch.v15.response import FetchResponse
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.response_header.v1.header import ResponseHeader
from kio.schema.types import BrokerId
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32, i64

from broker.security.inter_broker_login import connect
from broker.security.listener_security import InterBrokerClientSecurity
from broker.shutdownable import ShutdownableTask
from common.api_keys import ApiKey
from common.clock import SYSTEM_CLOCK, Clock
from common.errors import Errors

log = logging.getLogger("broker.fetcher")

TP = tuple[str, int]
FETCH_VERSION = 15  # topic ids, last fetched epoch, diverging epoch, broker epoch (KIP-903)
_SIZE = struct.Struct(">i")
THROTTLE_CHECK_MS = 100  # how often a throttled partition looks at its quota again

_write_header = entity_writer(RequestHeader)
_write_request = entity_writer(FetchRequest)
_read_header = entity_reader(ResponseHeader)
_read_response = entity_reader(FetchResponse)


@dataclass(frozen=True, slots=True)
class FollowerFetchState:
    """What the next fetch for a partition asks for."""

    leader_epoch: int
    fetch_offset: int  # our LEO
    last_fetched_epoch: int  # epoch of our last batch (-1: none)
    log_start_offset: int
    topic_id: str = ""  # the topic's UUID (Fetch v13+ names topics by id)
    throttled: bool = False  # a replica being added: follower.replication.throttled.rate


@dataclass(frozen=True, slots=True)
class FollowerData:
    """The leader's answer for one partition."""

    error_code: int
    high_watermark: int = -1
    log_start_offset: int = -1
    records: bytes | None = None
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)


class ReplicaTarget(Protocol):
    # Optional: `follower_quota` (broker.replication_quota.ReplicationQuota), the byte rate
    # of the throttled partitions; read with getattr, absent means unthrottled.
    def follower_fetch_state(self, tp: TP) -> FollowerFetchState | None: ...
    def leader_endpoint(self, broker_id: int) -> tuple[str, int] | None: ...
    async def process_follower_data(
        self, tp: TP, sent: FollowerFetchState, data: FollowerData
    ) -> int: ...


@dataclass(frozen=True)
class FetcherConfig:
    max_wait_ms: int = 500  # replica.fetch.wait.max.ms
    min_bytes: int = 1  # replica.fetch.min.bytes
    max_bytes: int = 10 * 1024 * 1024  # replica.fetch.response.max.bytes
    partition_max_bytes: int = 1024 * 1024  # replica.fetch.max.bytes
    backoff_ms: int = 1000  # replica.fetch.backoff.ms
    socket_timeout_ms: int = 30_000  # replica.socket.timeout.ms


def encode_fetch(
    correlation_id: int,
    client_id: str,
    replica_id: int,
    broker_epoch: int,
    cfg: FetcherConfig,
    partitions: dict[TP, FollowerFetchState],
) -> bytes:
    by_topic: dict[uuid.UUID, list[FetchPartition]] = {}
    for (_topic, p), st in partitions.items():
        by_topic.setdefault(uuid.UUID(st.topic_id), []).append(
            FetchPartition(
                partition=i32(p),
                current_leader_epoch=i32(st.leader_epoch),
                fetch_offset=i64(st.fetch_offset),
                last_fetched_epoch=i32(st.last_fetched_epoch),
                log_start_offset=i64(st.log_start_offset),
                partition_max_bytes=i32(cfg.partition_max_bytes),
            )
        )
    req = FetchRequest(
        replica_state=ReplicaState(
            replica_id=BrokerId(replica_id), replica_epoch=i64(broker_epoch)
        ),
        max_wait=datetime.timedelta(milliseconds=cfg.max_wait_ms),
        min_bytes=i32(cfg.min_bytes),
        max_bytes=i32(cfg.max_bytes),
        topics=tuple(FetchTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=(),
    )
    buf = io.BytesIO()
    buf.write(b"\0\0\0\0")
    _write_header(
        buf,
        RequestHeader(
            request_api_key=i16(ApiKey.FETCH),
            request_api_version=i16(FETCH_VERSION),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        ),
    )
    _write_request(buf, req)
    out = buf.getbuffer()
    _SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def decode_fetch(
    frame: bytes, names: dict[uuid.UUID | None, str]
) -> tuple[int, int, dict[TP, FollowerData]]:
    """(correlation id, top-level error code, answers by partition); `names`: topic
    names by the ids the request used (an id we did not ask for is ignored)."""
    header, n = _read_header(frame, 0)
    resp, _ = _read_response(frame, n)
    out: dict[TP, FollowerData] = {}
    for t in resp.responses:
        name = names.get(t.topic_id)
        if name is None:
            continue
        for p in t.partitions:
            d = p.diverging_epoch
            out[(name, int(p.partition_index))] = FollowerData(
                int(p.error_code),
                int(p.high_watermark),
                int(p.log_start_offset),
                bytes(p.records) if p.records else None,
                (int(d.epoch), int(d.end_offset)) if d.epoch >= 0 or d.end_offset >= 0 else None,
            )
    return int(header.correlation_id), int(resp.error_code), out


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
        self.lock = asyncio.Lock()  # held while an answer is applied
        self._wake = asyncio.Event()
        self._correlation = itertools.count(1)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._loop = ShutdownableTask(f"fetcher-{source_id}", self._run)
        # Told the source's id when a connection to it is refused: its process is gone
        # while its host is up (broker/lifecycle.py reports it to the controller).
        self.on_refused: Callable[[int], None] | None = None

    def start(self) -> None:
        self._loop.start()

    def add(self, tps: Iterable[TP]) -> None:
        for tp in tps:
            self.partitions[tp] = 0
        self._wake.set()

    async def stop(self) -> None:
        await self._loop.stop()
        self._close()

    def _close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None

    async def _connect(self) -> None:
        endpoint = self.target.leader_endpoint(self.source_id)
        if endpoint is None:
            raise ConnectionError(f"no endpoint known for broker {self.source_id}")
        async with asyncio.timeout(self.cfg.socket_timeout_ms / 1000):
            self._reader, self._writer = await connect(
                *endpoint, self.security, f"broker-{self.broker_id}-fetcher"
            )

    async def _run(self) -> None:
        clock = self.clock
        backoff = 0.05
        while not self._loop.stopping:
            now = clock.monotonic_ms()
            quota = getattr(self.target, "follower_quota", None)
            throttle = quota is not None and quota.is_exceeded(now)
            ready: dict[TP, FollowerFetchState] = {}
            for tp, rest_until in self.partitions.items():
                if rest_until <= now and (st := self.target.follower_fetch_state(tp)) is not None:
                    if throttle and st.throttled:
                        # Kafka's follower throttle: left out while the quota is exceeded.
                        self.partitions[tp] = now + THROTTLE_CHECK_MS
                        continue
                    ready[tp] = st
            if not ready:
                pending = [t for t in self.partitions.values() if t > now]
                wait = (min(pending) - now) / 1000 if pending else 1.0
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.01, wait)):
                        await self._wake.wait()
                continue
            try:
                answers = await self._fetch(ready)
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
                    if tp not in self.partitions:
                        continue  # removed while the request was out
                    try:
                        code = await self.target.process_follower_data(tp, ready[tp], data)
                    except Exception:
                        log.exception("applying fetched data to %s-%d failed", *tp)
                        code = Errors.UNKNOWN_SERVER_ERROR
                    if code:
                        self.partitions[tp] = clock.monotonic_ms() + self.cfg.backoff_ms

    async def _fetch(self, ready: dict[TP, FollowerFetchState]) -> dict[TP, FollowerData]:
        if self._writer is None:
            await self._connect()
        assert self._reader is not None and self._writer is not None
        cid = next(self._correlation) & 0x7FFFFFFF
        frame = encode_fetch(
            cid,
            f"broker-{self.broker_id}-fetcher",
            self.broker_id,
            self.broker_epoch(),
            self.cfg,
            ready,
        )
        self._writer.write(frame)
        await self._writer.drain()
        async with asyncio.timeout((self.cfg.max_wait_ms + self.cfg.socket_timeout_ms) / 1000):
            (size,) = _SIZE.unpack(await self._reader.readexactly(4))
            if size < 0 or size > 2 * self.cfg.max_bytes + (1 << 20):
                raise ConnectionError(f"broker {self.source_id} sent a {size}-byte frame")
            body = await self._reader.readexactly(size)
        got, error, answers = decode_fetch(
            body, {uuid.UUID(st.topic_id): tp[0] for tp, st in ready.items()}
        )
        if got != cid:
            raise ConnectionError(f"correlation id {got} does not match {cid}")
        if error:
            raise ConnectionError(f"broker {self.source_id} answered fetch with error {error}")
        return answers


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
                    fetcher.partitions.pop(tp, None)
            if not fetcher.partitions:
                del self._fetchers[source]
                await fetcher.stop()

    async def shutdown(self) -> None:
        fetchers, self._fetchers = list(self._fetchers.values()), {}
        self._source_of.clear()
        for f in fetchers:
            await f.stop()
