"""Unit tests of the controller HTTP layer (kraft/http_api.py) over a fake ControllerService.

The fake only records calls and answers canned responses: what is under test is routing,
validation, redirects, long-poll and error mapping. Real processes are tested elsewhere.
Tests drive a real aiohttp server over loopback TCP (TestServer), one event loop per test.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import logging
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp.test_utils import TestClient, TestServer

from kraft.http_api import LogResponse, make_app
from kraft.service import NotActiveController
from metadata_log import controller_api as api
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ConfigRecord,
    ControllerEpochRecord,
    Endpoint,
    NoOpRecord,
    PartitionRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
    encode,
)
from metadata_log.snapshot import decode_snapshot, image_from_snapshot

TOPIC_ID = "8f0c7a52-3d5b-4d7e-9a55-0a4b2f3c1d10"
EP = Endpoint("PLAINTEXT", "127.0.0.1", 9092)


def build_image() -> MetadataImage:
    return image_from_snapshot(
        6,
        [
            ControllerEpochRecord(3, 1),
            RegisterBrokerRecord(1, "inc-1", 10, (EP,), "rack-a", fenced=False),
            RegisterBrokerRecord(2, "inc-2", 11, (EP,), None, fenced=True),
            TopicRecord("orders", TOPIC_ID),
            PartitionRecord(TOPIC_ID, 0, (1, 2), (1,), 1, 2, 5),
            PartitionRecord(TOPIC_ID, 1, (2,), (2,), -1, 0, 0),
            ConfigRecord(2, "orders", "retention.ms", "1000"),
        ],
    )


STATUS = api.QuorumStatus(1, "leader", 3, 1, "127.0.0.1:1", True, 3, 7, 42)
HEARTBEAT = {"broker_id": 1, "broker_epoch": 10, "current_metadata_offset": 5}

# path, service method, JSON body, the request the service must get, its canned answer
# fmt: off
WRITES: list[tuple[str, str, bytes, object, object]] = [
    ("/v1/brokers/register", "register_broker",
     b'{"broker_id": 1, "incarnation_id": "i", "listeners": [{"name": "PLAINTEXT", '
     b'"host": "127.0.0.1", "port": 9092}]}',
     api.BrokerRegistrationRequest(1, "i", [EP]), api.BrokerRegistrationResponse(0, 77)),
    ("/v1/brokers/heartbeat", "heartbeat", msgspec.json.encode(HEARTBEAT),
     api.BrokerHeartbeatRequest(1, 10, 5), api.BrokerHeartbeatResponse(0, True, False)),
    ("/v1/partitions/alter", "alter_partition",
     b'{"broker_id": 1, "broker_epoch": 10, "topic_id": "tid", "partition": 0, '
     b'"leader_epoch": 2, "partition_epoch": 5, "new_isr": [1, 2]}',
     api.AlterPartitionRequest(1, 10, "tid", 0, 2, 5, [1, 2]),
     api.AlterPartitionResponse(0, 1, 2, 6, [1, 2])),
    ("/v1/producer-ids", "allocate_producer_ids", b'{"broker_id": 1, "broker_epoch": 10}',
     api.AllocateProducerIdsRequest(1, 10), api.AllocateProducerIdsResponse(0, 1000, 1000)),
    ("/v1/topics", "create_topics",
     b'{"topics": [{"name": "t", "num_partitions": 3, "assignments": {"0": [1]}}]}',
     api.CreateTopicsRequest([api.CreatableTopic("t", 3, assignments={0: [1]})]),
     api.CreateTopicsResponse([api.CreatableTopicResult("t", 0, TOPIC_ID, 3, 1)])),
    ("/v1/topics/delete", "delete_topics", b'{"names": ["t"]}',
     api.DeleteTopicsRequest(["t"]), api.DeleteTopicsResponse([api.TopicResult("t", 0)])),
    ("/v1/partitions/create", "create_partitions", b'{"topics": [{"name": "t", "count": 4}]}',
     api.CreatePartitionsRequest([api.CreatePartitionsTopic("t", 4)]),
     api.CreatePartitionsResponse([api.TopicResult("t", 0)])),
    ("/v1/leaders/elect", "elect_leaders", b'{"partitions": [{"topic": "t", "partition": 0}]}',
     api.ElectLeadersRequest(0, [api.TopicPartition("t", 0)]),
     api.ElectLeadersResponse([api.PartitionResult("t", 0, api.Errors.ELECTION_NOT_NEEDED)])),
    ("/v1/configs", "alter_configs",
     b'{"resource_type": 2, "resource_name": "t", "set": {"a": "1"}, "delete": ["b"]}',
     api.IncrementalAlterConfigsRequest(2, "t", {"a": "1"}, ["b"]), None),
]
# fmt: on
CANNED = {method: resp for _, method, _, _, resp in WRITES}


class FakeService:
    """Records requests, answers canned responses; `active`/`leader_http` drive redirects,
    `fail_with` makes the next write raise, and the committed log is a list of records."""

    def __init__(self, records: list[Record] | None = None) -> None:
        self.calls: list[tuple[str, object]] = []
        self.active = True
        self.leader_http: str | None = None
        self.fail_with: BaseException | None = None
        self.tail_start = 0
        self.log: list[bytes] = [encode(r) for r in records or []]
        self.wait_calls: list[tuple[int, float]] = []
        self.waiting = asyncio.Event()  # set when a long-poll parks in wait_for_offset
        self._committed = asyncio.Event()
        self.metric_values: dict[str, float] = {
            "kraft_controller_active": 1.0,
            "quorum_term": 3,  # no prefix: the layer adds it
            "kraft_commit_latency_seconds": 0.0015,
            "kraft_metadata_offset": float("nan"),
            "bad name!": 1.0,
        }

    async def _write(self, name: str, req: object) -> Any:
        if not self.active:
            raise NotActiveController(self.leader_http)
        if self.fail_with is not None:
            exc, self.fail_with = self.fail_with, None
            raise exc
        self.calls.append((name, req))
        return CANNED[name]

    # The nine write methods, all alike.
    async def register_broker(self, req: Any) -> Any:
        return await self._write("register_broker", req)

    async def heartbeat(self, req: Any) -> Any:
        return await self._write("heartbeat", req)

    async def alter_partition(self, req: Any) -> Any:
        return await self._write("alter_partition", req)

    async def allocate_producer_ids(self, req: Any) -> Any:
        return await self._write("allocate_producer_ids", req)

    async def create_topics(self, req: Any) -> Any:
        return await self._write("create_topics", req)

    async def delete_topics(self, req: Any) -> Any:
        return await self._write("delete_topics", req)

    async def create_partitions(self, req: Any) -> Any:
        return await self._write("create_partitions", req)

    async def elect_leaders(self, req: Any) -> Any:
        return await self._write("elect_leaders", req)

    async def alter_configs(self, req: Any) -> None:
        return await self._write("alter_configs", req)

    def status(self) -> api.QuorumStatus:
        return STATUS

    def image(self) -> MetadataImage:
        return build_image()

    def snapshot(self) -> tuple[MetadataImage, int]:
        return build_image(), 7

    def records_from(self, offset: int, max_records: int) -> list[tuple[int, bytes]] | None:
        if offset < self.tail_start:
            return None
        chunk = self.log[offset - self.tail_start :][:max_records]
        return [(offset + i, b) for i, b in enumerate(chunk)]

    def commit(self, record: Record) -> None:
        self.log.append(encode(record))
        event, self._committed = self._committed, asyncio.Event()
        event.set()

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        self.wait_calls.append((offset, timeout_s))
        self.waiting.set()
        try:
            async with asyncio.timeout(timeout_s):
                while offset >= self.tail_start + len(self.log):
                    await self._committed.wait()
            return True
        except TimeoutError:
            return False

    def metrics(self) -> dict[str, float]:
        return self.metric_values


def async_test(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))  # a hang fails, not blocks

    return wrapper


@asynccontextmanager
async def serve(fake: FakeService, **kwargs: Any) -> AsyncIterator[TestClient]:
    async with TestClient(TestServer(make_app(fake, **kwargs))) as client:
        yield client


async def assert_still_serving(client: TestClient, fake: FakeService) -> None:
    """After any bad request, a good one still goes through to the service."""
    n = len(fake.calls)
    resp = await client.post("/v1/brokers/heartbeat", json=HEARTBEAT)
    assert resp.status == 200, await resp.text()
    assert len(fake.calls) == n + 1


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
        assert err.error_code == api.Errors.NOT_CONTROLLER
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
        assert err.error_code == api.Errors.NOT_CONTROLLER


@async_test
async def test_service_timeout_is_503_request_timed_out() -> None:
    fake = FakeService()
    fake.fail_with = TimeoutError()
    async with serve(fake) as client:
        resp = await client.post("/v1/topics/delete", json={"names": ["t"]})
        assert resp.status == 503
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == api.Errors.REQUEST_TIMED_OUT
        await assert_still_serving(client, fake)


@async_test
async def test_controller_api_error_is_400_with_its_code() -> None:
    from kraft.http_api import ControllerApiError

    fake = FakeService()
    fake.fail_with = ControllerApiError(api.Errors.INVALID_CONFIG, "unknown config x")
    async with serve(fake) as client:
        body = {"resource_type": 2, "resource_name": "t", "set": {"x": "1"}}
        resp = await client.post("/v1/configs", json=body)
        assert resp.status == 400
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert (err.error_code, err.error_message) == (
            api.Errors.INVALID_CONFIG,
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
            assert err.error_code == api.Errors.UNKNOWN_SERVER_ERROR
            assert "secret" not in err.error_message
            await assert_still_serving(client, fake)
    finally:
        logger.removeHandler(handler)
    assert any(r.exc_info and isinstance(r.exc_info[1], RuntimeError) for r in records)


# -- the metadata log -----------------------------------------------------------------------

LOG = [ControllerEpochRecord(3, 1), TopicRecord("orders", TOPIC_ID), NoOpRecord()]


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


# -- bad input ------------------------------------------------------------------------------

HB = "/v1/brokers/heartbeat"
DEEP = b"[" * 200_000 + b"]" * 200_000
DEEP_OBJECTS = b'{"a": ' * 100_000 + b"1" + b"}" * 100_000


def hb(**fields: str) -> bytes:
    """A heartbeat body with some fields replaced by raw JSON text (or dropped with "")."""
    merged = {k: str(v) for k, v in HEARTBEAT.items()} | fields
    return b"{%s}" % ", ".join(f'"{k}": {v}' for k, v in merged.items() if v).encode()


# id, path, body, what the error message must say
# fmt: off
BAD_BODIES: list[tuple[str, str, bytes, str]] = [
    ("malformed", HB, b'{"broker_id": 1,,}', "malformed"),
    ("truncated", HB, hb()[:-9], "truncated"),
    ("empty", HB, b"", "truncated"),
    ("trailing junk", HB, hb() + b"{}", "trailing characters"),
    ("NaN literal", HB, hb(broker_epoch="NaN"), "malformed"),
    ("wrong type", HB, hb(broker_id='"1"'), "Expected `int`, got `str` - at `$.broker_id`"),
    ("bool for int", HB, hb(broker_id="true"), "Expected `int`, got `bool` - at `$.broker_id`"),
    ("null required", HB, hb(broker_id="null"), "Expected `int`, got `null` - at `$.broker_id`"),
    ("float for int", HB, hb(broker_id="1.5"), "Expected `int`, got `float` - at `$.broker_id`"),
    ("unknown field", HB, hb(brokr_id="2"), "unknown field `brokr_id`"),
    ("missing field", HB, hb(broker_epoch=""), "missing required field `broker_epoch`"),
    ("array for object", HB, b"[1, 2, 3]", "Expected `object`, got `array`"),
    ("string for object", HB, b'"hello"', "Expected `object`, got `str`"),
    ("deep nesting at top", HB, DEEP, "Expected `object`, got `array`"),
    ("deep nesting in a field", HB, hb(broker_id=DEEP.decode()), "at `$.broker_id`"),
    ("deep objects in configs", "/v1/topics",
     b'{"topics": [{"name": "t", "configs": {"k": %s}}]}' % DEEP_OBJECTS,
     "at `$.topics[0].configs[...]`"),
    ("non-UTF-8 body", HB, b"\xff\xfe{\x00}", "malformed"),
    ("non-UTF-8 in a string", "/v1/topics/delete", b'{"names": ["\xc3\x28"]}', "UTF-8"),
    ("negative id", HB, hb(broker_id="-1"), "Expected `int` >= 0 - at `$.broker_id`"),
    ("id above int32", HB, hb(broker_id="2147483648"), "<= 2147483647 - at `$.broker_id`"),
    ("int64 overflow", HB, hb(broker_epoch="9223372036854775808"),
     "at `$.broker_epoch`"),
    ("int64 underflow", HB, hb(current_metadata_offset="-9223372036854775809"),
     "at `$.current_metadata_offset`"),
    ("int64 overflow in a dict key", "/v1/topics",
     b'{"topics": [{"name": "t", "assignments": {"99999999999999999999": [1]}}]}',
     "`key` in `$.topics[0].assignments`"),
    ("float overflow", HB, hb(broker_epoch="1e400"), "Number out of range - at `$.broker_epoch`"),
    ("non-integer dict key", "/v1/topics",
     b'{"topics": [{"name": "t", "assignments": {"x": [1]}}]}',
     "Expected `int`, got `str` - at `key` in `$.topics[0].assignments`"),
    ("empty list", "/v1/topics", b'{"topics": []}', "length >= 1 - at `$.topics`"),
    ("empty name", "/v1/topics/delete", b'{"names": [""]}', "length >= 1 - at `$.names[0]`"),
    ("name too long", "/v1/topics/delete", b'{"names": ["%s"]}' % (b"x" * 250),
     "length <= 249 - at `$.names[0]`"),
    ("bad resource type", "/v1/configs", b'{"resource_type": 7, "resource_name": "t"}',
     "Invalid enum value 7 - at `$.resource_type`"),
    ("resource type 3 is not Kafka's", "/v1/configs", b'{"resource_type": 3, "resource_name": "t"}',
     "Invalid enum value 3 - at `$.resource_type`"),
    ("bad port", "/v1/brokers/register", b'{"broker_id": 1, "incarnation_id": "i", '
     b'"listeners": [{"name": "P", "host": "h", "port": 70000}]}',
     "<= 65535 - at `$.listeners[0].port`"),
]
# fmt: on


@pytest.mark.parametrize(
    ("path", "body", "message"), [c[1:] for c in BAD_BODIES], ids=[c[0] for c in BAD_BODIES]
)
@async_test
async def test_bad_bodies_are_400_invalid_request(path: str, body: bytes, message: str) -> None:
    fake = FakeService()
    async with serve(fake) as client:
        resp = await client.post(path, data=body, headers={"Content-Type": "application/json"})
        assert resp.status == 400, await resp.text()
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == api.Errors.INVALID_REQUEST
        assert message in err.error_message
        assert fake.calls == []  # never reached the service
        await assert_still_serving(client, fake)


# fmt: off
BAD_QUERIES = [
    "from=abc", "from=-1", "from=1.5", "from=%201", "from=1_0", "from=", "from=1e3",
    "from=%D9%A7",  # an Arabic-Indic digit seven: int() would take it
    "from=9223372036854775808", "from=99999999999999999999999",
    "max_records=0", "max_records=10001", "wait_ms=30001", "wait_ms=-5", "format=xml",
]
# fmt: on


@pytest.mark.parametrize("query", BAD_QUERIES)
@async_test
async def test_bad_log_query_params_are_400(query: str) -> None:
    fake = FakeService(LOG)
    async with serve(fake) as client:
        resp = await client.get(f"/v1/metadata/log?{query}")
        assert resp.status == 400, await resp.text()
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == api.Errors.INVALID_REQUEST
        assert query.split("=")[0] in err.error_message
        assert fake.wait_calls == []
        await assert_still_serving(client, fake)


async def _chunks(total: int) -> AsyncIterator[bytes]:
    for _ in range(total // 65536):
        yield b" " * 65536


HUGE = 2 << 20
BIG_BODIES: list[tuple[str, Callable[[], Any], dict[str, str]]] = [
    ("content-length", lambda: b" " * HUGE, {}),
    ("chunked", lambda: _chunks(HUGE), {}),
    ("gzip bomb", lambda: gzip.compress(b" " * HUGE), {"Content-Encoding": "gzip"}),
]


@pytest.mark.parametrize(
    ("data", "headers"), [c[1:] for c in BIG_BODIES], ids=[c[0] for c in BIG_BODIES]
)
@async_test
async def test_huge_bodies_are_413(data: Callable[[], Any], headers: dict[str, str]) -> None:
    fake = FakeService()
    async with serve(fake) as client:
        try:
            resp = await client.post("/v1/topics", data=data(), headers=headers)
        except aiohttp.ClientError:
            # The server may close while the client is still sending (a TCP race, not seen
            # on loopback so far): acceptable, but the service must not have been called
            # and the server must still answer.
            pass
        else:
            assert resp.status == 413, await resp.text()
            err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
            assert err.error_code == api.Errors.INVALID_REQUEST
        assert fake.calls == []
        await assert_still_serving(client, fake)


@async_test
async def test_body_limit_is_exact() -> None:
    fake = FakeService()
    body = msgspec.json.encode(HEARTBEAT)
    async with serve(fake, max_body_bytes=200) as client:
        at_limit = body + b" " * (200 - len(body))  # trailing whitespace is valid JSON
        resp = await client.post(HB, data=at_limit)
        assert resp.status == 200
        resp = await client.post(HB, data=at_limit + b" ")
        assert resp.status == 413
        assert len(fake.calls) == 1


@async_test
async def test_declared_huge_body_is_refused_before_it_arrives() -> None:
    """Content-Length over the limit: 413 at once, without waiting for a body a slow or
    hostile client may never finish, and the connection is not kept alive."""
    fake = FakeService()
    async with serve(fake) as client:
        assert client.server.host is not None and client.server.port is not None
        reader, writer = await asyncio.open_connection(client.server.host, client.server.port)
        writer.write(b"POST /v1/topics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n{" % HUGE)
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        writer.close()
        assert head.startswith(b"HTTP/1.1 413"), head
        assert b"\r\nConnection: close\r\n" in head, head
        assert fake.calls == []
        await assert_still_serving(client, fake)


# fmt: off
@pytest.mark.parametrize(
    ("method", "path", "status"),
    [("GET", "/v1/topics", 405), ("PUT", HB, 405), ("POST", "/v1/metadata/log", 405),
     ("DELETE", "/v1/cluster", 405), ("GET", "/v1/nope", 404), ("POST", "/", 404)],
)
# fmt: on
@async_test
async def test_wrong_method_and_unknown_path(method: str, path: str, status: int) -> None:
    fake = FakeService()
    async with serve(fake) as client:
        resp = await client.request(method, path, data=b"{}")
        assert resp.status == status
        err = msgspec.json.decode(await resp.read(), type=api.ErrorResponse)
        assert err.error_code == api.Errors.INVALID_REQUEST
        if status == 405:
            assert resp.headers["Allow"]
        await assert_still_serving(client, fake)
