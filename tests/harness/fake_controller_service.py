"""A fake ControllerService for the controller's HTTP layer (kraft/http_api.py): it records
the requests it gets and answers canned responses (one row of `WRITES` per write route),
so what a test checks is routing, validation, redirects, long-poll and error mapping.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import msgspec
from aiohttp.test_utils import TestClient, TestServer

from common.acl import AclBinding, AclBindingFilter
from common.errors import Errors
from kraft.http_api import make_app
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
from metadata_log.snapshot import image_from_snapshot

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
    ("/v1/brokers/unreachable", "broker_unreachable",
     b'{"broker_id": 2, "broker_epoch": 11, "reporter_id": 1, "reason": "refused"}',
     api.BrokerUnreachableRequest(2, 11, 1, "refused"), api.BrokerUnreachableResponse(0)),
    ("/v1/partitions/alter", "alter_partition",
     b'{"broker_id": 1, "broker_epoch": 10, "topic_id": "tid", "partition": 0, '
     b'"leader_epoch": 2, "partition_epoch": 5, "new_isr": [1, 2]}',
     api.AlterPartitionRequest(1, 10, "tid", 0, 2, 5, [1, 2]),
     api.AlterPartitionResponse(0, 1, 2, 6, [1, 2])),
    ("/v1/partitions/alter-many", "alter_partitions",
     b'{"broker_id": 1, "broker_epoch": 10, "topics": [{"topic_id": "tid", "partitions": '
     b'[{"partition": 0, "leader_epoch": 2, "partition_epoch": 5, "new_isr": [1, 2]}]}]}',
     api.AlterPartitionsRequest(
         1, 10, [api.AlterPartitionTopic("tid", [api.AlterPartitionItem(0, 2, 5, [1, 2])])]),
     api.AlterPartitionsResponse(0, [api.AlterPartitionResult("tid", 0, 0, 1, 2, 6, [1, 2])])),
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
     api.ElectLeadersResponse([api.PartitionResult("t", 0, Errors.ELECTION_NOT_NEEDED)])),
    ("/v1/configs", "alter_configs",
     b'{"resource_type": 2, "resource_name": "t", "set": {"a": "1"}, "delete": ["b"]}',
     api.IncrementalAlterConfigsRequest(2, "t", {"a": "1"}, ["b"]), None),
    ("/v1/acls", "create_acls",
     b'{"creations": [{"resource_type": 2, "resource_name": "t", "pattern_type": 3, '
     b'"principal": "User:a", "host": "*", "operation": 3, "permission_type": 3}]}',
     api.CreateAclsRequest([AclBinding(2, "t", 3, "User:a", "*", 3, 3)]),
     api.CreateAclsResponse([api.AclCreationResult(0)])),
    ("/v1/acls/delete", "delete_acls", b'{"filters": [{"resource_type": 2}]}',
     api.DeleteAclsRequest([AclBindingFilter(resource_type=2)]),
     api.DeleteAclsResponse([api.DeleteAclsFilterResult(0, None, [])])),
    ("/v1/scram-credentials", "alter_user_scram_credentials",
     b'{"deletions": [{"name": "a", "mechanism": 1}]}',
     api.AlterUserScramCredentialsRequest([api.ScramCredentialDeletion("a", 1)]),
     api.AlterUserScramCredentialsResponse([api.AlterUserScramCredentialsResult("a", 0)])),
    ("/v1/partitions/reassign", "alter_partition_reassignments",
     b'{"partitions": [{"topic": "t", "partition": 0, "replicas": [4, 5]}]}',
     api.AlterPartitionReassignmentsRequest([api.ReassignablePartition("t", 0, [4, 5])]),
     api.AlterPartitionReassignmentsResponse([api.PartitionResult("t", 0, 0)])),
    ("/v1/partitions/reassignments", "list_partition_reassignments", b'{"partitions": null}',
     api.ListPartitionReassignmentsRequest(None),
     api.ListPartitionReassignmentsResponse(
         [api.OngoingReassignment("t", 0, [4, 5, 1], [4, 5], [1])])),
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

    # The write methods, all alike.
    async def register_broker(self, req: Any) -> Any:
        return await self._write("register_broker", req)

    async def heartbeat(self, req: Any) -> Any:
        return await self._write("heartbeat", req)

    async def broker_unreachable(self, req: Any) -> Any:
        return await self._write("broker_unreachable", req)

    async def alter_partition(self, req: Any) -> Any:
        return await self._write("alter_partition", req)

    async def alter_partitions(self, req: Any) -> Any:
        return await self._write("alter_partitions", req)

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

    async def alter_partition_reassignments(self, req: Any) -> Any:
        return await self._write("alter_partition_reassignments", req)

    async def list_partition_reassignments(self, req: Any) -> Any:
        return await self._write("list_partition_reassignments", req)

    async def alter_configs(self, req: Any) -> None:
        return await self._write("alter_configs", req)

    async def create_acls(self, req: Any) -> Any:
        return await self._write("create_acls", req)

    async def delete_acls(self, req: Any) -> Any:
        return await self._write("delete_acls", req)

    async def alter_user_scram_credentials(self, req: Any) -> Any:
        return await self._write("alter_user_scram_credentials", req)

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


# A short metadata log for the log routes to serve.
LOG = [ControllerEpochRecord(3, 1), TopicRecord("orders", TOPIC_ID), NoOpRecord()]
