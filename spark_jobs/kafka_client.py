"""A small blocking Kafka client for the Spark source: Metadata, ListOffsets, Fetch.

The source needs only these three calls, on the driver (planning) and in executors
(reading one offset range). Requests are encoded and answers decoded with kio; one
socket per broker, opened lazily. Objects of this module never travel to executors:
each `read()` opens its own client, as the Python Data Source API requires.

Retries: a call that meets a retriable error (a broker gone, NOT_LEADER_OR_FOLLOWER,
LEADER_NOT_AVAILABLE, ...) refreshes metadata and tries again with a short backoff,
until `api_timeout_ms` is spent; then it raises `KafkaCallError` naming the last cause.
Only the caller decides what an answer means; nothing here is ever silently dropped.
"""

from __future__ import annotations

import datetime
import io
import itertools
import re
import socket
import ssl
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.schema.list_offsets.v7.request import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from kio.schema.list_offsets.v7.response import ListOffsetsResponse
from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic
from kio.schema.metadata.v12.response import MetadataResponse
from kio.schema.sasl_authenticate.v2.request import SaslAuthenticateRequest
from kio.schema.sasl_authenticate.v2.response import SaslAuthenticateResponse
from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest
from kio.schema.sasl_handshake.v1.response import SaslHandshakeResponse
from kio.schema.types import BrokerId, TopicName
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i8, i16, i32, i64

from common.errors import Errors
from common.sasl_client import SaslClientError, sasl_client
from common.varint import read_uvarint, skip_tagged_fields
from spark_jobs.security import ClientSecurity

TP = tuple[str, int]
T = TypeVar("T")

_SIZE = struct.Struct(">i")
_READERS: dict[type, Callable[[bytes, int], tuple[Any, int]]] = {
    cls: entity_reader(cls)
    for cls in (
        MetadataResponse,
        ListOffsetsResponse,
        SaslHandshakeResponse,
        SaslAuthenticateResponse,
    )
}
RETRY_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms


class KafkaCallError(RuntimeError):
    """A call that did not succeed within its deadline, or failed for good."""


class RetriableError(Exception):
    """An answer worth another try after a metadata refresh."""


@dataclass(frozen=True)
class PartitionInfo:
    leader: int  # -1: none right now
    leader_epoch: int


@dataclass
class ClusterMetadata:
    brokers: dict[int, tuple[str, int]]
    partitions: dict[TP, PartitionInfo]
    internal_topics: set[str]
    topic_errors: dict[str, Errors]

    def topics(self) -> set[str]:
        return {t for t, _ in self.partitions}


@dataclass(frozen=True)
class FetchedPartition:
    error: Errors
    high_watermark: int
    log_start_offset: int
    records: bytes | memoryview
    last_stable_offset: int = -1
    # read_committed: (producer id, first offset) of the aborted transactions the
    # records overlap (Fetch's aborted_transactions; None from the broker is empty)
    aborted: tuple[tuple[int, int], ...] = ()


class AuthenticationError(KafkaCallError):
    """The broker refused our credentials (or its TLS certificate was not trusted)."""


class BrokerConnection:
    """One socket to one broker; request, then read its answer (no pipelining). With
    TLS the socket is wrapped first; with SASL the login runs before any request."""

    def __init__(
        self,
        address: tuple[str, int],
        client_id: str,
        timeout_s: float,
        security: ClientSecurity | None = None,
        tls_context: ssl.SSLContext | None = None,
    ) -> None:
        self.address = address
        self._client_id = client_id
        sock = socket.create_connection(address, timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._sock = sock
        self._correlation = itertools.count(1)
        try:
            if security is not None and tls_context is not None and security.tls:
                try:
                    self._sock = security.wrap(sock, address[0], tls_context)
                except ssl.SSLCertVerificationError as e:
                    raise AuthenticationError(
                        f"TLS to broker {address[0]}:{address[1]}: {e.verify_message}"
                    ) from None
            if security is not None and security.sasl:
                self._login(security)
        except BaseException:
            sock.close()
            raise

    def _login(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate v2 until the mechanism completes."""
        assert security.mechanism and security.username is not None
        handshake = self.call(SaslHandshakeRequest(mechanism=security.mechanism),
                              SaslHandshakeResponse)  # fmt: skip
        if handshake.error_code != Errors.NONE:
            raise AuthenticationError(
                f"broker {self.address[0]}:{self.address[1]} does not offer SASL "
                f"{security.mechanism} (it offers {', '.join(handshake.mechanisms) or 'none'})"
            )
        client = sasl_client(security.mechanism, security.username, security.password or "")
        token: bytes | None = client.initial()
        while token is not None:
            resp = self.call(SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse)
            if resp.error_code != Errors.NONE:
                raise AuthenticationError(
                    f"SASL {security.mechanism} login to broker {self.address[0]}:"
                    f"{self.address[1]} failed: {Errors(resp.error_code).name}: "
                    f"{resp.error_message or ''}".rstrip(": ")
                )
            try:
                token = client.step(resp.auth_bytes)
            except SaslClientError as e:
                raise AuthenticationError(f"SASL {security.mechanism}: {e}") from None
        if not client.complete:
            raise AuthenticationError(f"SASL {security.mechanism}: the login did not complete")

    def call(self, request: Any, response_cls: type[T]) -> T:
        """Send `request`, decode its answer with kio."""
        answer, pos = self.call_raw(request)
        body, _ = _READERS[response_cls](bytes(answer), pos)  # kio wants bytes
        return body

    def call_raw(self, request: Any) -> tuple[bytearray, int]:
        """Send `request`; its answer frame (not copied) and where the body starts
        (after the v1 response header, whose tagged fields are skipped)."""
        correlation_id = next(self._correlation)
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        header_cls = request.__header_schema__  # v2 for flexible requests, else v1
        entity_writer(header_cls)(
            buf,
            header_cls(
                request_api_key=i16(request.__api_key__),
                request_api_version=i16(request.__version__),
                correlation_id=i32(correlation_id),
                client_id=self._client_id,
            ),
        )
        entity_writer(type(request))(buf, request)
        frame = buf.getbuffer()
        _SIZE.pack_into(frame, 0, len(frame) - 4)
        self._sock.sendall(frame)
        del frame
        answer = self._read_frame()
        (got,) = _SIZE.unpack_from(answer, 0)
        if got != correlation_id:
            raise ConnectionError(
                f"broker {self.address} answered correlation id {got}, expected {correlation_id}"
            )
        # Flexible answers have a v1 header (tagged fields after the correlation id).
        return answer, skip_tagged_fields(answer, 4) if request.__flexible__ else 4

    def _read_frame(self) -> bytearray:
        (size,) = _SIZE.unpack(self._recv_exactly(4))
        if size < 4:
            raise ConnectionError(f"broker {self.address} sent a frame of {size} bytes")
        return self._recv_exactly(size)

    def _recv_exactly(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError(f"broker {self.address} closed the connection")
            got += k
        return buf

    def close(self) -> None:
        self._sock.close()


class KafkaClient:
    def __init__(
        self,
        bootstrap: list[tuple[str, int]],
        client_id: str = "kraft-spark",
        request_timeout_ms: int = 30_000,
        api_timeout_ms: int = 60_000,
        security: ClientSecurity | None = None,
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security or ClientSecurity()
        self._tls = self._security.context() if self._security.tls else None
        self._client_id = client_id
        self._timeout_s = request_timeout_ms / 1000
        self.api_timeout_s = api_timeout_ms / 1000
        self._conns: dict[tuple[str, int], BrokerConnection] = {}
        self._meta: ClusterMetadata | None = None

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    # -- calls ---------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None) -> ClusterMetadata:
        """Metadata for `topics` (None: every topic), from any reachable broker."""
        wanted = None if topics is None else sorted(set(topics))

        def attempt() -> ClusterMetadata:
            addresses = self._bootstrap
            if self._meta is not None:  # known brokers first: the bootstrap ones may be down
                addresses = list(self._meta.brokers.values()) + addresses
            last: Exception | None = None
            for address in dict.fromkeys(addresses):
                try:
                    resp = self._conn(address).call(_metadata_request(wanted), MetadataResponse)
                except OSError as e:
                    self._drop(address)
                    last = e
                    continue
                self._meta = _cluster(resp)
                return self._meta
            raise RetriableError(f"no broker reachable ({last})")

        return self._retry("Metadata", attempt)

    def leaders(self, tps: Iterable[TP]) -> dict[TP, int]:
        """The current leader of each partition; refreshes metadata until all have one."""
        tps = list(tps)

        def attempt() -> dict[TP, int]:
            meta = self.metadata({t for t, _ in tps})
            out = {}
            for tp in tps:
                info = meta.partitions.get(tp)
                if info is None:
                    err = meta.topic_errors.get(tp[0])
                    if err is not None and not err.retriable:
                        raise KafkaCallError(f"topic {tp[0]}: {err.name}")
                    raise RetriableError(f"{tp[0]}-{tp[1]}: unknown partition")
                if info.leader < 0 or info.leader not in meta.brokers:
                    raise RetriableError(f"{tp[0]}-{tp[1]}: no leader")
                out[tp] = info.leader
            return out

        return self._retry("Metadata", attempt)

    def list_offsets(self, queries: dict[TP, int], read_committed: bool = False) -> dict[TP, int]:
        """ListOffsets: -2 earliest, -1 latest (the HW, or the LSO when read_committed),
        or a timestamp (the first offset at or after it; -1 if there is none)."""
        out: dict[TP, int] = {}

        def attempt() -> dict[TP, int]:
            todo = {tp: ts for tp, ts in queries.items() if tp not in out}
            by_leader: dict[int, list[TP]] = {}
            for tp, leader in self.leaders(todo).items():
                by_leader.setdefault(leader, []).append(tp)
            retry: list[str] = []
            for leader, tps in by_leader.items():
                try:
                    resp = self._call_broker(
                        leader,
                        _list_offsets_request(tps, todo, read_committed),
                        ListOffsetsResponse,
                    )
                except OSError as e:
                    retry.append(f"broker {leader}: {e}")
                    continue
                for t in resp.topics:
                    for p in t.partitions:
                        tp = (str(t.name), int(p.partition_index))
                        error = Errors(p.error_code)
                        if error == Errors.NONE:
                            out[tp] = int(p.offset)
                        elif error.retriable:
                            retry.append(f"{tp[0]}-{tp[1]}: {error.name}")
                        else:
                            raise KafkaCallError(f"ListOffsets {tp[0]}-{tp[1]}: {error.name}")
            if retry:
                self._meta = None
                raise RetriableError("; ".join(retry))
            return out

        return self._retry("ListOffsets", attempt)

    def fetch_once(
        self, leader: int, tp: TP, offset: int, max_bytes: int, read_committed: bool = False
    ) -> FetchedPartition:
        """One Fetch of one partition from `leader` (no retries: the reader decides)."""
        req = FetchRequest(
            max_wait=datetime.timedelta(milliseconds=500),
            min_bytes=i32(1),
            max_bytes=i32(max(max_bytes, 1)),
            isolation_level=i8(1 if read_committed else 0),
            topics=(
                FetchTopic(
                    topic=TopicName(tp[0]),
                    partitions=(
                        FetchPartition(
                            partition=i32(tp[1]),
                            fetch_offset=i64(offset),
                            partition_max_bytes=i32(max_bytes),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )
        answer, pos = self._call_broker_raw(leader, req)
        try:
            return parse_fetch_v12(answer, pos, tp)
        except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
            # Treated as a broken connection: the reader reconnects and asks again.
            raise ConnectionError(f"broker {leader} sent a malformed Fetch answer: {e}") from e

    def forget_metadata(self) -> None:
        self._meta = None

    # -- plumbing ------------------------------------------------------------------------

    def _retry(self, what: str, attempt: Callable[[], T]) -> T:
        deadline = time.monotonic() + self.api_timeout_s
        while True:
            try:
                return attempt()
            except RetriableError as e:
                if time.monotonic() + RETRY_BACKOFF_S > deadline:
                    raise KafkaCallError(
                        f"{what} did not succeed within {self.api_timeout_s:g} s "
                        f"(kafka.default.api.timeout.ms): {e}"
                    ) from None
                self._meta = None
                time.sleep(RETRY_BACKOFF_S)  # backoff between attempts, not a wait for state

    def _call_broker(self, broker_id: int, request: Any, response_cls: type[T]) -> T:
        answer, pos = self._call_broker_raw(broker_id, request)
        body, _ = _READERS[response_cls](bytes(answer), pos)  # kio wants bytes
        return body

    def _call_broker_raw(self, broker_id: int, request: Any) -> tuple[bytearray, int]:
        if self._meta is None or broker_id not in self._meta.brokers:
            self.metadata()
        assert self._meta is not None
        address = self._meta.brokers.get(broker_id)
        if address is None:
            raise ConnectionError(f"broker {broker_id} is not in the cluster metadata")
        try:
            return self._conn(address).call_raw(request)
        except OSError:
            self._drop(address)
            raise

    def _conn(self, address: tuple[str, int]) -> BrokerConnection:
        conn = self._conns.get(address)
        if conn is None:
            conn = BrokerConnection(
                address, self._client_id, self._timeout_s, self._security, self._tls
            )
            self._conns[address] = conn
        return conn

    def _drop(self, address: tuple[str, int]) -> None:
        conn = self._conns.pop(address, None)
        if conn is not None:
            conn.close()


def _metadata_request(topics: list[str] | None) -> MetadataRequest:
    return MetadataRequest(
        topics=None
        if topics is None
        else tuple(MetadataRequestTopic(topic_id=None, name=TopicName(t)) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def _cluster(resp: MetadataResponse) -> ClusterMetadata:
    partitions: dict[TP, PartitionInfo] = {}
    internal: set[str] = set()
    errors: dict[str, Errors] = {}
    for t in resp.topics:
        name = str(t.name)
        if t.error_code != Errors.NONE:
            errors[name] = Errors(t.error_code)
        if t.is_internal:
            internal.add(name)
        for p in t.partitions:
            partitions[(name, int(p.partition_index))] = PartitionInfo(
                int(p.leader_id), int(p.leader_epoch)
            )
    brokers = {int(b.node_id): (str(b.host), int(b.port)) for b in resp.brokers}
    return ClusterMetadata(brokers, partitions, internal, errors)


def _list_offsets_request(
    tps: list[TP], timestamps: dict[TP, int], read_committed: bool
) -> ListOffsetsRequest:
    by_topic: dict[str, list[ListOffsetsPartition]] = {}
    for tp in tps:
        by_topic.setdefault(tp[0], []).append(
            ListOffsetsPartition(partition_index=i32(tp[1]), timestamp=i64(timestamps[tp]))
        )
    return ListOffsetsRequest(
        replica_id=BrokerId(-1),
        isolation_level=i8(1 if read_committed else 0),
        topics=tuple(
            ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )


def java_full_match(pattern: str, topic: str) -> bool:
    """subscribePattern: Java's `Pattern.matcher(topic).matches()` (the whole name)."""
    return re.fullmatch(pattern, topic) is not None


# -- Fetch answers by hand: the hot path (kio would copy every partition's records) ------

_I16 = struct.Struct(">h")
_FETCH_PARTITION = struct.Struct(">ihqqq")  # index, error, HW, last stable, log start
_ABORTED = struct.Struct(">qq")  # producer id, first offset
_NO_RECORDS = memoryview(b"")


def parse_fetch_v12(frame: bytearray, pos: int, tp: TP) -> FetchedPartition:
    """The answer for `tp` in a Fetch v12 response body at `pos`; its records are a view
    into `frame`, not a copy."""
    view = memoryview(frame)
    error = _I16.unpack_from(frame, pos + 4)[0]  # after throttle_time_ms
    if error:
        return FetchedPartition(Errors(error), -1, -1, _NO_RECORDS)
    pos += 10  # throttle_time_ms, error_code, session_id
    n_topics, pos = read_uvarint(frame, pos)
    for _ in range(n_topics - 1):
        name_len, pos = read_uvarint(frame, pos)
        topic = bytes(view[pos : pos + name_len - 1]).decode()
        pos += name_len - 1
        n_parts, pos = read_uvarint(frame, pos)
        for _ in range(n_parts - 1):
            index, err, hw, lso, log_start = _FETCH_PARTITION.unpack_from(frame, pos)
            pos += _FETCH_PARTITION.size
            n_aborted, pos = read_uvarint(frame, pos)
            aborted = []
            for _ in range(max(n_aborted - 1, 0)):  # producer id, first offset, tags
                aborted.append(_ABORTED.unpack_from(frame, pos))
                pos = skip_tagged_fields(frame, pos + _ABORTED.size)
            pos += 4  # preferred_read_replica
            size, pos = read_uvarint(frame, pos)
            records = view[pos : pos + size - 1] if size else _NO_RECORDS
            if len(records) != max(size - 1, 0):
                raise ValueError("records run past the frame")
            pos = skip_tagged_fields(frame, pos + max(size - 1, 0))
            if (topic, index) == tp:
                return FetchedPartition(Errors(err), hw, log_start, records, lso, tuple(aborted))
        pos = skip_tagged_fields(frame, pos)
    raise ValueError(f"no answer for {tp[0]}-{tp[1]}")
