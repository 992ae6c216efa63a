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
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.quorum_procs import Client, Cluster, run, topic_names
from tests.harness.quorum_wait import eventually


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    for i in c.ids:
        c.start(i)
    try:
        yield c
    finally:
        c.stop_all()


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
