"""Closing a Kafka listener ends every connection, even one whose request handler loses
the cancellation (asyncio.wait_for on 3.11 returns a result that raced with a cancel, as
a long-poll Fetch's wait can): the connection is aborted, not only cancelled. Before,
such a connection kept serving its client and close() never returned (a test's teardown
hung a CI run)."""

from __future__ import annotations

import asyncio
import contextlib
import struct

from broker.network import KafkaServer


def test_close_ends_a_connection_whose_handler_swallows_the_cancel() -> None:
    async def scenario() -> None:
        started = asyncio.Event()

        async def handle(frame: bytes) -> bytes:
            started.set()
            with contextlib.suppress(asyncio.CancelledError):  # lost, as wait_for can
                await asyncio.sleep(60)
            return struct.pack(">i", 4) + b"done"

        server = KafkaServer(handle, "127.0.0.1", 0)
        _, port = await server.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(struct.pack(">i", 8) + b"request!")
        await writer.drain()
        await asyncio.wait_for(started.wait(), 10)
        await asyncio.wait_for(server.close(), 10)
        assert server.connection_count == 0
        # the client sees its connection end (no answer is owed to a closed listener)
        try:
            rest = await asyncio.wait_for(reader.read(), 10)
        except ConnectionResetError:
            rest = b""
        assert b"done" not in rest
        writer.close()

    asyncio.run(scenario())
