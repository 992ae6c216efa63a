"""Requests from this broker to another broker's inter-broker listener (the
transaction coordinator's WriteTxnMarkers and KIP-890 verification), encoded with kio.

Connections to each target broker are opened on demand with the listener's TLS and
SASL settings (`inter_broker_login.connect`, as the follower fetchers do) and reused;
one request at a time on each, and up to `max_connections` of them per target, so
the markers of one transaction (acks=all appends, tens of milliseconds) do not hold up
another's or a KIP-890 verification. Any failure closes that connection and raises
`ConnectionError` (or TimeoutError; the caller decides whether to retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable
from typing import Any

from broker import wire_call
from broker.security.inter_broker_login import connect
from broker.security.listener_security import InterBrokerClientSecurity

_MAX_FRAME = 100 << 20


class _Conn:
    def __init__(self) -> None:
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class _Pool:
    """The connections to one broker: idle ones, and a bound on how many are in use."""

    def __init__(self, size: int) -> None:
        self.idle: list[_Conn] = []
        self.slots = asyncio.Semaphore(size)


class InterBrokerClient:
    def __init__(
        self,
        broker_id: int,
        endpoint_of: Callable[[int], tuple[str, int] | None],
        security: InterBrokerClientSecurity | None,
        timeout_ms: int = 30_000,
        max_connections: int = 4,
    ) -> None:
        self.broker_id = broker_id
        self._endpoint_of = endpoint_of  # the inter-broker listener of a broker id
        self._security = security
        self._timeout_s = timeout_ms / 1000
        self._max_connections = max_connections
        self._pools: dict[int, _Pool] = {}
        self._correlation = itertools.count(1)
        self._client_id = f"broker-{broker_id}"

    async def send(self, target: int, api_key: int, version: int, **body: Any) -> Any:
        """The response entity of one request to broker `target`; raises ConnectionError
        (or TimeoutError) when it cannot be had."""
        pool = self._pools.get(target)
        if pool is None:
            pool = self._pools[target] = _Pool(self._max_connections)
        async with pool.slots:
            conn = pool.idle.pop() if pool.idle else _Conn()
            try:
                async with asyncio.timeout(self._timeout_s):
                    if conn.writer is None:
                        endpoint = self._endpoint_of(target)
                        if endpoint is None:
                            raise ConnectionError(f"no endpoint known for broker {target}")
                        conn.reader, conn.writer = await connect(
                            *endpoint, self._security, self._client_id
                        )
                    assert conn.reader is not None
                    answer = await self._call(conn.reader, conn.writer, api_key, version, body)
            except BaseException:
                conn.close()
                raise
            pool.idle.append(conn)
            return answer

    async def _call(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        api_key: int,
        version: int,
        body: dict[str, Any],
    ) -> Any:
        cid = next(self._correlation) & 0x7FFFFFFF
        return await wire_call.call(
            reader, writer, api_key, version, self._client_id, cid, body, max_frame=_MAX_FRAME
        )

    async def close(self) -> None:
        writers = []
        for pool in self._pools.values():
            for conn in pool.idle:
                if conn.writer is not None:
                    writers.append(conn.writer)
                conn.close()
        self._pools.clear()
        for w in writers:
            with contextlib.suppress(Exception):
                await w.wait_closed()
