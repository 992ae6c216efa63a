"""Kafka requests by hand: kio-encoded frames, a blocking raw socket client, and builders
for the requests the broker tests send most (Produce, Fetch), and a one-shot round trip
for requests built with kafka-python's protocol classes.
"""

from __future__ import annotations

import io
import socket
import struct
import uuid
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from broker.codec_schema import build
from storage.records import Record, build_batch


def encode_request(
    api_key: int, version: int, body: Any, correlation_id: int = 1, client_id: str = "raw"
) -> bytes:
    """A framed request, encoded with kio (header v1 or v2 as the version says)."""
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    buf = io.BytesIO()
    entity_writer(header_cls)(
        buf,
        header_cls(
            request_api_key=api_key,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        ),
    )
    entity_writer(cls)(buf, body)
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def decode_response(api_key: int, version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, body) of a response frame (without its size prefix)."""
    cls = load_response_schema(api_key, version)
    header, n = entity_reader(cls.__header_schema__)(frame, 0)
    body, _ = entity_reader(cls)(frame, n)
    return header.correlation_id, body


class RawClient:
    """A plain blocking socket speaking frames, with a deadline on every read."""

    def __init__(self, host: str, port: int, timeout: float = 10) -> None:
        import socket

        self.sock = socket.create_connection((host, port), timeout=timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exactly(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError(f"closed after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exactly(4))
        return self.recv_exactly(size)

    def call(self, api_key: int, version: int, body: Any, correlation_id: int = 1) -> Any:
        self.send(encode_request(api_key, version, body, correlation_id))
        cid, resp = decode_response(api_key, version, self.recv_frame())
        assert cid == correlation_id
        return resp

    def is_closed_by_peer(self) -> bool:
        """True once the server has closed (EOF or reset), waiting up to the timeout."""
        try:
            while self.sock.recv(65536):
                pass
            return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def request(api_key: int, version: int, data: dict[str, Any]) -> Any:
    return build(load_request_schema(api_key, version), data)


def batch(n: int = 3, size: int = 10, tag: str = "v") -> bytes:
    values = [f"{tag}{i}".encode().ljust(size, b".") for i in range(n)]
    return build_batch([Record(key=b"k", value=v, headers=()) for v in values])


def produce(topic: str, partition: int, records: bytes | None, acks: int = 1, v: int = 9) -> Any:
    data = [{"name": topic, "partition_data": [{"index": partition, "records": records}]}]
    fields = {"transactional_id": None, "acks": acks, "timeout": 5000, "topic_data": data}
    return request(0, v, fields)


_FETCH_DEFAULTS = {"replica_id": -1, "isolation_level": 0, "session_epoch": -1, "rack_id": ""}


_PARTITION_DEFAULTS = {"current_leader_epoch": -1, "last_fetched_epoch": -1, "log_start_offset": -1}


def fetch(
    parts: list[tuple[str, int, int, int]],
    *,
    v: int = 12,
    max_wait: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    session_id: int = 0,
    session_epoch: int = -1,
    forgotten: list[tuple[str, int]] = (),  # type: ignore[assignment]
    topic_ids: dict[str, uuid.UUID] | None = None,
) -> Any:
    """A Fetch request; v13+ names topics by id (`topic_ids`); `session_id` and
    `session_epoch` as KIP-227 (0, -1: no session), `forgotten` partitions leave it."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for topic, p, offset, pmax in parts:
        part = {"partition": p, "fetch_offset": offset, "partition_max_bytes": pmax}
        topics.setdefault(topic, []).append({**_PARTITION_DEFAULTS, **part})
    ids = topic_ids or {}
    data = [{"topic": t, "topic_id": ids.get(t), "partitions": ps} for t, ps in topics.items()]
    limits = {"max_wait": max_wait, "min_bytes": min_bytes, "max_bytes": max_bytes}
    fields = {**_FETCH_DEFAULTS, **limits, "session_id": session_id, "topics": data}
    fields["session_epoch"] = session_epoch
    gone: dict[str, list[int]] = {}
    for topic, p in forgotten:
        gone.setdefault(topic, []).append(p)
    forgot = [{"topic": t, "topic_id": ids.get(t), "partitions": ps} for t, ps in gone.items()]
    return request(1, v, {**fields, "forgotten_topics_data": forgot})


def kafka_python_roundtrip(addr: str, request: Any, response_cls: Any, correlation_id: int) -> Any:
    """One request built with kafka-python's protocol classes, on its own connection."""
    host, port = addr.rsplit(":", 1)
    request.with_header(correlation_id=correlation_id, client_id="e2e-raw")
    with socket.create_connection((host, int(port)), timeout=15) as s:
        s.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
    (cid,) = struct.unpack(">i", body[:4])
    assert cid == correlation_id
    return response_cls.decode(body[4:])


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise AssertionError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)
