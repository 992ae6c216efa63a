"""A follower's refused connection to its leader reaches the controller as a `refused`
BrokerUnreachableRequest (broker/fetcher.py's hook -> broker/lifecycle.py), rate-limited,
naming the incarnation the follower's metadata knows; other connection failures do not."""

from __future__ import annotations

import asyncio
import errno
import socket
from typing import Any

from broker.fetcher import FetcherConfig, FetcherManager, FollowerFetchState, _refused
from broker.lifecycle import REPORT_EVERY_MS, BrokerLifecycleManager
from common.clock import ManualClock
from metadata_log.controller_api import BrokerUnreachableRequest, BrokerUnreachableResponse
from metadata_log.records import Endpoint, RegisterBrokerRecord
from metadata_log.snapshot import image_from_snapshot


class StubChannel:
    broker_id = 1
    controllers = ["http://c"]

    def __init__(self) -> None:
        self.sent: list[BrokerUnreachableRequest] = []

    def set_broker_epoch(self, epoch: int) -> None:
        pass

    async def broker_unreachable(
        self, req: BrokerUnreachableRequest, timeout_s: float
    ) -> BrokerUnreachableResponse:
        self.sent.append(req)
        return BrokerUnreachableResponse(0)


def test_refusals_only() -> None:
    assert _refused(ConnectionRefusedError(errno.ECONNREFUSED, "refused"))
    many = OSError(
        "Multiple exceptions: [Errno 111] Connect call failed ('::1', 9), "
        "[Errno 111] Connect call failed ('127.0.0.1', 9)"
    )
    assert _refused(many)
    mixed = OSError(
        "Multiple exceptions: [Errno 111] Connect call failed ('::1', 9), "
        "[Errno 113] Connect call failed ('10.0.0.1', 9)"
    )
    assert not _refused(mixed)  # one address may be a host that is gone: not certain
    assert not _refused(TimeoutError())  # a slow or unreachable host
    assert not _refused(asyncio.IncompleteReadError(b"", 4))  # the connection ended
    assert not _refused(ConnectionResetError())
    assert not _refused(OSError(errno.EHOSTUNREACH, "No route to host"))


def test_the_lifecycle_reports_a_refusal_at_most_every_interval() -> None:
    async def main() -> None:
        clock = ManualClock()
        channel = StubChannel()
        lm = BrokerLifecycleManager(
            channel,  # type: ignore[arg-type]
            [Endpoint("PLAINTEXT", "127.0.0.1", 9092)],
            clock=clock,
        )
        lm.report_refused(2)  # not registered yet: we could be a stale process
        await asyncio.sleep(0)
        assert channel.sent == []
        lm.broker_epoch = 5
        image = image_from_snapshot(9, [RegisterBrokerRecord(2, "inc", 7, (), None, fenced=False)])
        await lm.on_metadata_update(None, image, None)  # type: ignore[arg-type]
        lm.report_refused(2)
        lm.report_refused(2)
        lm.report_refused(3)  # unknown to our metadata: whichever incarnation is registered
        await asyncio.sleep(0)
        assert channel.sent == [
            BrokerUnreachableRequest(2, 7, 1, "refused"),
            BrokerUnreachableRequest(3, -1, 1, "refused"),
        ]
        clock.advance(REPORT_EVERY_MS)
        lm.report_refused(2)
        await asyncio.sleep(0)
        assert len(channel.sent) == 3
        await lm.stop()

    asyncio.run(main())


class OneTarget:
    def __init__(self, port: int) -> None:
        self.port = port

    def follower_fetch_state(self, tp: Any) -> FollowerFetchState:
        return FollowerFetchState(1, 0, -1, 0, "8f0c7a52-3d5b-4d7e-9a55-0a4b2f3c1d10")

    def leader_endpoint(self, broker_id: int) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    async def process_follower_data(self, tp: Any, sent: Any, data: Any) -> int:
        return 0


def test_a_fetcher_refused_by_its_leader_calls_the_hook() -> None:
    async def main() -> None:
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        seen: list[int] = []
        got = asyncio.Event()

        def on_refused(source: int) -> None:
            seen.append(source)
            got.set()

        manager = FetcherManager(3, FetcherConfig(backoff_ms=50))
        manager.target = OneTarget(port)  # type: ignore[assignment]
        manager.on_refused = on_refused
        manager.add_partitions({("t", 0): 2})
        try:
            async with asyncio.timeout(10):
                await got.wait()
        finally:
            await manager.shutdown()
        assert set(seen) == {2}

    asyncio.run(main())
