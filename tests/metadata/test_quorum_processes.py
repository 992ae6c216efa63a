"""The controller quorum for real: three `python -m kraft.controller_main` processes on
127.0.0.1 (free ports, data under tmp_path), driven over their HTTP API with aiohttp,
and SIGKILLed. Plus the Quorum adapter in-process (three pysyncobj voters on one event
loop) for what HTTP cannot reach: retries with the same (writer, seq), and stale epochs.

Every wait is a condition polled under a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
import pytest

from kraft.controller_config import ConfigError, load_config
from kraft.controller_main import main as controller_main
from kraft.quorum import Quorum
from kraft.state_machine import AppendStatus
from metadata_log.records import ControllerEpochRecord, NoOpRecord, encode_batch

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "quorum-test-secret"
T = TypeVar("T")


def free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


async def eventually(
    probe: Callable[[], Awaitable[T | None]], timeout_s: float, what: str, interval_s: float = 0.05
) -> T:
    """Poll `probe` until it returns something other than None (or False)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


# -- three controller processes ---------------------------------------------------------------


class Cluster:
    def __init__(self, root: Path, size: int = 3) -> None:
        self.root = root
        ports = free_ports(2 * size)
        self.ids = list(range(1, size + 1))
        self.raft = dict(zip(self.ids, ports[:size], strict=True))
        self.http_ports = dict(zip(self.ids, ports[size:], strict=True))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.raft.items())
        http = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.http_ports.items())
        for i in self.ids:
            d = root / f"c{i}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "controller.properties").write_text(
                "process.roles=controller\n"
                f"node.id={i}\n"
                f"controller.quorum.voters={voters}\n"
                f"controller.quorum.http.endpoints={http}\n"
                f"listeners=CONTROLLER://127.0.0.1:{self.http_ports[i]}\n"
                f"metadata.log.dir={d / 'metadata'}\n"
                f"controller.quorum.password={PASSWORD}\n"
                # Long sessions: the test's one broker never heartbeats again.
                "broker.session.timeout.ms=600000\n"
            )

    def http(self, node_id: int) -> str:
        return f"127.0.0.1:{self.http_ports[node_id]}"

    def start(self, node_id: int) -> None:
        d = self.root / f"c{node_id}"
        log = open(d / "controller.log", "ab")  # noqa: SIM115 - the child owns it
        self.procs[node_id] = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kraft.controller_main",
                "--config",
                str(d / "controller.properties"),
            ],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()

    def kill(self, node_id: int) -> None:
        proc = self.procs.pop(node_id)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def stop_all(self) -> None:
        for node_id in list(self.procs):
            self.kill(node_id)

    def logs(self) -> str:
        parts = []
        for i in self.ids:
            path = self.root / f"c{i}" / "controller.log"
            text = path.read_text(errors="replace") if path.exists() else ""
            parts.append(f"--- controller {i} ---\n" + "\n".join(text.splitlines()[-15:]))
        return "\n".join(parts)


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
                os.kill(cluster.procs[i].pid, signal.SIGKILL)
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


# -- the Quorum adapter in-process --------------------------------------------------------------


async def start_quorums(root: Path) -> list[Quorum]:
    ports = free_ports(3)
    voters = {i + 1: ("127.0.0.1", p) for i, p in enumerate(ports)}
    quorums = [Quorum(i, voters, root / f"q{i}", PASSWORD) for i in voters]
    for q in quorums:
        await q.start()
    return quorums


async def elected(quorums: list[Quorum]) -> Quorum:
    async def leader() -> Quorum | None:
        leaders = [q for q in quorums if q.is_leader]
        if len(leaders) == 1 and all(q.leader_id == leaders[0].node_id for q in quorums):
            return leaders[0]
        return None

    return await eventually(leader, 20, "a Raft leader")


def test_quorum_retry_applies_once_and_stale_epoch_is_refused(tmp_path: Path) -> None:
    async def main() -> None:
        quorums = await start_quorums(tmp_path)
        try:
            leader = await elected(quorums)
            follower = next(q for q in quorums if q is not leader)
            term = leader.term
            barrier = await leader.append(term, [ControllerEpochRecord(term, leader.node_id)])
            assert barrier.status == AppendStatus.OK

            # A retry (same writer and seq), here through a follower, is applied once.
            batch = encode_batch([NoOpRecord(), NoOpRecord()])
            first = await leader.append_raw(term, "client:1", 7, batch)
            again = await follower.append_raw(term, "client:1", 7, batch)
            both = await asyncio.gather(
                leader.append_raw(term, "client:1", 7, batch),
                follower.append_raw(term, "client:1", 7, batch),
            )
            assert first.status == AppendStatus.OK
            assert again == first and all(r == first for r in both)
            end = first.last_offset + 1
            for q in quorums:
                assert await q.wait_for_offset(end - 1, 5)
                assert q.next_offset == end

            # A stale controller epoch is refused, and so is an epoch with no barrier.
            stale = await leader.append(term - 1, [NoOpRecord()])
            assert stale.status == AppendStatus.STALE_CONTROLLER_EPOCH
            old_barrier = await leader.append(term - 1, [ControllerEpochRecord(term - 1, 9)])
            assert old_barrier.status == AppendStatus.STALE_CONTROLLER_EPOCH
            no_barrier = await leader.append(term + 1, [NoOpRecord()])
            assert no_barrier.status == AppendStatus.STALE_CONTROLLER_EPOCH
            assert all(q.next_offset == end for q in quorums)

            # wait_for_offset long-polls: it wakes on the apply, and times out otherwise.
            waiter = asyncio.create_task(follower.wait_for_offset(end, 10))
            assert (await leader.append(term, [NoOpRecord()])).status == AppendStatus.OK
            assert await asyncio.wait_for(waiter, 5)
            assert not await follower.wait_for_offset(end + 100, 0.2)
            assert [r for _, r in follower.records_from(0, 100)] == [
                r for _, r in leader.records_from(0, 100)
            ]
        finally:
            for q in quorums:
                await q.stop()

    asyncio.run(main())


def test_quorum_state_survives_compaction_and_a_lone_restart(tmp_path: Path) -> None:
    """pysyncobj snapshots only the consumer attributes set after its __init__: check the
    state machine is in the dump (the journal before it is gone after compaction)."""

    async def main() -> None:
        quorums = await start_quorums(tmp_path)
        try:
            leader = await elected(quorums)
            term = leader.term
            await leader.append(term, [ControllerEpochRecord(term, leader.node_id)])
            for _ in range(50):
                assert (await leader.append(term, [NoOpRecord()])).status == AppendStatus.OK
            end = leader.next_offset
            q = next(q for q in quorums if q is not leader)
            assert await q.wait_for_offset(end - 1, 5)
            size_before = q.raft_log_size
            q.force_compaction()
            await eventually(
                lambda: asyncio.sleep(0, q.raft_log_size < size_before), 10, "compaction"
            )
            expected = q.records_from(0, 1000)
            image = q.image()
        finally:
            for x in quorums:
                await x.stop()
        # Alone (no quorum, no leader), it restores the dump plus the committed journal.
        alone = Quorum(q.node_id, q.voters, q.data_dir, PASSWORD)
        await alone.start()
        try:
            await eventually(
                lambda: asyncio.sleep(0, alone.next_offset == end), 10, "the restored state"
            )
            assert alone.records_from(0, 1000) == expected
            assert alone.image() == image
        finally:
            await alone.stop()

    asyncio.run(main())


# -- configuration ------------------------------------------------------------------------------

BASE = [
    "process.roles=controller",
    "node.id=1",
    "controller.quorum.voters=1@127.0.0.1:19091,2@127.0.0.1:19092",
    "controller.quorum.http.endpoints=1@127.0.0.1:19191,2@127.0.0.1:19192",
    "metadata.log.dir=/tmp/unused",
    "controller.quorum.password=p",
]


def test_config_overrides_and_defaults(tmp_path: Path) -> None:
    path = tmp_path / "c.properties"
    path.write_text(
        "\n".join(BASE) + "\nnum.partitions = 3\nlisteners=CONTROLLER://0.0.0.0:19191\n"
    )
    cfg = load_config(path, ["num.partitions=6", "broker.session.timeout.ms=1000"])
    assert (cfg.num_partitions, cfg.session_timeout_ms, cfg.default_replication_factor) == (
        6,
        1000,
        1,
    )
    assert cfg.listener == ("0.0.0.0", 19191) and cfg.http_address(2) == "127.0.0.1:19192"
    assert cfg.max_retained_records == 50_000
    assert cfg.controller_config().num_partitions == 6


@pytest.mark.parametrize(
    ("override", "names"),
    [
        ("node.id=x", "node.id"),
        ("process.roles=broker", "process.roles"),
        ("controller.quorum.voters=1@nohost", "controller.quorum.voters"),
        ("controller.quorum.http.endpoints=1@127.0.0.1:1", "controller.quorum.http.endpoints"),
        ("controller.quorum.password=", "controller.quorum.password"),
        ("listeners=CONTROLLER://127.0.0.1:1", "listeners"),
        ("num.partitions=0", "num.partitions"),
        ("metadata.max.retained.records=many", "metadata.max.retained.records"),
    ],
)
def test_config_errors_name_the_property(override: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names.replace(".", r"\.")):
        load_config(None, [*BASE, override])


def test_main_reports_bad_config_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.properties"
    path.write_text("\n".join(BASE[1:]))  # no process.roles
    assert controller_main(["--config", str(path)]) == 2
    assert "process.roles is required" in capsys.readouterr().err
