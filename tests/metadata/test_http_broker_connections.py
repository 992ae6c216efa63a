"""The controller's HTTP layer reports a broker whose connections all closed (its process
died: the kernel closes them) as a `disconnected` BrokerUnreachableRequest, and decides
nothing itself (kraft/broker_connections.py; the rule is kraft/cluster_control.py)."""

from __future__ import annotations

import asyncio

import aiohttp

from metadata_log import controller_api as api
from tests.harness.fake_controller_service import HEARTBEAT, FakeService, async_test, serve


def reports(fake: FakeService) -> list[object]:
    return [req for name, req in fake.calls if name == "broker_unreachable"]


async def wait_until(cond: object, timeout_s: float = 5.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not cond():  # type: ignore[operator]
            await asyncio.sleep(0.02)


@async_test
async def test_the_last_connection_of_an_incarnation_closing_is_reported() -> None:
    fake = FakeService()
    async with serve(fake) as client:
        url = str(client.make_url("/v1/brokers/heartbeat"))
        header = {"X-Kraft-Broker": "1:10"}
        # Two connections of broker 1 (e.g. heartbeats and the metadata long-poll).
        first = aiohttp.ClientSession()
        second = aiohttp.ClientSession()
        for s in (first, second):
            async with s.post(url, json=HEARTBEAT, headers=header) as resp:
                assert resp.status == 200
        # A client without the header (an admin tool) is never reported.
        async with aiohttp.ClientSession() as anon, anon.post(url, json=HEARTBEAT) as resp:
            assert resp.status == 200
        await first.close()
        await asyncio.sleep(0.3)  # three checks: one connection is still open
        assert reports(fake) == []
        await second.close()
        await wait_until(lambda: reports(fake))
        assert reports(fake) == [api.BrokerUnreachableRequest(1, 10, -1, "disconnected")]


@async_test
async def test_a_controller_that_is_not_active_just_drops_the_report() -> None:
    fake = FakeService()
    async with serve(fake) as client:
        url = str(client.make_url("/v1/brokers/heartbeat"))
        async with aiohttp.ClientSession() as s:
            async with s.post(url, json=HEARTBEAT, headers={"X-Kraft-Broker": "2:11"}) as r:
                assert r.status == 200
            fake.active = False  # the report raises NotActiveController
        await asyncio.sleep(0.3)
        fake.active = True
        assert reports(fake) == []
        resp = await client.post("/v1/brokers/heartbeat", json=HEARTBEAT)
        assert resp.status == 200  # still serving


@async_test
async def test_a_malformed_header_is_ignored() -> None:
    fake = FakeService()
    async with serve(fake) as client:
        url = str(client.make_url("/v1/brokers/heartbeat"))
        async with aiohttp.ClientSession() as s:
            for bad in ("1", "x:1", "1:-1", "1:2:3", "9" * 12 + ":1"):
                async with s.post(url, json=HEARTBEAT, headers={"X-Kraft-Broker": bad}) as r:
                    assert r.status == 200
        await asyncio.sleep(0.3)
        assert reports(fake) == []


@async_test
async def test_a_new_epoch_on_the_same_connection_is_the_one_reported() -> None:
    fake = FakeService()
    async with serve(fake) as client:
        url = str(client.make_url("/v1/brokers/heartbeat"))
        s = aiohttp.ClientSession()
        for ident in ("3:10", "3:12"):  # registered again, on the kept-alive connection
            async with s.post(url, json=HEARTBEAT, headers={"X-Kraft-Broker": ident}) as r:
                assert r.status == 200
        await s.close()
        await wait_until(lambda: reports(fake))
        await asyncio.sleep(0.3)  # and nothing about the old epoch follows
        assert reports(fake) == [api.BrokerUnreachableRequest(3, 12, -1, "disconnected")]
