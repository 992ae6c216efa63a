"""The broker's link to the controllers (controller channel, broker lifecycle, metadata
loader) against fake controllers (aiohttp on 127.0.0.1).

The fakes share one metadata log, as real controllers do, and each can be told to be the
active controller, a follower that redirects (307) or one that knows no leader (503),
or to have trimmed its log (410). What is under test is the broker side: registration,
heartbeats, following the log from a snapshot, failover between controllers, retries.
Real controller processes are exercised by tests/cluster/test_dev_cluster.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import msgspec
from aiohttp import web
from aiohttp.test_utils import TestServer

from broker.controller_channel import ControllerChannel, ControllerError
from broker.lifecycle import BrokerLifecycleManager
from broker.metadata_loader import MetadataLoader
from broker.metadata_publisher import LoaderManifest
from metadata_log import controller_api as api
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.records import (
    Endpoint,
    NoOpRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    encode,
)
from metadata_log.snapshot import encode_snapshot

T = TypeVar("T")
EP = Endpoint("PLAINTEXT", "127.0.0.1", 9092)


def run(fn: Callable[..., Coroutine[Any, Any, T]]) -> Callable[..., T]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        return asyncio.run(fn(*args, **kwargs))

    return wrapper


async def eventually(probe: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.01)
    return value


class SharedLog:
    """The replicated metadata log all fake controllers serve."""

    def __init__(self) -> None:
        self.records: list[tuple[int, Record]] = []
        self.image = MetadataImage()
        self.trimmed_before = 0  # offsets below this answer 410
        self.changed = asyncio.Event()
        self.heartbeats: list[api.BrokerHeartbeatRequest] = []
        self.shutdown_after = 2  # heartbeats with want_shutdown before "go"

    def append(self, *records: Record) -> int:
        delta = MetadataDelta(self.image)
        first = len(self.records)
        for r in records:
            if isinstance(r, RegisterBrokerRecord):
                r = msgspec.structs.replace(r, broker_epoch=len(self.records))
            delta.replay(r, len(self.records))
            self.records.append((len(self.records), r))
        self.image = delta.apply()
        self.wake()
        return first

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class FakeController:
    def __init__(self, log: SharedLog) -> None:
        self.log = log
        self.role = "active"  # or "redirect" (to `leader`) or "unavailable"
        self.leader: FakeController | None = None
        self.server: TestServer | None = None
        self.writes = 0
        self.closing = False

    @property
    def address(self) -> str:
        assert self.server is not None
        return f"127.0.0.1:{self.server.port}"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/brokers/register", self._write(self.register))
        app.router.add_post("/v1/brokers/heartbeat", self._write(self.heartbeat))
        app.router.add_post("/v1/producer-ids", self._write(self.producer_ids))
        app.router.add_get("/v1/metadata/log", self.metadata_log)
        app.router.add_get("/v1/metadata/snapshot", self.snapshot)
        self.server = TestServer(app, host="127.0.0.1")
        await self.server.start_server()

    async def close(self) -> None:
        if self.server is not None:
            self.closing = True
            self.log.wake()  # end the long-polls, or closing waits for them
            await self.server.close()

    def _write(self, fn: Callable[[bytes], msgspec.Struct]) -> Any:
        async def handler(request: web.Request) -> web.Response:
            self.writes += 1
            if self.role == "unavailable" or (self.role == "redirect" and self.leader is None):
                return web.json_response({"error_code": 41, "error_message": "none"}, status=503)
            if self.role == "redirect":
                assert self.leader is not None
                location = f"http://{self.leader.address}{request.raw_path}"
                return web.Response(status=307, headers={"Location": location})
            body = fn(await request.read())
            return web.Response(body=msgspec.json.encode(body), content_type="application/json")

        return handler

    def register(self, raw: bytes) -> msgspec.Struct:
        req = msgspec.json.decode(raw, type=api.BrokerRegistrationRequest)
        offset = self.log.append(
            RegisterBrokerRecord(req.broker_id, req.incarnation_id, -1, tuple(req.listeners))
        )
        return api.BrokerRegistrationResponse(0, offset)

    def heartbeat(self, raw: bytes) -> msgspec.Struct:
        req = msgspec.json.decode(raw, type=api.BrokerHeartbeatRequest)
        self.log.heartbeats.append(req)
        b = self.log.image.brokers[req.broker_id]
        caught_up = req.current_metadata_offset >= b.broker_epoch
        if b.fenced and caught_up and not req.want_fence:
            self.log.append(UnfenceBrokerRecord(b.broker_id, b.broker_epoch))
        shutting = [h for h in self.log.heartbeats if h.want_shutdown]
        return api.BrokerHeartbeatResponse(
            0,
            is_caught_up=caught_up,
            is_fenced=self.log.image.brokers[req.broker_id].fenced,
            should_shut_down=len(shutting) >= self.log.shutdown_after,
        )

    def producer_ids(self, raw: bytes) -> msgspec.Struct:
        return api.AllocateProducerIdsResponse(0, 1000, 10)

    async def metadata_log(self, request: web.Request) -> web.Response:
        start = int(request.query["from"])
        if self.closing:
            return web.json_response({"error_code": 41, "error_message": "closing"}, status=503)
        if self.role == "silent":  # accepts, never answers: killed while we were cut off
            await asyncio.Event().wait()
        if start < self.log.trimmed_before:
            return web.json_response({"error_code": 1, "error_message": "trimmed"}, status=410)
        if start >= len(self.log.records):
            changed = self.log.changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), int(request.query["wait_ms"]) / 1000)
        if self.role == "silent":  # a poll already waiting goes silent too
            await asyncio.Event().wait()
        entries = self.log.records[start:]
        raw = {
            "records": [{"offset": o, "record": msgspec.Raw(encode(r))} for o, r in entries],
            "next_offset": start + len(entries),
        }
        return web.Response(body=msgspec.msgpack.encode(raw), content_type="application/msgpack")

    async def snapshot(self, request: web.Request) -> web.Response:
        return web.Response(
            body=encode_snapshot(self.log.image),
            headers={"X-Next-Offset": str(self.log.image.offset + 1)},
        )


class Broker:
    """What BrokerServer builds of the controller side: the channel, the lifecycle, the
    loader with a recording publisher and the lifecycle as its publishers."""

    def __init__(self, controllers: list[tuple[str, int]], broker_id: int) -> None:
        self.updates: list[tuple[MetadataImage, LoaderManifest]] = []
        self.channel = ControllerChannel(broker_id, controllers, request_timeout_ms=2000)
        self.lifecycle = BrokerLifecycleManager(self.channel, [EP], heartbeat_interval_ms=50)
        self.loader = MetadataLoader(self.channel)
        self.loader.publishers += [self, self.lifecycle]

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        self.updates.append((image, manifest))

    @property
    def image(self) -> MetadataImage:
        return self.loader.image

    async def start(self) -> None:
        await self.channel.start()
        self.loader.start()
        self.lifecycle.start()

    async def stop(self) -> None:
        await self.loader.stop()
        await self.lifecycle.stop()
        await self.channel.close()


class Setup:
    def __init__(self, n: int = 2) -> None:
        self.log = SharedLog()
        self.controllers = [FakeController(self.log) for _ in range(n)]
        self.broker: Broker | None = None

    @property
    def updates(self) -> list[tuple[MetadataImage, LoaderManifest]]:
        assert self.broker is not None
        return self.broker.updates

    async def __aenter__(self) -> Setup:
        for c in self.controllers:
            await c.start()
        self.log.append(TopicRecord("t", "0b8c1a52-3d5b-4d7e-9a55-0a4b2f3c1d10"))
        return self

    def make_broker(self, broker_id: int = 0) -> Broker:
        self.broker = Broker(
            [("127.0.0.1", int(c.address.rsplit(":", 1)[1])) for c in self.controllers],
            broker_id,
        )
        return self.broker

    async def __aexit__(self, *exc: object) -> None:
        if self.broker is not None:
            await self.broker.stop()
        for c in self.controllers:
            await c.close()


@run
async def test_registers_through_a_redirect_catches_up_and_gets_unfenced() -> None:
    async with Setup() as s:
        a, b = s.controllers
        a.role, a.leader = "redirect", b  # the channel starts with controller 0: a
        ch = s.make_broker(broker_id=0)
        await ch.start()
        await ch.lifecycle.wait_until_caught_up(5)
        assert ch.lifecycle.fenced and s.log.image.brokers[0].fenced  # not before we can serve
        ch.lifecycle.ready_to_unfence()
        await ch.lifecycle.wait_until_unfenced(5)
        assert not s.log.image.brokers[0].fenced
        image, manifest = s.updates[0]
        assert manifest.snapshot and image.topic_by_name("t") is not None
        assert b.writes > 0  # registration and heartbeats reached the active one
        pid = await ch.channel.allocate_producer_ids(ch.lifecycle.broker_epoch)
        assert (pid.producer_id_start, pid.producer_id_len) == (1000, 10)


@run
async def test_writes_go_around_a_controller_without_a_leader() -> None:
    async with Setup() as s:
        a, b = s.controllers
        a.role = "unavailable"
        ch = s.make_broker(broker_id=0)
        await ch.start()
        await ch.lifecycle.wait_until_caught_up(5)
        assert a.writes >= 1 and b.writes >= 1


@run
async def test_writes_time_out_when_no_controller_can_take_them() -> None:
    async with Setup() as s:
        for c in s.controllers:
            c.role = "unavailable"
        ch = s.make_broker()
        await ch.start()
        t0 = time.monotonic()
        try:
            await ch.channel.post(
                "/v1/producer-ids",
                api.AllocateProducerIdsRequest(0, 0),
                api.AllocateProducerIdsResponse,
                timeout_s=0.5,
            )
        except TimeoutError:
            pass
        else:
            raise AssertionError("expected a timeout")
        assert time.monotonic() - t0 < 3


@run
async def test_a_4xx_is_an_error_not_a_retry() -> None:
    async with Setup() as s:
        ch = s.make_broker()
        await ch.start()
        try:
            await ch.channel.post(
                "/v1/nope", api.AllocateProducerIdsRequest(0, 0), api.ErrorResponse
            )
        except ControllerError as exc:
            assert exc.error_code == 42  # aiohttp's 404 body is not ours: INVALID_REQUEST
        else:
            raise AssertionError("expected ControllerError")


@run
async def test_follows_new_records_and_reloads_a_snapshot_after_a_gap() -> None:
    async with Setup() as s:
        ch = s.make_broker()
        await ch.start()
        await ch.lifecycle.wait_until_caught_up(5)
        s.log.append(NoOpRecord())
        await eventually(lambda: ch.image.offset == s.log.image.offset, 5, "the new record")
        assert any(not m.snapshot for _, m in s.updates)
        # the log moves on and is trimmed past us while we are away
        await ch.stop()
        for _ in range(5):
            s.log.append(NoOpRecord())
        s.log.trimmed_before = len(s.log.records) - 1
        n = len(s.updates)
        await ch.start()
        await eventually(lambda: ch.image.offset == s.log.image.offset, 5, "catching up")
        assert any(m.snapshot for _, m in s.updates[n:])


@run
async def test_survives_the_controller_it_reads_from_going_away() -> None:
    async with Setup() as s:
        a, b = s.controllers
        ch = s.make_broker(broker_id=0)  # reads from a first
        await ch.start()
        await ch.lifecycle.wait_until_caught_up(5)
        await a.close()
        s.log.append(NoOpRecord())
        await eventually(lambda: ch.image.offset == s.log.image.offset, 10, "failover to b")


@run
async def test_a_long_poll_that_is_never_answered_moves_to_another_controller(
    monkeypatch: Any,
) -> None:
    """The controller the loader reads from keeps the connection open and never answers
    (killed while we were cut off, or paused): the loader gives up after the poll's wait
    plus a margin and reads from another, not after the channel's request timeout (here
    60 s, beyond the deadline)."""
    import broker.metadata_loader as loader

    monkeypatch.setattr(loader, "LONG_POLL_WAIT_MS", 200)
    monkeypatch.setattr(loader, "LONG_POLL_MARGIN_MS", 300)
    async with Setup() as s:
        a, _ = s.controllers
        ch = s.make_broker(broker_id=0)  # reads from a first
        ch.channel.request_timeout_s = 60.0
        await ch.start()
        await ch.lifecycle.wait_until_caught_up(5)
        a.role = "silent"
        s.log.append(NoOpRecord())
        await eventually(lambda: ch.image.offset == s.log.image.offset, 10, "reading from b")
        a.role = "active"


@run
async def test_controlled_shutdown_waits_for_go_then_asks_to_be_fenced() -> None:
    async with Setup() as s:
        ch = s.make_broker()
        await ch.start()
        await ch.lifecycle.wait_until_caught_up(5)
        ch.lifecycle.ready_to_unfence()
        await ch.lifecycle.wait_until_unfenced(5)
        assert await ch.lifecycle.controlled_shutdown(5)
        assert s.log.heartbeats[-1].want_fence and not s.log.heartbeats[-1].want_shutdown
        assert sum(h.want_shutdown for h in s.log.heartbeats) >= 2
