"""Three controller processes for real (kraft/tools/local_cluster.py: free ports on
127.0.0.1, data under a tmp dir) and a thin client of their HTTP API: what the quorum
process tests (tests/metadata/test_quorum_processes.py) and the power-loss test share.
Every wait is a condition polled under a deadline.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp

from kraft.tools.launcher import describe_logs
from kraft.tools.local_cluster import plan_cluster, write_configs
from tests.harness.quorum_wait import PASSWORD, eventually


class Cluster:
    """Three controller processes (kraft/tools/local_cluster.py), by node id."""

    def __init__(
        self, root: Path, size: int = 3, controller_props: Mapping[str, str] | None = None
    ) -> None:
        planned = plan_cluster(root, size)
        # Long sessions: the test's one broker never heartbeats again.
        props = {"broker.session.timeout.ms": "600000", **(controller_props or {})}
        write_configs(planned, password=PASSWORD, controller_props=props)
        self.nodes = {c.node_id: c for c in planned.controllers}
        self.ids = list(self.nodes)

    def http(self, node_id: int) -> str:
        return self.nodes[node_id].address

    def start(self, node_id: int) -> None:
        self.nodes[node_id].start()

    def kill(self, node_id: int) -> None:
        self.nodes[node_id].kill()

    def stop_all(self) -> None:
        for node in self.nodes.values():
            node.kill()

    def logs(self) -> str:
        return describe_logs(self.nodes.values())


class Client:
    """A thin client of the controllers' HTTP API."""

    def __init__(self, session: aiohttp.ClientSession, cluster: Cluster) -> None:
        self.s = session
        self.c = cluster

    async def get(self, node_id: int, path: str) -> Any | None:
        try:
            async with self.s.get(f"http://{self.c.http(node_id)}{path}") as resp:
                return await resp.json() if resp.status == 200 else None
        except (aiohttp.ClientError, asyncio.TimeoutError):  # noqa: UP041 - aiohttp raises both
            return None

    async def status(self, node_id: int) -> dict[str, Any] | None:
        return await self.get(node_id, "/v1/quorum/status")

    async def active(self, among: list[int]) -> int | None:
        """The one active controller among `among`, once the others agree it leads."""
        statuses = {i: await self.status(i) for i in among}
        active = [i for i, s in statuses.items() if s and s["active"]]
        if len(active) != 1:
            return None
        agree = all(s and s["leader_id"] == active[0] for s in statuses.values())
        return active[0] if agree else None

    async def post(self, node_id: int, path: str, body: object) -> tuple[int, Any]:
        """POST following 307s (aiohttp keeps method and body); connection errors -> 0."""
        try:
            async with self.s.post(f"http://{self.c.http(node_id)}{path}", json=body) as resp:
                return resp.status, await resp.json(content_type=None)
        except (aiohttp.ClientError, asyncio.TimeoutError):  # noqa: UP041
            return 0, None

    async def write(self, among: list[int], path: str, body: object) -> Any | None:
        """One attempt against each node in turn; the first 200 answer, or None."""
        for i in among:
            status, answer = await self.post(i, path, body)
            if status == 200:
                return answer
        return None

    async def create_topic(self, among: list[int], name: str, timeout_s: float = 10.0) -> float:
        """Create `name` (retrying across nodes); returns when it was acknowledged."""
        body = {"topics": [{"name": name}]}

        async def attempt() -> float | None:
            answer = await self.write(among, "/v1/topics", body)
            if answer is None:
                return None
            code = answer["topics"][0]["error_code"]
            # 36 TOPIC_ALREADY_EXISTS: an earlier attempt whose answer we lost landed.
            assert code in (0, 36), answer
            return time.monotonic()

        return await eventually(attempt, timeout_s, f"create topic {name}")

    async def register_broker(self, among: list[int]) -> None:
        reg = {
            "broker_id": 1,
            "incarnation_id": "test-broker-1",
            "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1", "port": 9092}],
        }
        answer = await eventually(
            lambda: self.write(among, "/v1/brokers/register", reg), 10, "broker registration"
        )
        assert answer["error_code"] == 0, answer
        hb = {
            "broker_id": 1,
            "broker_epoch": answer["broker_epoch"],
            "current_metadata_offset": 1 << 40,
        }
        answer = await eventually(
            lambda: self.write(among, "/v1/brokers/heartbeat", hb), 10, "heartbeat"
        )
        assert answer["error_code"] == 0 and not answer["is_fenced"], answer

    async def log(self, node_id: int) -> list[dict[str, Any]] | None:
        """Every committed record on `node_id`, from offset 0."""
        out: list[dict[str, Any]] = []
        while True:
            page = await self.get(node_id, f"/v1/metadata/log?from={len(out)}&max_records=10000")
            if page is None:
                return None
            out += page["records"]
            if not page["records"]:
                return out

    async def converged(self, among: list[int]) -> list[dict[str, Any]] | None:
        logs = [await self.log(i) for i in among]
        if any(lg is None for lg in logs) or any(lg != logs[0] for lg in logs):
            return None
        return logs[0]


def run(cluster: Cluster, body: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        timeout = aiohttp.ClientTimeout(total=3)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await body(Client(session, cluster))

    try:
        asyncio.run(main())
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{cluster.logs()}") from None


def topic_names(records: list[dict[str, Any]]) -> set[str]:
    return {e["record"]["name"] for e in records if e["record"]["type"] == "topic"}
