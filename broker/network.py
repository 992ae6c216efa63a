"""The Kafka listener: asyncio server, framing, limits, per-connection ordering.

Each connection is one task that reads a frame, awaits its response, writes it, and
only then reads the next frame: Kafka's "muted channel". Responses are therefore in
request order without a queue, a client that pipelines is simply read more slowly,
and a client that never reads its responses stalls only itself: once the transport's
write buffer passes its high-water mark `drain()` blocks, we stop reading, and TCP
pushes back on the sender. Memory per connection is bounded by one frame (plus the
stream and transport buffers' 64 KiB marks).

Kafka's rules, enforced here:
- a size prefix < 0 or > `socket.request.max.bytes` closes the connection before any
  allocation (a TLS ClientHello or "GET " read as a size is huge: same path);
- a frame that the handler cannot decode, or that Kafka says must close the connection,
  closes it with one log line (`CloseConnection`);
- `connections.max.idle.ms` bounds the wait for each whole frame, so neither an idle
  client nor a 1 byte/s drip holds a connection forever.

Records in Fetch responses arrive as `FileSlice`s. Slices of `sendfile_min_bytes` or
more go out with `loop.sendfile` (zero copy); smaller ones with one `pread` and a write,
which is faster below about 768 KiB (measurements at `SENDFILE_MIN_BYTES`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from broker.codec import CloseConnection
from storage.segment import FileSlice

log = logging.getLogger(__name__)

DEFAULT_MAX_REQUEST_BYTES = 104857600  # socket.request.max.bytes
DEFAULT_IDLE_MS = 600000  # connections.max.idle.ms
# loop.sendfile waits for the transport's buffer to empty and pauses reading around
# each call, which costs more than the copy it saves on all but large slices. Measured
# here (2 CPUs, loopback, one fetch at a time, client in another process), per fetch:
#   1 MiB: sendfile 490-540 us, pread+write 565-600 us (sendfile ~12% faster)
#   512 KiB: sendfile 305-365 us, pread+write 265-370 us
#   256 KiB: sendfile 255-350 us, pread+write 215-280 us
#   64 KiB: sendfile 235-280 us, pread+write 138-153 us
# so slices from 768 KiB up use sendfile, smaller ones one pread.
SENDFILE_MIN_BYTES = 768 << 10

_SIZE = struct.Struct(">i")

# The client's address as Kafka shows it ("/127.0.0.1"), for the request being handled
# (each connection is its own task, so its handler calls see their own value).
client_host: ContextVar[str] = ContextVar("client_host", default="")

RequestHandler = Callable[[bytes], Awaitable[Any]]


class KafkaServer:
    """Serves the Kafka protocol on one listener with `handler(frame) -> response`.

    The handler returns framed bytes, a list of buffers and FileSlices, or None (no
    response, e.g. acks=0); it raises `CloseConnection` to drop the client.
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
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000
        self.sendfile_min_bytes = sendfile_min_bytes
        self.max_connections = max_connections
        self.backlog = backlog
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def connection_count(self) -> int:
        """Connections open now (what `max_connections` bounds)."""
        return len(self._connections)

    async def start(self) -> tuple[str, int]:
        """Listen; returns the bound (host, port) (port 0 picks a free one)."""
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, backlog=self.backlog
        )
        host, port = self._server.sockets[0].getsockname()[:2]
        self.port = port
        log.info("Kafka listener on %s:%d", host, port)
        return host, port

    async def close(self) -> None:
        """Stop listening and drop every connection (in-flight requests are cancelled)."""
        if self._server is not None:
            self._server.close()
        tasks = list(self._connections)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        open_now = self.connection_count
        if self.max_connections is not None and open_now >= self.max_connections:
            log.warning("refusing %s: %d connections already", peer, open_now)
            writer.close()
            return
        self._connections.add(task)
        if isinstance(peer, tuple) and peer:
            client_host.set(f"/{peer[0]}")
        try:
            await self._connection(reader, writer, peer)
        except (ConnectionError, OSError) as e:
            log.debug("connection %s failed: %s", peer, e)
        except asyncio.CancelledError:
            pass  # server shutdown
        except Exception:
            log.exception("connection %s failed", peer)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: Any
    ) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                async with asyncio.timeout(self.idle_s):
                    size = _SIZE.unpack(await reader.readexactly(4))[0]
                    if size < 0 or size > self.max_request_bytes:
                        log.warning(
                            "closing %s: request size %d is outside [0, %d]",
                            peer,
                            size,
                            self.max_request_bytes,
                        )
                        return
                    frame = await reader.readexactly(size)
            except TimeoutError:
                log.info("closing %s: idle for %.0f s", peer, self.idle_s)
                return
            except asyncio.IncompleteReadError as e:
                if e.partial:
                    log.info("closing %s: connection ended inside a frame", peer)
                return
            try:
                response = await self.handler(frame)
            except CloseConnection as e:
                log.warning("closing %s: %s", peer, e)
                return
            if response is None:
                continue
            if isinstance(response, bytes | bytearray):
                writer.write(response)
            else:
                await self._write_parts(loop, writer, response)
            await writer.drain()

    async def _write_parts(
        self, loop: asyncio.AbstractEventLoop, writer: asyncio.StreamWriter, parts: list[Any]
    ) -> None:
        for part in parts:
            if not isinstance(part, FileSlice):
                writer.write(part)
            elif part.size >= self.sendfile_min_bytes:
                # FileSlice holds its file open, so the bytes stay readable even if
                # retention deletes the segment meanwhile.
                await loop.sendfile(writer.transport, part.file, part.position, part.size)
            else:
                writer.write(part.read())
