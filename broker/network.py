"""The Kafka listener: asyncio server, framing, limits, per-connection ordering.

Each connection is one task that reads a frame, awaits its response, writes it, and
only then reads the next frame: Kafka's "muted channel". Responses are therefore in
request order without a queue, a client that pipelines is simply read more slowly,
and a client that never reads its responses stalls only itself: once the transport's
write buffer passes its high-water mark `drain()` blocks, we stop reading, and TCP
pushes back on the sender. Memory per connection is bounded by one frame (plus the
read-ahead and transport buffers' marks); frames are read by broker/connection.py.

Kafka's rules, enforced here:
- a size prefix < 0 or > `socket.request.max.bytes` closes the connection before any
  allocation (a TLS ClientHello or "GET " read as a size is huge: same path);
- a frame that the handler cannot decode, or that Kafka says must close the connection,
  closes it with one log line (`CloseConnection`);
- `connections.max.idle.ms` bounds the wait for each whole frame, so neither an idle
  client nor a 1 byte/s drip holds a connection forever.

Records in Fetch responses arrive as `FileSlice`s. Slices of `sendfile_min_bytes` or
more go out with `loop.sendfile` (zero copy); smaller ones are read (`preadv`) straight
into one buffer with the response's other parts, written with one call, which is faster
below about 768 KiB (measurements at `SENDFILE_MIN_BYTES`) and makes a fetch of many
small partitions one send, not one per part. Over TLS the bytes must pass through the
TLS layer, so every slice is read into the buffer.

Security (one server per listener): an SSL or SASL_SSL listener completes its TLS
handshake within `ssl_handshake_timeout_s` or drops the connection; each connection has
a `Session` (broker/security/session.py) set in its task before its first request, with
the client certificate's principal on SSL listeners. On a SASL listener the frames go to
the connection's `SaslServerAuthenticator` until it completes (before that, frames are
limited to `sasl.server.max.receive.size`); only then do they reach the API handlers.
TLS and SASL cost nothing per request after that: the loop below is the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from broker.codec import CloseConnection
from broker.connection import FrameSizeError, KafkaConnection, receive_buffer
from broker.security.sasl_server import SaslServerAuthenticator
from broker.security.session import ANONYMOUS, Session, set_session
from common.tls import principal_from_certificate
from storage.segment import FileSlice

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes
DEFAULT_IDLE_MS = 600000  # connections.max.idle.ms
DEFAULT_SASL_MAX_RECEIVE = 524288  # sasl.server.max.receive.size: frames before login
DEFAULT_SSL_HANDSHAKE_TIMEOUT_S = 10.0
# loop.sendfile waits for the transport's buffer to empty and pauses reading around
# each call, which costs more than the copy it saves on all but large slices. Measured
# here (2 CPUs, loopback, one fetch at a time, client in another process), per fetch:
#   1 MiB: sendfile 490-540 us, pread+write 565-600 us (sendfile ~12% faster)
#   512 KiB: sendfile 305-365 us, pread+write 265-370 us
#   256 KiB: sendfile 255-350 us, pread+write 215-280 us
#   64 KiB: sendfile 235-280 us, pread+write 138-153 us
# so slices from 768 KiB up use sendfile, smaller ones one pread.
SENDFILE_MIN_BYTES = 768 << 10

RequestHandler = Callable[[bytes], Awaitable[Any]]


class KafkaServer:
    """Serves the Kafka protocol on one listener with `handler(frame) -> response`.

    The handler returns framed bytes, a list of buffers and FileSlices, or None (no
    response, e.g. acks=0); it raises `CloseConnection` to drop the client.
    `ssl_context` makes it a TLS listener; `authenticator` (a factory, one per
    connection) a SASL one.
    """

    def __init__(
        self,
        handler: RequestHandler,
        host: str,
        port: int,
        *,
        max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
        idle_ms: int = DEFAULT_IDLE_MS,
        sendfile_min_bytes: int = SENDFILE_MIN_BYTES,
        max_connections: int | None = None,
        backlog: int = 512,
        listener_name: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        ssl_context: ssl.SSLContext | None = None,
        ssl_handshake_timeout_s: float = DEFAULT_SSL_HANDSHAKE_TIMEOUT_S,
        authenticator: Callable[[], SaslServerAuthenticator] | None = None,
        sasl_max_receive_bytes: int = DEFAULT_SASL_MAX_RECEIVE,
        failed_authentication_delay_ms: int = 100,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000
        self.sendfile_min_bytes = sendfile_min_bytes
        self.max_connections = max_connections
        self.backlog = backlog
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.ssl_context = ssl_context
        self.ssl_handshake_timeout_s = ssl_handshake_timeout_s
        self.authenticator = authenticator
        self.sasl_max_receive_bytes = sasl_max_receive_bytes
        self.failed_authentication_delay_s = failed_authentication_delay_ms / 1000
        self._server: asyncio.Server | None = None
        self._connections: dict[asyncio.Task[None], KafkaConnection] = {}
        self._closing = False

    @property
    def connection_count(self) -> int:
        """Connections open now (what `max_connections` bounds)."""
        return len(self._connections)

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
        tls: dict[str, Any] = {}
        if self.ssl_context is not None:
            tls = {"ssl": self.ssl_context, "ssl_handshake_timeout": self.ssl_handshake_timeout_s}
        receive = receive_buffer()
        self._server = await asyncio.get_running_loop().create_server(
            lambda: KafkaConnection(self._serve, receive),
            self.host,
            self.port,
            backlog=self.backlog,
            **tls,
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        self.port = port
        log.info(
            "Kafka listener %s (%s) on %s:%d",
            self.listener_name,
            self.security_protocol,
            host,
            port,
        )
        return host, port

    async def close(self) -> None:
        """Stop listening and drop every connection (in-flight requests are cancelled).

        Each connection is aborted as well as cancelled: on 3.11 a cancellation can be
        swallowed (asyncio.wait_for returns a result that raced with it, as a long-poll
        Fetch's wait can), and a connection task that lived on would keep serving its
        client forever and this close would never return.
        """
        self._closing = True
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections.items())
        for t, conn in tasks:
            conn.abort()
            t.cancel()
        await asyncio.gather(*(t for t, _ in tasks), return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, conn: KafkaConnection) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = conn.get_extra_info("peername")
        open_now = self.connection_count
        if self.max_connections is not None and open_now >= self.max_connections:
            log.warning("refusing %s: %d connections already", peer, open_now)
            conn.close()
            return
        if self._closing:  # accepted just before close(), started after it
            conn.abort()
            return
        self._connections[task] = conn
        session = Session(
            self.listener_name,
            self.security_protocol,
            ANONYMOUS,
            peer[0] if isinstance(peer, tuple) and peer else "",
            self.authenticator is None,
        )
        try:
            if self.ssl_context is not None and self.authenticator is None:
                ssl_object = conn.get_extra_info("ssl_object")
                der = ssl_object.getpeercert(binary_form=True) if ssl_object else None
                session.principal = principal_from_certificate(der) or ANONYMOUS
            set_session(session)
            if self.authenticator is not None and not await self._authenticate(
                conn, peer, session, self.authenticator()
            ):
                return
            await self._connection(conn, peer)
        except (ConnectionError, OSError) as e:
            log.debug("connection %s failed: %s", peer, e)
        except asyncio.CancelledError:
            pass  # server shutdown
        except Exception:
            log.exception("connection %s failed", peer)
        finally:
            self._connections.pop(task, None)
            conn.close()
            with contextlib.suppress(Exception):
                await conn.wait_closed()

    async def _read_frame(self, conn: KafkaConnection, peer: Any, max_bytes: int) -> bytes | None:
        """The next frame, or None when the connection must close (the reason logged)."""
        try:
            async with asyncio.timeout(self.idle_s):
                return await conn.read_frame(max_bytes)
        except FrameSizeError as e:
            log.warning("closing %s: %s", peer, e)
        except TimeoutError:
            log.info("closing %s: idle for %.0f s", peer, self.idle_s)
        except asyncio.IncompleteReadError as e:
            if e.partial:
                log.info("closing %s: connection ended inside a frame", peer)
        return None

    async def _authenticate(
        self,
        conn: KafkaConnection,
        peer: Any,
        session: Session,
        auth: SaslServerAuthenticator,
    ) -> bool:
        """The SASL exchange; True once the client has logged in (the session says who)."""
        max_bytes = min(self.max_request_bytes, self.sasl_max_receive_bytes)
        while not auth.complete:
            frame = await self._read_frame(conn, peer, max_bytes)
            if frame is None:
                return False
            step = auth.receive(frame)
            response = step.response
            if step.dispatch:
                try:
                    response = await self.handler(frame)
                except CloseConnection as e:
                    log.warning("closing %s: %s", peer, e)
                    return False
            if step.failed_login:
                log.info("closing %s: SASL authentication failed", peer)
                await asyncio.sleep(self.failed_authentication_delay_s)  # slows guessing
            elif step.close is not None:
                log.warning("closing %s: %s", peer, step.close)
            if isinstance(response, bytes | bytearray):
                conn.write(response)
                await conn.drain()
            if step.close is not None:
                return False
        assert auth.principal is not None
        session.principal = auth.principal
        session.authenticated = True
        return True

    async def _connection(self, conn: KafkaConnection, peer: Any) -> None:
        loop = asyncio.get_running_loop()
        max_bytes = self.max_request_bytes
        while True:
            frame = await self._read_frame(conn, peer, max_bytes)
            if frame is None:
                return
            try:
                response = await self.handler(frame)
            except CloseConnection as e:
                log.warning("closing %s: %s", peer, e)
                return
            if response is None:
                continue
            if isinstance(response, bytes | bytearray):
                conn.write(response)
            else:
                await self._write_parts(loop, conn, response)
            await conn.drain()

    async def _write_parts(
        self, loop: asyncio.AbstractEventLoop, conn: KafkaConnection, parts: list[Any]
    ) -> None:
        """One write per response (one send syscall when the socket takes it): the
        buffers and small slices are gathered into one buffer, slices read straight
        into it; only slices big enough for sendfile go on their own."""
        gathered: list[Any] = []
        for part in parts:
            if (
                isinstance(part, FileSlice)
                and part.size >= self.sendfile_min_bytes
                and self.ssl_context is None
            ):
                _write_gathered(conn, gathered)
                gathered = []
                # FileSlice holds its file open, so the bytes stay readable even if
                # retention deletes the segment meanwhile.
                assert conn.transport is not None
                await loop.sendfile(conn.transport, part.file, part.position, part.size)
            else:
                gathered.append(part)
        _write_gathered(conn, gathered)


def _write_gathered(conn: KafkaConnection, parts: list[Any]) -> None:
    if not parts:
        return
    if len(parts) == 1 and not isinstance(parts[0], FileSlice):
        conn.write(parts[0])
        return
    total = sum(p.size if isinstance(p, FileSlice) else len(p) for p in parts)
    buf = bytearray(total)
    view = memoryview(buf)
    pos = 0
    for p in parts:
        if isinstance(p, FileSlice):
            p.read_into(view[pos : pos + p.size])
            pos += p.size
        else:
            n = len(p)
            view[pos : pos + n] = p
            pos += n
    view.release()
    conn.write(buf)
