"""Unit tests of the controller HTTP layer (kraft/http_api.py) over a fake ControllerService.

The fake only records calls and answers canned responses: what is under test is routing,
validation, redirects, long-poll and error mapping. Real processes are tested elsewhere.
Tests drive a real aiohttp server over loopback TCP (TestServer), one event loop per test.
"""

from __future__ import annotations

import asyncio
import logging
import re

import msgspec
import pytest

from common.errors import Errors
from kraft.http_api import LogResponse
from metadata_log import controller_api as api
from metadata_log.records import (
    TopicRecord,
)
from metadata_log.snapshot import decode_snapshot
from tests.harness.fake_controller_service import (
    EP,
    HEARTBEAT,
    LOG,
    STATUS,
    TOPIC_ID,
    WRITES,
    FakeService,
    assert_still_serving,
    async_test,
    build_image,
    serve,
)

# -- writes: happy paths --------------------------------------------------------------------


@pytest.mark.parametrize(("path", "method", "body", "expected_req", "canned"), WRITES)
@async_test
async def test_write_routes_decode_and_answer(
    path: str, method: str, body: bytes, expected_req: object, canned: object
) -> None:
    fake = FakeService()
    async with serve(fake) as client:
        resp = await client.post(path, data=body)
        raw = await resp.read()
        assert fake.calls == [(method, expected_req)]
        if canned is None:
            assert resp.status == 204 and raw == b""
        else:
            assert resp.status == 200, raw
            assert resp.content_type == "application/json"
            assert raw == msgspec.json.encode(canned)


# -- writes on a follower, service failures -----------------------------------------------


@pytest.mark.parametrize(("path", "method", "body", "expected_req", "canned"), WRITES)
@async_test
async def test_follower_redirects_with_307_and_location(
    path: str, method: str, body: bytes, expected_req: object, canned: object
) -> None:
    fake = FakeService()
    fake.active, fake.leader_http = False, "10.0.0.9:8090"
    async with serve(fake) as client:
        resp = await client.post(f"{path}?x=1", data=body, allow_redirects=False)
        assert resp.status == 307
        assert resp.headers["Location"] == f"http://10.0.0.9:8090{path}?x=1"
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == Errors.NOT_CONTROLLER
        assert fake.calls == []


@async_test
async def test_redirect_is_followed_with_method_and_body_preserved() -> None:
    leader, follower = FakeService(), FakeService()
    async with serve(leader) as leader_client, serve(follower) as follower_client:
        follower.active = False
        follower.leader_http = f"{leader_client.server.host}:{leader_client.server.port}"
        body = {"topics": [{"name": "orders", "num_partitions": 6, "configs": {"k": "v"}}]}
        resp = await follower_client.post("/v1/topics", json=body)  # follows the 307
        assert resp.status == 200
        assert len(resp.history) == 1 and resp.history[0].status == 307
        assert leader.calls == [
            (
                "create_topics",
                api.CreateTopicsRequest([api.CreatableTopic("orders", 6, -1, None, {"k": "v"})]),
            )
        ]


@async_test
async def test_no_known_leader_is_503_not_controller() -> None:
    fake = FakeService()
    fake.active = False
    async with serve(fake) as client:
        resp = await client.post("/v1/brokers/heartbeat", json=HEARTBEAT)
        assert resp.status == 503
        assert resp.headers["Retry-After"] == "1"
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == Errors.NOT_CONTROLLER


@async_test
async def test_service_timeout_is_503_request_timed_out() -> None:
    fake = FakeService()
    fake.fail_with = TimeoutError()
    async with serve(fake) as client:
        resp = await client.post("/v1/topics/delete", json={"names": ["t"]})
        assert resp.status == 503
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == Errors.REQUEST_TIMED_OUT
        await assert_still_serving(client, fake)


@async_test
async def test_controller_api_error_is_400_with_its_code() -> None:
    from kraft.http_api import ControllerApiError

    fake = FakeService()
    fake.fail_with = ControllerApiError(Errors.INVALID_CONFIG, "unknown config x")
    async with serve(fake) as client:
        body = {"resource_type": 2, "resource_name": "t", "set": {"x": "1"}}
        resp = await client.post("/v1/configs", json=body)
        assert resp.status == 400
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert (err.error_code, err.error_message) == (
            Errors.INVALID_CONFIG,
            "unknown config x",
        )


@async_test
async def test_unexpected_service_error_is_generic_500_logged_and_server_survives() -> None:
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("kraft.http_api")
    logger.addHandler(handler)
    try:
        fake = FakeService()
        fake.fail_with = RuntimeError("secret internals")
        async with serve(fake) as client:
            resp = await client.post("/v1/brokers/heartbeat", json=HEARTBEAT)
            assert resp.status == 500
            err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
            assert err.error_code == Errors.UNKNOWN_SERVER_ERROR
            assert "secret" not in err.error_message
            await assert_still_serving(client, fake)
    finally:
        logger.removeHandler(handler)
    assert any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in records)


# -- the metadata log -----------------------------------------------------------------------


@async_test
async def test_log_returns_records_as_json_objects_with_offsets() -> None:
    async with serve(FakeService(LOG)) as client:
        resp = await client.get("/v1/metadata/log", params={"from": "0"})
        assert resp.status == 200
        doc = await resp.json()
        assert doc["next_offset"] == 3
        assert [e["offset"] for e in doc["records"]] == [0, 1, 2]
        assert doc["records"][1]["record"] == {
            "type": "topic",
            "name": "orders",
            "topic_id": TOPIC_ID,
        }
        typed = msgspec.json.decode(await resp.read(), type=LogResponse)
        assert [e.record for e in typed.records] == LOG

        resp = await client.get("/v1/metadata/log?from=1&max_records=1")
        typed = msgspec.json.decode(await resp.read(), type=LogResponse)
        assert [(e.offset, e.record) for e in typed.records] == [(1, LOG[1])]
        assert typed.next_offset == 2


@async_test
async def test_log_msgpack_format_decodes_to_the_same_response() -> None:
    async with serve(FakeService(LOG)) as client:
        as_json = await (await client.get("/v1/metadata/log?from=1")).read()
        resp = await client.get("/v1/metadata/log?from=1&format=msgpack")
        assert resp.status == 200 and resp.content_type == "application/msgpack"
        as_msgpack = msgspec.msgpack.decode(await resp.read(), type=LogResponse)
        assert as_msgpack == msgspec.json.decode(as_json, type=LogResponse)
        assert len(as_msgpack.records) == 2


@async_test
async def test_log_beyond_the_end_without_wait_is_empty() -> None:
    fake = FakeService(LOG)
    async with serve(fake) as client:
        doc = await (await client.get("/v1/metadata/log?from=100")).json()
        assert doc == {"records": [], "next_offset": 100}
        assert fake.wait_calls == []  # wait_ms=0 never parks


@async_test
async def test_long_poll_wakes_as_soon_as_a_record_commits() -> None:
    fake = FakeService(LOG)
    async with serve(fake) as client:
        poll = asyncio.ensure_future(client.get("/v1/metadata/log?from=3&wait_ms=30000"))
        await asyncio.wait_for(fake.waiting.wait(), 5)
        assert not poll.done()
        fake.commit(TopicRecord("late", TOPIC_ID))
        # Well before wait_ms: only the commit can have answered it.
        resp = await asyncio.wait_for(poll, 5)
        typed = msgspec.json.decode(await resp.read(), type=LogResponse)
        assert [(e.offset, e.record) for e in typed.records] == [(3, TopicRecord("late", TOPIC_ID))]
        assert typed.next_offset == 4
        assert fake.wait_calls == [(3, 30.0)]


@async_test
async def test_long_poll_times_out_cleanly_with_no_records() -> None:
    fake = FakeService(LOG)
    async with serve(fake) as client:
        resp = await client.get("/v1/metadata/log?from=3&wait_ms=50")
        assert resp.status == 200
        assert await resp.json() == {"records": [], "next_offset": 3}
        assert fake.wait_calls == [(3, 0.05)]


@async_test
async def test_long_poll_is_bounded_even_if_the_service_never_wakes_it() -> None:
    fake = FakeService(LOG)

    async def lost_wakeup(offset: int, timeout_s: float) -> bool:
        await asyncio.Event().wait()  # a callback that never comes
        return True

    fake.wait_for_offset = lost_wakeup  # type: ignore[method-assign]
    async with serve(fake) as client:
        resp = await client.get("/v1/metadata/log?from=3&wait_ms=10")  # bound: 10 ms + 1 s
        assert resp.status == 200
        assert await resp.json() == {"records": [], "next_offset": 3}


@async_test
async def test_trimmed_offset_is_410_pointing_at_the_snapshot() -> None:
    fake = FakeService(LOG)
    fake.tail_start = 2
    fake.log = fake.log[2:]
    async with serve(fake) as client:
        resp = await client.get("/v1/metadata/log?from=1&wait_ms=1000")
        assert resp.status == 410
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert "snapshot" in err.error_message
        ok = await (await client.get("/v1/metadata/log?from=2")).json()
        assert ok["next_offset"] == 3


# -- other reads ----------------------------------------------------------------------------


@async_test
async def test_snapshot_is_the_encoded_image_with_next_offset() -> None:
    async with serve(FakeService()) as client:
        resp = await client.get("/v1/metadata/snapshot")
        assert resp.status == 200 and resp.content_type == "application/octet-stream"
        assert resp.headers["X-Next-Offset"] == "7"
        assert decode_snapshot(await resp.read()) == build_image()


@async_test
async def test_cluster_describes_brokers_topics_and_controller() -> None:
    async with serve(FakeService()) as client:
        resp = await client.get("/v1/cluster")
        assert resp.status == 200
        doc = await resp.json()
    assert (doc["controller_id"], doc["controller_epoch"]) == (1, 3)
    assert (doc["offline_partitions"], doc["fenced_brokers"]) == (1, 1)
    b1, b2 = doc["brokers"]
    assert (b1["broker_id"], b1["rack"], b1["fenced"]) == (1, "rack-a", False)
    assert b1["listeners"] == [msgspec.to_builtins(EP)]
    assert (b2["broker_id"], b2["fenced"]) == (2, True)
    (topic,) = doc["topics"]
    assert (topic["name"], topic["topic_id"]) == ("orders", TOPIC_ID)
    assert topic["configs"] == {"retention.ms": "1000"}
    p0, p1 = topic["partitions"]
    assert p0 == {
        "partition": 0,
        "replicas": [1, 2],
        "isr": [1],
        "leader": 1,
        "leader_epoch": 2,
        "partition_epoch": 5,
        "offline": False,
        "removing_replicas": [],
        "adding_replicas": [],
    }
    assert (p1["leader"], p1["offline"]) == (-1, True)
    assert doc["quorum"]["term"] == 3


@async_test
async def test_quorum_status_and_healthz() -> None:
    async with serve(FakeService()) as client:
        resp = await client.get("/v1/quorum/status")
        assert msgspec.json.decode(await resp.read(), type=api.QuorumStatus) == STATUS
        resp = await client.get("/healthz")
        assert (resp.status, await resp.text()) == (200, "ok")


@async_test
async def test_metrics_prometheus_exposition() -> None:
    async with serve(FakeService()) as client:
        await client.get("/nope")  # one 404 to count
        resp = await client.get("/metrics")
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    lines = text.splitlines()
    assert "# TYPE kraft_controller_active gauge" in lines
    assert "kraft_controller_active 1.0" in lines
    assert "kraft_quorum_term 3.0" in lines  # prefixed
    assert "kraft_commit_latency_seconds 0.0015" in lines
    assert "kraft_metadata_offset NaN" in lines
    assert "# TYPE kraft_http_responses_total counter" in lines
    assert 'kraft_http_responses_total{code="404"} 1' in lines
    assert "bad name" not in text
    # Every sample line is `name{labels} value` and has a TYPE line for its family before it.
    typed: set[str] = set()
    for line in lines:
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif not line.startswith("#"):
            m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{code="\d+"\})? (\S+)', line)
            assert m, line
            assert m.group(1) in typed, line
