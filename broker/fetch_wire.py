"""The follower fetcher's wire side: Fetch v15 requests encoded with kio, answers decoded
by hand with each partition's records a view into the response frame (no copy: the log
appends from it). Split from broker/fetcher.py, which re-exports these names."""

from __future__ import annotations

import datetime
import functools
import io
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.fetch.v15.request import (
    FetchPartition,
    FetchRequest,
    FetchTopic,
    ForgottenTopic,
    ReplicaState,
)
from kio.schema.request_header.v2.header import RequestHeader
from kio.schema.types import BrokerId
from kio.serial import entity_writer
from kio.static.primitive import i16, i32, i64

from common.api_keys import ApiKey
from common.varint import read_uvarint, skip_tagged_fields

TP = tuple[str, int]
FETCH_VERSION = 15  # topic ids, last fetched epoch, diverging epoch, broker epoch (KIP-903)
_SIZE = struct.Struct(">i")
_write_header = entity_writer(RequestHeader)
_write_request = entity_writer(FetchRequest)
_I32 = struct.Struct(">i")


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
    records: bytes | memoryview | None = None  # a view into the response frame
    diverging_epoch: tuple[int, int] | None = None  # (epoch, end offset)


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
    session: tuple[int, int] = (0, -1),
    forgotten: Iterable[tuple[str, int]] = (),
) -> bytes:
    """A Fetch v15 request for `partitions`; `session` is the KIP-227 (id, epoch) and
    `forgotten` (topic id, partition) pairs leave it."""
    by_topic: dict[uuid.UUID, list[FetchPartition]] = {}
    for (_topic, p), st in partitions.items():
        by_topic.setdefault(_uuid(st.topic_id), []).append(
            FetchPartition(
                partition=i32(p),
                current_leader_epoch=i32(st.leader_epoch),
                fetch_offset=i64(st.fetch_offset),
                last_fetched_epoch=i32(st.last_fetched_epoch),
                log_start_offset=i64(st.log_start_offset),
                partition_max_bytes=i32(cfg.partition_max_bytes),
            )
        )
    gone: dict[uuid.UUID, list[i32]] = {}
    for topic_id, p in forgotten:
        gone.setdefault(_uuid(topic_id), []).append(i32(p))
    req = FetchRequest(
        replica_state=ReplicaState(
            replica_id=BrokerId(replica_id), replica_epoch=i64(broker_epoch)
        ),
        max_wait=datetime.timedelta(milliseconds=cfg.max_wait_ms),
        min_bytes=i32(cfg.min_bytes),
        max_bytes=i32(cfg.max_bytes),
        session_id=i32(session[0]),
        session_epoch=i32(session[1]),
        topics=tuple(FetchTopic(topic_id=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        forgotten_topics_data=tuple(
            ForgottenTopic(topic_id=t, partitions=tuple(ps)) for t, ps in gone.items()
        ),
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


@functools.lru_cache(maxsize=4096)
def _uuid(topic_id: str) -> uuid.UUID:
    return uuid.UUID(topic_id)


_TOP = struct.Struct(">ihi")  # throttle, error code, session id
_PART = struct.Struct(">ihqqq")  # index, error code, HW, LSO, log start offset
_DIVERGING = struct.Struct(">iq")  # epoch, end offset


@dataclass(frozen=True, slots=True)
class DecodedFetch:
    correlation_id: int
    error_code: int
    session_id: int
    answers: dict[TP, FollowerData]


def decode_fetch(frame: bytes | bytearray, names: dict[uuid.UUID, str]) -> DecodedFetch:
    """A Fetch v15 response frame (without its size), by hand: each partition's records
    are a memoryview into `frame` (no copy: the log appends from it). `names`: topic
    names by id; a topic we did not ask for is skipped."""
    mv = memoryview(frame)
    end = len(frame)
    (cid,) = _I32.unpack_from(frame, 0)
    pos = skip_tagged_fields(frame, 4)
    _throttle, error, session_id = _TOP.unpack_from(frame, pos)
    pos += _TOP.size
    out: dict[TP, FollowerData] = {}
    n, pos = read_uvarint(frame, pos)
    for _ in range(n - 1):
        name = names.get(uuid.UUID(bytes=bytes(mv[pos : pos + 16])))
        pos += 16
        m, pos = read_uvarint(frame, pos)
        for _ in range(m - 1):
            index, err, hw, _lso, log_start = _PART.unpack_from(frame, pos)
            pos += _PART.size
            aborted, pos = read_uvarint(frame, pos)  # compact nullable: count + 1
            for _ in range(aborted - 1):  # (producer id, first offset, tags): skipped
                pos = skip_tagged_fields(frame, pos + 16)
            pos += 4  # preferred read replica
            size, pos = read_uvarint(frame, pos)
            size -= 1
            records = mv[pos : pos + size] if size > 0 else None
            pos += max(0, size)
            diverging = None
            tags, pos = read_uvarint(frame, pos)
            for _ in range(tags):
                tag, pos = read_uvarint(frame, pos)
                length, pos = read_uvarint(frame, pos)
                if tag == 0:  # diverging epoch: (epoch, end offset, tags)
                    epoch, end_offset = _DIVERGING.unpack_from(frame, pos)
                    if epoch >= 0 or end_offset >= 0:
                        diverging = (epoch, end_offset)
                pos += length
            if pos > end:
                raise ConnectionError("fetch response runs past its frame")
            if name is not None:
                out[(name, index)] = FollowerData(err, hw, log_start, records, diverging)
        pos = skip_tagged_fields(frame, pos)
    return DecodedFetch(cid, error, session_id, out)
