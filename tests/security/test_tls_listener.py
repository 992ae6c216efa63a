"""The Kafka listener over TLS (broker/network.py), real sockets: each connection's
session (the client certificate's principal on SSL listeners, the peer's address),
ssl.client.auth none/requested/required, the bounded handshake, plaintext and garbage on
a TLS port, and big record slices sent through TLS (no sendfile there).

The handler here stands in for the API handlers: it answers every frame with what the
session of its connection says, or with a record slice of a file.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from broker.network import KafkaServer
from broker.security.session import current_session
from common.tls import server_context
from storage.segment import FileSlice

T = TypeVar("T")
SLICE_BYTES = 3 << 20  # above SENDFILE_MIN_BYTES: a PLAINTEXT listener would sendfile it


class Listener:
    """A KafkaServer on its own loop in a thread; counts the loop's sendfile calls."""

    def __init__(self, data: Path, **options: Any) -> None:
        self.data = data
        self.loop = asyncio.new_event_loop()
        self.sendfiles = 0
        original = self.loop.sendfile

        async def counting_sendfile(*args: Any, **kwargs: Any) -> int:
            self.sendfiles += 1
            return await original(*args, **kwargs)

        self.loop.sendfile = counting_sendfile  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = KafkaServer(self.handle, "127.0.0.1", 0, **options)
        self.host, self.port = self.call(self.server.start())

    async def handle(self, frame: bytes) -> Any:
        if frame == b"slice":
            f = io.FileIO(self.data, "r")
            return [struct.pack(">i", SLICE_BYTES), FileSlice(f, 0, SLICE_BYTES)]
        s = current_session()
        text = f"{s.listener}|{s.security_protocol}|{s.principal}|{s.client_host}".encode()
        return struct.pack(">i", len(text)) + text

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def stop(self) -> None:
        self.call(self.server.close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def listener_of(tmp_path: Path) -> Iterator[Callable[..., Listener]]:
    data = tmp_path / "segment"
    data.write_bytes(os.urandom(SLICE_BYTES))
    made: list[Listener] = []

    def make(**options: Any) -> Listener:
        made.append(Listener(data, **options))
        return made[-1]

    yield make
    for x in made:
        x.stop()


def tls_client(listener: Listener, certs: Any, cert: Path | None) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        context.load_cert_chain(str(cert))
    raw = socket.create_connection((listener.host, listener.port), timeout=10)
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def ask(sock: socket.socket, frame: bytes = b"who") -> bytes:
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    return recv_exactly(sock, size)


def recv_exactly(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 20))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def ssl_options(certs: Any, client_auth: str) -> dict[str, Any]:
    context = server_context(
        {"ssl.keystore.location": str(certs.server), "ssl.truststore.location": str(certs.ca),
         "ssl.client.auth": client_auth}
    )  # fmt: skip
    return {
        "listener_name": "EXTERNAL",
        "security_protocol": "SSL",
        "ssl_context": context,
        "ssl_handshake_timeout_s": 0.5,
    }


def test_the_client_certificate_names_the_principal(
    listener_of: Callable[..., Listener], certs: Any
) -> None:
    required = listener_of(**ssl_options(certs, "required"))
    with tls_client(required, certs, certs.client) as s:
        assert ask(s) == b"EXTERNAL|SSL|User:CN=client|127.0.0.1"
    for cert in (None, certs.other_client):  # no certificate, or one from another CA
        refused = pytest.raises((ssl.SSLError, ConnectionError))
        with refused, tls_client(required, certs, cert) as s:
            ask(s)  # TLS 1.3: the server's refusal arrives with the first read
    requested = listener_of(**ssl_options(certs, "requested"))
    with tls_client(requested, certs, None) as s:
        assert ask(s) == b"EXTERNAL|SSL|User:ANONYMOUS|127.0.0.1"
    with tls_client(requested, certs, certs.client) as s:
        assert ask(s) == b"EXTERNAL|SSL|User:CN=client|127.0.0.1"
    with tls_client(listener_of(**ssl_options(certs, "none")), certs, certs.client) as s:
        assert ask(s) == b"EXTERNAL|SSL|User:ANONYMOUS|127.0.0.1"  # not asked for: not used


def test_a_plaintext_listener_session(listener_of: Callable[..., Listener]) -> None:
    plain = listener_of()
    with socket.create_connection((plain.host, plain.port), timeout=10) as s:
        assert ask(s) == b"PLAINTEXT|PLAINTEXT|User:ANONYMOUS|127.0.0.1"


def test_big_slices_go_through_tls_without_sendfile(
    listener_of: Callable[..., Listener], certs: Any
) -> None:
    tls = listener_of(**ssl_options(certs, "none"))
    with tls_client(tls, certs, None) as s:
        assert ask(s, b"slice") == tls.data.read_bytes()
    assert tls.sendfiles == 0
    plain = listener_of()
    with socket.create_connection((plain.host, plain.port), timeout=10) as s:
        assert ask(s, b"slice") == plain.data.read_bytes()
    assert plain.sendfiles == 1  # the zero-copy path where it can be used


@pytest.mark.parametrize(
    "data",
    [
        b"",  # a handshake that never starts
        b"\x16\x03\x01\x00\xc8\x01\x00\x00\xc4\x03\x03",  # a ClientHello that stops
        struct.pack(">ihhih", 10, 18, 0, 1, -1),  # plaintext Kafka on a TLS port
        b"GET / HTTP/1.1\r\n\r\n",
        os.urandom(4096),
    ],
)
def test_stalled_plaintext_or_garbage_handshakes_are_closed(
    listener_of: Callable[..., Listener], certs: Any, data: bytes
) -> None:
    tls = listener_of(**ssl_options(certs, "none"))
    with socket.create_connection((tls.host, tls.port), timeout=10) as s:
        started = time.monotonic()
        s.sendall(data)
        assert closed_by_peer(s)
        assert time.monotonic() - started < 5  # the 0.5 s handshake bound, not the idle one
    with tls_client(tls, certs, None) as ok:  # and the listener still serves
        assert ask(ok).startswith(b"EXTERNAL|SSL|")


def test_garbage_after_the_handshake_closes_the_connection(
    listener_of: Callable[..., Listener], certs: Any
) -> None:
    tls = listener_of(**ssl_options(certs, "none"))
    with tls_client(tls, certs, None) as s:
        assert ask(s).startswith(b"EXTERNAL|SSL|")
        raw = socket.socket(fileno=os.dup(s.fileno()))  # under the TLS layer
        raw.sendall(b"\x17\x03\x03\x00\x20" + os.urandom(32))  # a record that fails its MAC
        assert closed_by_peer(s)
        raw.close()
    with tls_client(tls, certs, None) as ok:
        assert ask(ok).startswith(b"EXTERNAL|SSL|")
