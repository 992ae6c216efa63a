"""The controller quorum for real: three `python -m kraft.controller_main` processes on
127.0.0.1 (free ports, data under tmp_path), driven over their HTTP API with aiohttp,
and SIGKILLed. The Quorum adapter in-process is in test_quorum_adapter.py, the config
file in test_controller_config.py.

Every wait is a condition polled under a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from kraft.tools.launcher import describe_logs
from kraft.tools.local_cluster import plan_cluster, write_configs
from tests.harness.quorum_wait import PASSWORD, eventually


class Cluster:
    """Three controller processes (kraft/tools/local_cluster.py), by node id."""

    def __init__(self, root: Path, size: int = 3) -> None:
        planned = plan_cluster(root, size)
        # Long sessions: the test's one broker never heartbeats again.
        write_configs(
            planned, password=PASSWORD, controller_props={"broker.session.timeout.ms": "600000"}
        )
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


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    for i in c.ids:
        c.start(i)
    try:
        yield c
    finally:
        c.stop_all()


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


def test_failover_redirect_and_catch_up(cluster: Cluster) -> None:
    async def body(api: Client) -> None:
        ids = cluster.ids
        first = await eventually(lambda: api.active(ids), 20, "an active controller")
        await api.register_broker(ids)
        for n in range(5):
            await api.create_topic(ids, f"before-{n}")

        # A write sent to a follower is redirected, method and body kept (307).
        follower = next(i for i in ids if i != first)
        url = f"http://{cluster.http(follower)}/v1/topics"
        async with api.s.post(url, json={"topics": [{"name": "x"}]}, allow_redirects=False) as r:
            assert r.status == 307
            assert r.headers["Location"] == f"http://{cluster.http(first)}/v1/topics"
            assert (await r.json())["error_code"] == 41  # NOT_CONTROLLER

        # SIGKILL the active controller: another takes over and accepts writes.
        survivors = [i for i in ids if i != first]
        killed_at = time.monotonic()
        cluster.kill(first)
        acked_at = await api.create_topic(survivors, "after-failover", timeout_s=10)
        failover_s = acked_at - killed_at
        print(f"\nfailover: SIGKILL -> new active controller acked a write in {failover_s:.3f}s")
        assert failover_s < 3.0, failover_s
        second = await eventually(lambda: api.active(survivors), 5, "the new active controller")
        assert second != first

        # Every committed record is intact, the same, on both survivors.
        records = await eventually(lambda: api.converged(survivors), 10, "survivors to agree")
        assert [e["offset"] for e in records] == list(range(len(records)))
        assert {f"before-{n}" for n in range(5)} | {"after-failover"} <= topic_names(records)
        epochs = [
            e["record"]["controller_epoch"]
            for e in records
            if e["record"]["type"] == "controller_epoch"
        ]
        assert epochs == sorted(epochs) and len(set(epochs)) >= 2

        # The killed controller rejoins as a follower and catches up.
        cluster.start(first)
        rejoined = await eventually(
            lambda: api.converged(ids), 20, "the restarted controller to catch up"
        )
        assert rejoined[: len(records)] == records
        status = await api.status(first)
        assert status is not None and not status["active"] and status["leader_id"] == second

        # A long-poll on it wakes as soon as the next write commits.
        offset = len(rejoined)
        poll = asyncio.create_task(api.get(first, f"/v1/metadata/log?from={offset}&wait_ms=10000"))
        await api.create_topic(ids, "after-rejoin")
        page = await asyncio.wait_for(poll, 5)
        assert page is not None and page["records"] and page["records"][0]["offset"] == offset

    run(cluster, body)


def test_sigkill_all_with_writes_in_flight_loses_no_acknowledged_write(cluster: Cluster) -> None:
    async def body(api: Client) -> None:
        ids = cluster.ids
        await eventually(lambda: api.active(ids), 20, "an active controller")
        await api.register_broker(ids)
        acked: set[str] = set()
        in_flight = 0
        stop = asyncio.Event()

        async def writer(rnd: int, w: int) -> None:
            nonlocal in_flight
            n = 0
            while not stop.is_set():
                name = f"r{rnd}-w{w}-{n}"
                in_flight += 1
                answer = await api.write(ids, "/v1/topics", {"topics": [{"name": name}]})
                in_flight -= 1
                if answer is not None and answer["topics"][0]["error_code"] == 0:
                    acked.add(name)
                    n += 1

        for rnd in range(3):
            stop.clear()
            writers = [asyncio.create_task(writer(rnd, w)) for w in range(4)]
            target = len(acked) + 30
            await eventually(
                lambda t=target: asyncio.sleep(0, len(acked) >= t and in_flight > 0),
                20,
                f"round {rnd}: 30 more acknowledged writes",
            )
            for i in ids:  # all three at once, with writes in flight
                os.kill(cluster.nodes[i].pid, signal.SIGKILL)  # type: ignore[arg-type]
            stop.set()
            # Answers received before the kill but not yet processed count as acknowledged.
            await asyncio.gather(*writers)
            cluster.stop_all()  # reap
            for i in ids:
                cluster.start(i)
            await eventually(lambda: api.active(ids), 20, "an active controller after restart")
            await api.create_topic(ids, f"after-restart-{rnd}")
            records = await eventually(lambda: api.converged(ids), 20, "all three to agree")
            missing = acked - topic_names(records)
            assert not missing, f"round {rnd}: acknowledged but lost: {sorted(missing)}"

    run(cluster, body)
