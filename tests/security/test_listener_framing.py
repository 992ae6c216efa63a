"""Frames through the Kafka listener (broker/network.py, broker/connection.py) over
PLAINTEXT and TLS, real sockets: frames of every size, cut anywhere and pipelined, arrive
whole and in order; over TLS, records are decrypted straight into the connection's
buffers (asyncio's copying path allocated 256 KiB per TLS record, and librdkafka sends
hundreds of small records per produce request: the cost this guards against).
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import socket
import ssl
import struct
import threading
import time
import tracemalloc
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from broker.connection import FRAME_CHUNK_BYTES
from broker.network import KafkaServer
from common.tls import server_context

T = TypeVar("T")
# up to one over FRAME_CHUNK_BYTES: frames read in one buffer and in several
SIZES = [0, 1, 7, 4096, 300 << 10, 3 << 20, 5, (8 << 20) + 3, 1 << 20, 64 << 10]
MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes


class EchoDigest:
    """A KafkaServer on its own loop in a thread; answers each frame with its length
    and SHA-256."""

    def __init__(self, ssl_context: ssl.SSLContext | None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = KafkaServer(self.handle, "127.0.0.1", 0, ssl_context=ssl_context)
        self.host, self.port = self.call(self.server.start())

    async def handle(self, frame: bytes) -> bytes:
        body = struct.pack(">i", len(frame)) + hashlib.sha256(frame).digest()
        return struct.pack(">i", len(body)) + body

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture(params=["PLAINTEXT", "SSL"])
def listener(request: pytest.FixtureRequest, certs: Any) -> Iterator[tuple[EchoDigest, Any]]:
    if request.param == "SSL":
        props = {"ssl.keystore.location": str(certs.server)}
        server = EchoDigest(server_context(props))
        client_ctx: Any = ssl.create_default_context(cafile=str(certs.ca))
    else:
        server, client_ctx = EchoDigest(None), None
    yield server, client_ctx
    server.stop()


def connect(server: EchoDigest, client_ctx: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection((server.host, server.port), timeout=30)
    if client_ctx is None:
        return sock
    return client_ctx.wrap_socket(sock, server_hostname="127.0.0.1")


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def expect_answers(sock: socket.socket, frames: list[bytes]) -> None:
    for frame in frames:
        (size,) = struct.unpack(">i", recv_exactly(sock, 4))
        body = recv_exactly(sock, size)
        assert body == struct.pack(">i", len(frame)) + hashlib.sha256(frame).digest()


def send_in_pieces(sock: socket.socket, data: bytes, rng: random.Random, most: int) -> None:
    """`data` in writes of 1..`most` bytes (over TLS, each write is its own record)."""
    view, pos = memoryview(data), 0
    while pos < len(data):
        n = rng.randint(1, most)
        sock.sendall(view[pos : pos + n])
        pos += n


def test_frames_of_every_size_arrive_whole_and_in_order(
    listener: tuple[EchoDigest, Any],
) -> None:
    """Pipelined frames from 0 bytes to 3 MiB, cut at random points (headers split
    too), each answered in order with its own length and digest."""
    server, client_ctx = listener
    rng = random.Random(13)
    frames = [rng.randbytes(n) for n in SIZES]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)
    sock = connect(server, client_ctx)
    try:
        send_in_pieces(sock, stream, rng, 70_000)  # the answers are small: no need to read yet
        expect_answers(sock, frames)
        # and the same frames again, each sent whole
        for frame in frames:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            expect_answers(sock, [frame])
    finally:
        sock.close()


def test_tls_records_are_decrypted_into_buffers(
    certs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1 MiB frame sent as ~1,000 small TLS records (as librdkafka writes a produce
    request whose messages it did not copy): every record is read into a buffer of the
    connection, none as a new bytes object of its own."""
    copied_reads = 0
    read = ssl.SSLObject.read

    def counting_read(self: ssl.SSLObject, n: int = 1024, buffer: Any = None) -> Any:
        nonlocal copied_reads
        if buffer is None:
            copied_reads += 1
        return read(self, n, buffer)

    monkeypatch.setattr(ssl.SSLObject, "read", counting_read)
    server = EchoDigest(server_context({"ssl.keystore.location": str(certs.server)}))
    sock = connect(server, ssl.create_default_context(cafile=str(certs.ca)))
    try:
        frame = random.Random(5).randbytes(1 << 20)
        send_in_pieces(sock, struct.pack(">i", len(frame)) + frame, random.Random(6), 2048)
        expect_answers(sock, [frame])
    finally:
        sock.close()
        server.stop()
    assert copied_reads == 0


def test_a_size_prefix_alone_allocates_at_most_a_chunk(listener: tuple[EchoDigest, Any]) -> None:
    """A client announces a frame of socket.request.max.bytes, sends 1 KiB of it and
    goes: the server never held more than FRAME_CHUNK_BYTES for it, not 100 MB."""
    server, client_ctx = listener
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sock = connect(server, client_ctx)
        sock.sendall(struct.pack(">i", MAX_REQUEST_BYTES) + bytes(1024))
        deadline = time.monotonic() + 10
        while not server.server.connection_count:  # its task has begun
            assert time.monotonic() < deadline, "the connection never started"
            time.sleep(0.01)
        sock.close()
        while server.server.connection_count:  # read all it sent, then closed
            assert time.monotonic() < deadline, "the connection never ended"
            time.sleep(0.01)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert peak < FRAME_CHUNK_BYTES + (1 << 20), f"{peak} bytes held for a frame that never came"
