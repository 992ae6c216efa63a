"""One Kafka connection's transport side: size-prefixed frames in, bytes out.

An asyncio `BufferedProtocol`, so the transport reads into buffers we hand it:
- into the listener's receive buffer (shared: what is read is moved out of it at once,
  into the connection's pending bytes), from which small frames are cut;
- once `read_frame` knows the size of a frame that has not fully arrived, the rest of it
  is read straight into that frame's own buffer (in chunks of `FRAME_CHUNK_BYTES`, so a
  size prefix alone never makes us allocate more), and the waiting task is woken once,
  when the frame is complete.

Why not asyncio's StreamReader: it copies every chunk into its buffer, copies each frame
out twice, and wakes the reading task on every chunk. Over TLS it was far worse: to a
protocol that is not a BufferedProtocol, asyncio's SSLProtocol hands each decrypted TLS
record as a new bytes object (allocated at `SSLProtocol.max_size`, 256 KiB, then shrunk),
then a join of them all. librdkafka writes one TLS record per buffer segment, and in a
produce request of 1 KiB messages each message it did not copy into its batch buffer is
two records (its header, its value): ~45,000 records per 100,000 messages in the broker
bench, each a 256 KiB allocation. Here records are decrypted straight into the frame.

Reading follows Kafka's muted channel: the size limit is applied when `read_frame` reads
the size (its caller knows whether the client has logged in yet), and while no one reads,
at most `MAX_PENDING_BYTES` (plus one read) are buffered before the transport stops
reading; an idle connection holds no buffer.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

_SIZE = struct.Struct(">i")
RECEIVE_BUFFER_BYTES = 256 << 10  # what asyncio reads at a time (selector and SSL transports)
MAX_PENDING_BYTES = 256 << 10
# A frame's buffer is allocated at most this far ahead of its bytes (a frame of up to
# this size, the usual case, is one buffer; bigger ones are joined when complete).
FRAME_CHUNK_BYTES = 8 << 20


def receive_buffer() -> memoryview:
    """A receive buffer for the connections of one listener (one event loop)."""
    return memoryview(bytearray(RECEIVE_BUFFER_BYTES))


class FrameSizeError(Exception):
    """A size prefix outside [0, max_bytes]; nothing was allocated for it."""

    def __init__(self, size: int, max_bytes: int) -> None:
        super().__init__(f"request size {size} is outside [0, {max_bytes}]")
        self.size = size


class KafkaConnection(asyncio.BufferedProtocol):
    """Frames in with `read_frame`; `write`/`drain`/`close`/`wait_closed` as a
    StreamWriter's. `serve(connection)` runs as the connection's task.

    `receive` may be shared by connections on the same event loop: a transport calls
    get_buffer, reads, and calls buffer_updated without yielding in between.
    """

    def __init__(
        self, serve: Callable[[KafkaConnection], Awaitable[None]], receive: memoryview
    ) -> None:
        self._serve = serve
        self._receive = receive
        self.transport: asyncio.Transport | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending = bytearray()  # read, not yet taken by read_frame
        # A frame being read straight into place: its chunks, the unfilled part of the
        # last one, and how many of its bytes are still to come.
        self._chunks: list[bytearray] = []
        self._chunk_view = memoryview(b"")
        self._missing = 0
        self._reading_paused = False
        self._eof = False
        self._error: BaseException | None = None
        self._read_waiter: asyncio.Future[None] | None = None
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- the protocol (called by the transport) ---------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        # Held here so the task lives as long as its connection (the loop keeps weak refs).
        self._task = asyncio.get_running_loop().create_task(self._serve(self))

    def get_buffer(self, sizehint: int) -> memoryview:
        # Never an empty buffer: SSLProtocol would take the 0 bytes read for the end.
        if self._missing:
            if not self._chunk_view:
                self._add_chunk()
            return self._chunk_view
        return self._receive

    def buffer_updated(self, nbytes: int) -> None:
        if self._missing:
            self._chunk_view = self._chunk_view[nbytes:]
            self._missing -= nbytes
            if not self._missing:
                self._wake_reader()
            return
        self._pending += self._receive[:nbytes]
        if len(self._pending) >= MAX_PENDING_BYTES:
            self._pause_reading()  # until read_frame takes bytes out
        self._wake_reader()

    def eof_received(self) -> bool:
        self._eof = True
        self._wake_reader()
        # Keep a plain socket half-open, as StreamReaderProtocol does: we close it. (An
        # SSL transport warns on True and closes anyway.)
        assert self.transport is not None
        return self.transport.get_extra_info("sslcontext") is None

    def connection_lost(self, exc: Exception | None) -> None:
        self._eof = True
        self._error = exc
        self._wake_reader()
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_exception(exc or ConnectionResetError("Connection lost"))
        self._drain_waiters.clear()
        if not self._closed.done():
            self._closed.set_result(None)

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        for waiter in self._drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self._drain_waiters.clear()

    # -- reading ----------------------------------------------------------------------------

    async def read_frame(self, max_bytes: int) -> bytes:
        """The next frame (without its size). Raises FrameSizeError for a size outside
        [0, max_bytes], asyncio.IncompleteReadError at the end of the stream (`partial`
        holds what came of an unfinished frame), or the error that broke the connection."""
        while True:
            if self._chunks:
                if not self._missing:
                    chunks, self._chunks = self._chunks, []
                    self._chunk_view = memoryview(b"")  # holds no chunk between frames
                    return bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)
            elif len(self._pending) >= 4:
                size = _SIZE.unpack_from(self._pending)[0]
                if size < 0 or size > max_bytes:
                    raise FrameSizeError(size, max_bytes)
                have = len(self._pending) - 4
                if have >= size:
                    with memoryview(self._pending) as pending:
                        frame = bytes(pending[4 : 4 + size])
                    del self._pending[: 4 + size]
                    self._resume_reading()
                    return frame
                # The rest of this frame is read straight into it (have < MAX_PENDING_BYTES
                # + one read < FRAME_CHUNK_BYTES: the bytes so far fit its first chunk).
                self._missing = size
                self._add_chunk()
                self._chunk_view[:have] = self._pending[4:]
                self._chunk_view = self._chunk_view[have:]
                self._missing -= have
                self._pending.clear()
                self._resume_reading()
                continue
            if self._error is not None:
                raise self._error
            if self._eof:
                raise asyncio.IncompleteReadError(self._partial(), None)
            self._read_waiter = asyncio.get_running_loop().create_future()
            try:
                await self._read_waiter
            finally:
                self._read_waiter = None

    def _add_chunk(self) -> None:
        """The next buffer of the frame being read: up to FRAME_CHUNK_BYTES of it."""
        chunk = bytearray(min(self._missing, FRAME_CHUNK_BYTES))
        self._chunks.append(chunk)
        self._chunk_view = memoryview(chunk)

    def _partial(self) -> bytes:
        if self._chunks:
            *full, last = self._chunks
            return b"".join([*full, memoryview(last)[: len(last) - len(self._chunk_view)]])
        return bytes(self._pending)

    def _wake_reader(self) -> None:
        if self._read_waiter is not None and not self._read_waiter.done():
            self._read_waiter.set_result(None)

    def _pause_reading(self) -> None:
        if not self._reading_paused and self.transport is not None:
            self._reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if (
            self._reading_paused
            and len(self._pending) < MAX_PENDING_BYTES
            and self.transport is not None
        ):
            self._reading_paused = False
            self.transport.resume_reading()

    # -- writing (as asyncio.StreamWriter) --------------------------------------------------

    def write(self, data: Any) -> None:
        assert self.transport is not None
        self.transport.write(data)

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its high-water mark."""
        if self._closed.done():
            raise ConnectionResetError("Connection lost")
        if not self._writing_paused:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._drain_waiters.append(waiter)
        await waiter

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        assert self.transport is not None
        return self.transport.get_extra_info(name, default)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now, dropping unsent data (the peer may never read it)."""
        if self.transport is not None:
            self.transport.abort()

    async def wait_closed(self) -> None:
        await self._closed


class FrameReceiver(asyncio.BufferedProtocol):
    """The client side of a connection (our follower fetcher): response frames read
    straight into their own buffer. Installed on a connected transport in place of
    asyncio's StreamReaderProtocol (which copies each chunk into its buffer and each
    frame out of it again), so a fetch answer's records reach the log with no copy.

    Small frames and the start of big ones are read through a scratch buffer; once a
    frame's size is known, the rest of it is read into the frame itself.
    """

    def __init__(self, max_bytes: int, leftover: bytes = b"") -> None:
        self.max_bytes = max_bytes
        # A memoryview, never the bytearray: SSLProtocol fills the rest of a buffer
        # through `buf[offset:]`, which of a bytearray would be a copy.
        self._scratch = memoryview(bytearray(64 << 10))
        self._pending = bytearray(leftover)
        self._frame = bytearray()
        self._view = memoryview(self._frame)
        self._missing = 0
        self._frames: list[bytearray] = []
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._cut()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._view if self._missing else self._scratch

    def buffer_updated(self, nbytes: int) -> None:
        if self._missing:
            self._view = self._view[nbytes:]
            self._missing -= nbytes
            if not self._missing:
                self._frames.append(self._frame)
                self._view = memoryview(b"")
                self._wake()
            return
        self._pending += self._scratch[:nbytes]
        self._cut()

    def _cut(self) -> None:
        pending = self._pending
        while len(pending) >= 4 and not self._error:
            size = _SIZE.unpack_from(pending)[0]
            if size < 0 or size > self.max_bytes:
                self._error = ConnectionError(f"a {size}-byte frame (at most {self.max_bytes})")
                break
            have = len(pending) - 4
            if have >= size:
                self._frames.append(pending[4 : 4 + size])
                del pending[: 4 + size]
                continue
            self._frame = bytearray(size)
            self._frame[:have] = memoryview(pending)[4:]
            self._view = memoryview(self._frame)[have:]
            self._missing = size - have
            pending.clear()
            break
        self._wake()

    def eof_received(self) -> bool:
        self.connection_lost(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if self._error is None:
            self._error = exc or ConnectionResetError("connection closed by the peer")
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read_frame(self) -> bytearray:
        """The next frame (without its size prefix)."""
        while not self._frames:
            if self._error is not None:
                raise self._error
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        return self._frames.pop(0)
