"""The bad-input corpus of notes/reliability.md on the Kafka port.

Every case gets an error answer or a closed connection, and the server keeps serving
everyone else: each test ends by checking a fresh connection is still answered. All the
cases share ONE server (module scope), and the last test drives a normal confluent-kafka
producer and consumer through it, after everything above was thrown at it.
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crc32c import crc32c

from common.varint import encode_uvarint
from storage.records import Record, build_batch
from tests.harness.fake_broker import BrokerThread
from tests.harness.raw_protocol import (
    RawClient,
    batch,
    decode_response,
    encode_request,
    fetch,
    produce,
    request,
)

MAX_REQUEST = 104857600


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerThread]:
    b = BrokerThread(tmp_path_factory.mktemp("bad"))
    b.runtime.add_topic("t", 2)
    b.runtime.add_topic("wire", 1)
    yield b
    b.stop()


def assert_serving(broker: BrokerThread) -> None:
    """A fresh connection still gets ApiVersions answered."""
    c = RawClient(broker.host, broker.port)
    try:
        data = {"client_software_name": "check", "client_software_version": "1"}
        assert c.call(18, 3, request(18, 3, data)).error_code == 0
    finally:
        c.close()


def raw_frame(api_key: int, version: int, body: bytes, flexible: bool = False) -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, 3) + b"raw" + (b"\x00" if flexible else b"")
    return struct.pack(">i", len(head) + len(body)) + head + body


def closes(broker: BrokerThread, data: bytes, *, shutdown_write: bool = False) -> None:
    """Send `data`; the server must close the connection, then still serve others."""
    c = RawClient(broker.host, broker.port)
    try:
        try:
            c.send(data)
            if shutdown_write:
                c.sock.shutdown(socket.SHUT_WR)
        except OSError:  # already closed by the server while we were still sending
            pass
        else:
            assert c.is_closed_by_peer()
    finally:
        c.close()
    assert_serving(broker)


def produce_error(broker: BrokerThread, records: bytes | None, acks: int = 1) -> int:
    c = RawClient(broker.host, broker.port)
    try:
        return (
            c.call(0, 9, produce("t", 0, records, acks=acks))
            .responses[0]
            .partition_responses[0]
            .error_code
        )
    finally:
        c.close()


def recrc(b: bytearray) -> bytes:
    struct.pack_into(">I", b, 17, crc32c(bytes(b[21:])))
    return bytes(b)


# -- framing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "size", [-(2**31), -1, MAX_REQUEST + 1], ids=["0x80000000", "0xFFFFFFFF", "max+1"]
)
def test_bad_size_prefix_closes(broker: BrokerThread, size: int) -> None:
    closes(broker, struct.pack(">i", size) + b"x" * 16)


@pytest.mark.parametrize("size", [0, 1])
def test_tiny_frame_closes(broker: BrokerThread, size: int) -> None:
    closes(broker, struct.pack(">i", size) + b"\x00" * size)


def test_http_request_closes(broker: BrokerThread) -> None:
    closes(broker, b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")


def test_tls_client_hello_closes(broker: BrokerThread) -> None:
    hello = bytes.fromhex("16030100f5010000f10303") + b"\x00" * 32 + b"\x00\x00\x02\x13\x01\x01\x00"
    closes(broker, hello)


_METADATA_V4 = raw_frame(3, 4, struct.pack(">ih", 1, 1) + b"t" + b"\x01")


@pytest.mark.parametrize("k", range(0, len(_METADATA_V4) - 4))
def test_truncated_frame_then_eof(broker: BrokerThread, k: int) -> None:
    """The size promises the whole frame; only k bytes come, then EOF."""
    closes(broker, _METADATA_V4[: 4 + k], shutdown_write=True)


@pytest.mark.parametrize("k", range(0, 14))
def test_frame_cut_inside_header(broker: BrokerThread, k: int) -> None:
    """A frame whose size says it ends inside the request header."""
    closes(broker, struct.pack(">i", k) + _METADATA_V4[4 : 4 + k])


def test_drip_feed_is_cut_by_idle_timeout(tmp_path: Path) -> None:
    b = BrokerThread(tmp_path, idle_ms=300)
    try:
        c = RawClient(b.host, b.port)
        closed = False
        for byte in _METADATA_V4:  # one byte every 50 ms: the frame would take ~1 s
            try:
                c.send(bytes([byte]))
            except OSError:
                closed = True
                break
            time.sleep(0.05)  # the drip itself, not synchronisation
        assert closed or c.is_closed_by_peer()
        c.close()
        assert_serving(b)
    finally:
        b.stop()


# -- headers and versions --------------------------------------------------------------------


@pytest.mark.parametrize("api_key", [-1, 32767, 4, 9])
def test_unknown_api_key_closes(broker: BrokerThread, api_key: int) -> None:
    closes(broker, raw_frame(api_key, 0, b""))


@pytest.mark.parametrize("api_key,version", [(3, 13), (0, 2), (1, 3), (1, 14), (60, 2), (3, -1)])
def test_unsupported_version_closes(broker: BrokerThread, api_key: int, version: int) -> None:
    closes(broker, raw_frame(api_key, version, b"\x00" * 8))


def test_unsupported_api_versions_version_is_answered(broker: BrokerThread) -> None:
    c = RawClient(broker.host, broker.port)
    try:
        c.send(raw_frame(18, 77, b"\x00\x00", flexible=True))
        _, resp = decode_response(18, 0, c.recv_frame())
        assert resp.error_code == 35 and resp.api_keys
    finally:
        c.close()


def test_negative_client_id_length_closes(broker: BrokerThread) -> None:
    closes(broker, struct.pack(">ihhih", 10, 3, 4, 1, -7))


# -- bodies ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        struct.pack(">ih", 1, -5) + b"t\x01",  # string length < -1
        struct.pack(">ih", 1, 1000) + b"t\x01",  # string past the buffer
        struct.pack(">i", -2) + b"\x01",  # array length < -1
        struct.pack(">ih", 1, 2) + b"\xff\xfe\x01",  # not UTF-8
        struct.pack(">i", 2**31 - 1) + b"\x00" * 16,  # array count 2^31-1 in a small frame
        struct.pack(">i", 100_000_000) + b"\x00\x00" * 1000,  # many empty names, then short
    ],
    ids=["string<-1", "string-past-end", "array<-1", "bad-utf8", "array-2^31-1", "array-huge"],
)
def test_bad_lengths_close(broker: BrokerThread, body: bytes) -> None:
    closes(broker, raw_frame(3, 4, body))


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xff\xff\xff\xff\xff\x01",  # compact array length: a 7-byte varint
        b"\xff\xff\xff\xff\x0f" + b"\x00" * 8,  # compact array count 2^32-2
        encode_uvarint(2) + b"\x00" * 16 + b"\xff\xff\xff\xff\xff\xff\x01",  # name length
    ],
    ids=["array-varint", "array-count", "string-varint"],
)
def test_over_long_varints_close(broker: BrokerThread, body: bytes) -> None:
    closes(broker, raw_frame(3, 12, body, flexible=True))


@pytest.mark.parametrize(
    "api_key,version,body",
    [
        (3, 12, encode_uvarint(0xFFFFFFFF)),  # top level: 2^32-2 topics
        (0, 3, struct.pack(">hhiih", -1, 1, 1000, 1, 1) + b"t" + struct.pack(">i", 2**31 - 1)),
        (1, 12, struct.pack(">iiiibii", -1, 0, 1, 1 << 20, 0, 0, -1) + encode_uvarint(2)
         + encode_uvarint(2) + b"t" + encode_uvarint(0xFFFFFFFF)),
    ],
    ids=["metadata-topics", "produce-partitions", "fetch-partitions"],
)  # fmt: skip
def test_absurd_array_counts_are_refused_before_kio(
    broker: BrokerThread, api_key: int, version: int, body: bytes
) -> None:
    """kio reserves memory from an array's count before reading it: without the guard
    these few bytes abort the whole broker process (Rust OOM abort)."""
    closes(broker, raw_frame(api_key, version, body + b"\x00" * 8, flexible=version >= 9))


def _metadata_v12(tags: bytes) -> bytes:
    topic = b"\x00" * 16 + encode_uvarint(2) + b"t" + b"\x00"
    return raw_frame(3, 12, encode_uvarint(2) + topic + b"\x00\x00" + tags, flexible=True)


@pytest.mark.parametrize(
    "tags,answered",
    [
        (b"\x02\x07\x01a\x07\x01b", True),  # the same unknown tag twice: both skipped
        (b"\x01\x07\x09ab", False),  # a tag whose size runs past the frame
        (b"\xff\xff\xff\xff\x0f", False),  # a tag count no frame can hold
    ],
    ids=["duplicate-unknown", "tag-past-end", "tag-count"],
)
def test_tagged_fields(broker: BrokerThread, tags: bytes, answered: bool) -> None:
    if not answered:
        closes(broker, _metadata_v12(tags))
        return
    c = RawClient(broker.host, broker.port)
    try:
        c.send(_metadata_v12(tags))
        _, resp = decode_response(3, 12, c.recv_frame())
        assert [t.name for t in resp.topics] == ["t"]
    finally:
        c.close()


def test_oversized_non_produce_request_closes(broker: BrokerThread) -> None:
    names = struct.pack(">h", 0) * (3 << 20)  # 6 MiB of empty topic names
    closes(broker, raw_frame(3, 4, struct.pack(">i", 3 << 20) + names + b"\x01"))


# -- record batches --------------------------------------------------------------------------


def _mutated(offset: int, fmt: str, value: int, fix_crc: bool) -> bytes:
    b = bytearray(batch(3))
    struct.pack_into(fmt, b, offset, value)
    return recrc(b) if fix_crc else bytes(b)


@pytest.mark.parametrize(
    "records,code",
    [
        (_mutated(17, ">I", 0xDEADBEEF, False), 2),  # flipped CRC
        (_mutated(8, ">i", 10_000, False), 2),  # batchLength past the data
        (_mutated(8, ">i", 20, False), 2),  # batchLength below the header
        (_mutated(57, ">i", 4, True), 87),  # recordCount != lastOffsetDelta + 1
        (_mutated(57, ">i", 0, True), 87),  # no records
        (_mutated(16, ">b", 0, False), 87),  # magic 0
        (_mutated(16, ">b", 1, False), 87),  # magic 1
        (_mutated(16, ">b", 3, False), 2),  # magic 3
        (_mutated(21, ">h", 5, True), 76),  # unknown compression codec
        (b"\x00" * 30, 2),  # shorter than a batch header
        (batch(2) + batch(2), 87),  # two batches in one partition (v3+ allows one)
    ],
    ids=[
        "crc",
        "length-past",
        "length-short",
        "count",
        "count-0",
        "magic0",
        "magic1",
        "magic3",
        "codec",
        "torn",
        "two-batches",
    ],
)
def test_bad_record_batches(broker: BrokerThread, records: bytes, code: int) -> None:
    assert produce_error(broker, records) == code
    assert_serving(broker)


def test_decompression_bomb_claim_is_refused(broker: BrokerThread) -> None:
    """A gzip batch claiming more records than any codec could pack in its bytes; the
    broker never decompresses, so the claim itself is what is checked."""
    b = bytearray(build_batch([Record(key=None, value=b"x", headers=())], compression=1))
    struct.pack_into(">i", b, 57, 10**9)
    struct.pack_into(">i", b, 23, 10**9 - 1)
    assert produce_error(broker, recrc(b)) == 87


def test_negative_record_length_keeps_serving(broker: BrokerThread) -> None:
    """Records are not parsed on the produce path (per batch, never per record): a batch
    with a valid CRC and a negative record length inside is stored as opaque bytes, like
    any other payload a client could CRC. The broker must just keep serving."""
    b = bytearray(batch(1))
    b[61] = 0x09  # zigzag varint -5 as the first record's length
    assert produce_error(broker, recrc(b)) in (0, 2, 87)
    assert_serving(broker)


@pytest.mark.parametrize("acks", [2, -2, 100])
def test_invalid_acks(broker: BrokerThread, acks: int) -> None:
    assert produce_error(broker, batch(), acks=acks) == 21
    assert_serving(broker)


# -- fetch -----------------------------------------------------------------------------------


def test_negative_fetch_max_bytes(broker: BrokerThread) -> None:
    c = RawClient(broker.host, broker.port)
    try:
        resp = c.call(1, 12, fetch([("t", 0, 0, 100)], max_bytes=-1))
        assert resp.error_code == 42
        resp = c.call(1, 12, fetch([("t", 0, 0, -1), ("t", 1, 0, 100)]))
        assert [p.error_code for p in resp.responses[0].partitions] == [42, 0]
    finally:
        c.close()
    assert_serving(broker)


@pytest.mark.parametrize("offset", [-5, 10**12, 2**63 - 1])
def test_out_of_range_offsets(broker: BrokerThread, offset: int) -> None:
    c = RawClient(broker.host, broker.port)
    try:
        resp = c.call(1, 12, fetch([("t", 1, offset, 100)], max_wait=10_000))
        assert resp.responses[0].partitions[0].error_code == 1  # at once, not after 10 s
    finally:
        c.close()


# -- load ------------------------------------------------------------------------------------


def test_pipelined_requests_without_reads_are_bounded(broker: BrokerThread) -> None:
    """1,000 requests whose ~64 KiB answers are never read: the server handles only as
    many as the socket buffers hold, then stops reading (memory stays bounded), and
    every answer arrives in order once the client reads."""
    c = RawClient(broker.host, broker.port)
    c.call(0, 9, produce("wire", 0, build_batch([Record(None, b"v" * 65000, ())])))
    c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    before = broker.runtime.fetch_calls
    frames = b"".join(
        encode_request(1, 12, fetch([("wire", 0, 0, 1 << 20)]), correlation_id=i)
        for i in range(1000)
    )
    sender = threading.Thread(target=c.sock.sendall, args=(frames,), daemon=True)
    c.sock.settimeout(None)
    sender.start()
    handled = _quiescent(lambda: broker.runtime.fetch_calls - before)
    assert handled < 1000, "the server kept reading requests nobody collects answers for"
    c.sock.settimeout(20)
    for i in range(1000):
        cid, resp = decode_response(1, 12, c.recv_frame())
        assert cid == i and len(resp.responses[0].partitions[0].records) > 65000
    sender.join(20)
    c.close()
    assert_serving(broker)


def _quiescent(count: Any, settle: float = 0.5, timeout: float = 30) -> int:
    """The value of `count()` once it stopped changing for `settle` seconds."""
    deadline = time.monotonic() + timeout
    last, since = count(), time.monotonic()
    while time.monotonic() - since < settle:
        assert time.monotonic() < deadline, "never settled"
        time.sleep(0.02)
        now = count()
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_connection_flood(broker: BrokerThread) -> None:
    """200 connections at once, half silent and half asking ApiVersions: all answered,
    and every connection is released when the clients go."""
    silent = [RawClient(broker.host, broker.port) for _ in range(100)]
    talkers = [RawClient(broker.host, broker.port) for _ in range(100)]
    data = {"client_software_name": "flood", "client_software_version": "1"}
    for c in talkers:
        c.send(encode_request(18, 3, request(18, 3, data)))
    for c in talkers:
        _, resp = decode_response(18, 3, c.recv_frame())
        assert resp.error_code == 0
    assert_serving(broker)
    for c in silent + talkers:
        c.close()
    deadline = time.monotonic() + 20
    while broker.server.connection_count:
        assert time.monotonic() < deadline, "connections not released"
        time.sleep(0.02)


# -- and after all that ----------------------------------------------------------------------


def test_normal_client_still_works(broker: BrokerThread) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all"})
    for i in range(100):
        producer.produce("t", f"after-{i}".encode(), b"k", partition=1)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "after", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition("t", 1, 0)])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 100:
            assert time.monotonic() < deadline, "consumer timed out"
            m = consumer.poll(0.5)
            if m is not None and not m.error():
                got.append(m.value())
        assert got == [f"after-{i}".encode() for i in range(100)]
    finally:
        consumer.close()
