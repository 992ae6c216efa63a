"""Controller benchmark: committed metadata writes through the HTTP API of a real quorum.

    python -m bench.controller_bench [--clients 1,8,32] [--duration 4] [--latency-writes 5000]
                                     [--alter-changes 1000] [--alter-modes batched,single]
                                     [--failovers 5] [--out bench/results/controller.json]

Three `python -m kraft.controller_main` processes on 127.0.0.1
(kraft/tools/local_cluster.py: free ports, data and logs in a scratch directory), driven
with aiohttp from this process.

The write: `POST /v1/configs` setting one broker config at cluster level
({"resource_type": 4, "resource_name": "", "set": {"bench.client.<k>": "<n>"}}). The
active controller turns it into exactly one ConfigRecord, appended as one batch (one
Raft entry), and answers 204 once it is committed (applied on a majority) and applied.
Client k always sets the same key, so the image stays small whatever the run length.

- Throughput: N clients (each one request at a time, one keep-alive connection each)
  write for `--duration` s after `--warmup` s; writes/s counts answers received inside
  the timed window. Afterwards the metadata offset must have advanced by at least the
  number of acknowledged writes (every 204 is a committed record).
- Latency: one client, `--latency-writes` sequential writes after 100 untimed ones; each
  timed from request to answer (HTTP on loopback + decide + Raft commit + apply).
  Percentiles are nearest-rank.
- AlterPartition (bench/controller_alter.py): 3 fake brokers, one topic of
  `--alter-changes` partitions RF 3; each round changes every partition's ISR once
  (shrink to the leader, then grow back), batched across partitions per request as
  brokers send them, and one partition per request as they used to; changes/s per round.
- Failover: SIGKILL the active controller; from the signal, the survivors are sent the
  same write in a loop (10 ms apart, 1 s timeout each, following 307 redirects) until
  one acknowledges it. Then the killed controller is restarted and the bench waits until
  all three agree on the active controller and report the same metadata offset
  (untimed for the failover, recorded as `rejoin_s`). Repeated `--failovers` times.

Everything shares the machine: three controllers and this client compete for its CPUs
(`machine.nproc` in the JSON), which bounds the figures as much as the code does.
Prints a table and writes JSON to bench/results/controller.json (or --out).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bench.controller_alter import BenchError, alter_partition_case
from bench.storage_bench import filesystem_of, write_results
from kraft.tools.launcher import (
    LauncherError,
    NodeProcess,
    stop_nodes,
    wait_for_active,
    wait_until_caught_up,
)
from kraft.tools.local_cluster import start_controllers

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "controller.json"
WRITE_PATH = "/v1/configs"
WRITE_DESCRIPTION = (
    "POST /v1/configs: set one cluster-level broker config (resource_type 4, name ''); "
    "one ConfigRecord in one batch (one Raft entry); 204 after commit and apply"
)
LATENCY_WARMUP_WRITES = 100
FAILOVER_RETRY_S = 0.01
FAILOVER_DEADLINE_S = 20.0
REQUEST_TIMEOUT_S = 5.0  # the controller's own commit deadline is 5 s
FAILOVER_REQUEST_TIMEOUT_S = 1.0


def write_body(client: int, n: int) -> dict[str, Any]:
    return {"resource_type": 4, "resource_name": "", "set": {f"bench.client.{client}": str(n)}}


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list (p in (0, 100])."""
    rank = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latency_summary(seconds: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in seconds)
    if not ms:
        return {}
    return {
        "p50_ms": round(percentile(ms, 50), 3),
        "p99_ms": round(percentile(ms, 99), 3),
        "p999_ms": round(percentile(ms, 99.9), 3),
        "max_ms": round(ms[-1], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


async def post_write(
    session: aiohttp.ClientSession, address: str, body: dict[str, Any], timeout_s: float
) -> bool:
    """One write; True if acknowledged (2xx). Redirects (307) are followed."""
    try:
        async with session.post(
            f"http://{address}{WRITE_PATH}",
            json=body,
            timeout=aiohttp.ClientTimeout(total=timeout_s),
        ) as resp:
            await resp.read()
            return 200 <= resp.status < 300
    except (aiohttp.ClientError, TimeoutError):
        return False


async def metadata_offset(session: aiohttp.ClientSession, address: str) -> int:
    async with session.get(f"http://{address}/v1/quorum/status") as resp:
        resp.raise_for_status()
        return int((await resp.json())["metadata_offset"])


# -- (a) throughput ---------------------------------------------------------------------------


@dataclass
class ClientStats:
    acked: int = 0  # every acknowledged write, warm-up included
    errors: int = 0
    timed: list[float] = field(default_factory=list)  # latencies inside the timed window


async def throughput(
    session: aiohttp.ClientSession, address: str, clients: int, duration_s: float, warmup_s: float
) -> dict[str, Any]:
    offset_before = await metadata_offset(session, address)
    start = time.perf_counter()
    window = (start + warmup_s, start + warmup_s + duration_s)
    stats = [ClientStats() for _ in range(clients)]

    async def client(k: int) -> None:
        st = stats[k]
        n = 0
        while time.perf_counter() < window[1]:
            n += 1
            t0 = time.perf_counter()
            ok = await post_write(session, address, write_body(k, n), REQUEST_TIMEOUT_S)
            t1 = time.perf_counter()
            if not ok:
                st.errors += 1
                continue
            st.acked += 1
            if window[0] <= t1 <= window[1]:
                st.timed.append(t1 - t0)

    await asyncio.gather(*(client(k) for k in range(clients)))
    offset_after = await metadata_offset(session, address)
    acked = sum(s.acked for s in stats)
    appended = offset_after - offset_before
    if appended < acked:
        raise RuntimeError(
            f"{acked} writes acknowledged but the metadata offset moved by {appended} only"
        )
    timed = [x for s in stats for x in s.timed]
    return {
        "clients": clients,
        "writes_per_s": round(len(timed) / duration_s, 1),
        "timed_writes": len(timed),
        "errors": sum(s.errors for s in stats),
        "acked_total": acked,
        "records_appended": appended,
        **latency_summary(timed),
    }


# -- (b) sequential latency -------------------------------------------------------------------


async def sequential_latency(
    session: aiohttp.ClientSession, address: str, writes: int
) -> dict[str, Any]:
    latencies: list[float] = []
    errors = 0
    for n in range(LATENCY_WARMUP_WRITES + writes):
        t0 = time.perf_counter()
        ok = await post_write(session, address, write_body(0, n), REQUEST_TIMEOUT_S)
        elapsed = time.perf_counter() - t0
        if not ok:
            errors += 1
        elif n >= LATENCY_WARMUP_WRITES:
            latencies.append(elapsed)
    return {"writes": len(latencies), "errors": errors, **latency_summary(latencies)}


# -- (c) failover -----------------------------------------------------------------------------


async def failover_round(
    session: aiohttp.ClientSession, controllers: list[NodeProcess], rnd: int
) -> dict[str, Any]:
    active = await asyncio.to_thread(wait_for_active, controllers, 30.0)
    survivors = [c for c in controllers if c is not active]
    body = write_body(0, 1_000_000 + rnd)
    killed_at = time.perf_counter()
    active.kill()
    acked_at: float | None = None
    attempts = 0
    deadline = killed_at + FAILOVER_DEADLINE_S
    while acked_at is None and time.perf_counter() < deadline:
        for c in survivors:
            attempts += 1
            if await post_write(session, c.address, body, FAILOVER_REQUEST_TIMEOUT_S):
                acked_at = time.perf_counter()
                break
        else:
            await asyncio.sleep(FAILOVER_RETRY_S)
    if acked_at is None:
        raise RuntimeError(f"round {rnd}: no survivor acknowledged a write within the deadline")
    new_active = await asyncio.to_thread(wait_for_active, survivors, 10.0)
    restarted_at = time.perf_counter()
    active.start()
    await asyncio.to_thread(wait_until_caught_up, controllers, 60.0)
    return {
        "round": rnd + 1,
        "killed": active.node_id,
        "new_active": new_active.node_id,
        "failover_s": round(acked_at - killed_at, 3),
        "attempts": attempts,
        "rejoin_s": round(time.perf_counter() - restarted_at, 3),
    }


# -- driver -----------------------------------------------------------------------------------


async def run_all(controllers: list[NodeProcess], args: argparse.Namespace) -> dict[str, Any]:
    # One keep-alive connection per client; no connection limit below the client count.
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        active = await asyncio.to_thread(wait_for_active, controllers, 30.0)
        address = active.address
        rows = []
        for clients in args.clients:
            row = await throughput(session, address, clients, args.duration, args.warmup)
            rows.append(row)
            print(
                f"  {clients:>3} clients: {row['writes_per_s']:>8.1f} writes/s  "
                f"p50 {row.get('p50_ms', float('nan')):.2f} ms  "
                f"p99 {row.get('p99_ms', float('nan')):.2f} ms  errors {row['errors']}",
                flush=True,
            )
        latency = await sequential_latency(session, address, args.latency_writes)
        print(
            f"  sequential: p50 {latency['p50_ms']:.2f} ms  p99 {latency['p99_ms']:.2f} ms  "
            f"p999 {latency['p999_ms']:.2f} ms",
            flush=True,
        )
        alter: dict[str, Any] = {}
        if args.alter_changes:
            alter = await alter_partition_case(
                session,
                address,
                changes=args.alter_changes,
                rounds=args.alter_rounds,
                modes=args.alter_modes,
                chunk=args.alter_chunk,
                concurrency=args.alter_concurrency,
            )
        rounds = []
        for rnd in range(args.failovers):
            row = await failover_round(session, controllers, rnd)
            rounds.append(row)
            print(
                f"  failover {rnd + 1}: killed {row['killed']} -> {row['new_active']} acked "
                f"after {row['failover_s']:.3f} s (rejoin {row['rejoin_s']:.1f} s)",
                flush=True,
            )
    failover: dict[str, Any] = {"rounds": rounds}
    if rounds:
        times = [r["failover_s"] for r in rounds]
        failover |= {
            "median_s": round(statistics.median(times), 3),
            "max_s": max(times),
            "min_s": min(times),
        }
    return {"throughput": rows, "latency": latency, "alter_partition": alter, "failover": failover}


def print_table(results: dict[str, Any]) -> None:
    print(f"\n{'clients':>7} {'writes/s':>9} {'p50 ms':>7} {'p99 ms':>7} {'errors':>6}")
    print("-" * 40)
    for row in results["throughput"]:
        print(
            f"{row['clients']:>7} {row['writes_per_s']:>9.1f} {row.get('p50_ms', 0):>7.2f} "
            f"{row.get('p99_ms', 0):>7.2f} {row['errors']:>6}"
        )
    lat = results["latency"]
    print(
        f"\nsequential commit latency, 1 client, {lat['writes']} writes: "
        f"p50 {lat['p50_ms']:.2f} ms, p99 {lat['p99_ms']:.2f} ms, "
        f"p999 {lat['p999_ms']:.2f} ms, max {lat['max_ms']:.2f} ms"
    )
    alter = results.get("alter_partition") or {}
    for mode in ("batched", "single"):
        if mode in alter:
            print(
                f"AlterPartition {mode}: {alter['partitions']} changes per round, "
                f"median {alter[mode]['median_changes_per_s']:.0f} changes/s over "
                f"{alter['rounds']} rounds"
            )
    fo = results["failover"]
    if fo["rounds"]:
        each = " ".join(f"{r['failover_s']:.3f}" for r in fo["rounds"])
        print(
            f"failover (SIGKILL active -> survivor acks a write), {len(fo['rounds'])} rounds: "
            f"median {fo['median_s']:.3f} s, max {fo['max_s']:.3f} s  [{each}]"
        )


def parse_clients(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected e.g. 1,8,32, got {text!r}") from None
    if not values or any(v < 1 or v > 1024 for v in values):
        raise argparse.ArgumentTypeError("client counts must be in [1, 1024]")
    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.controller_bench",
        description="Committed metadata writes/s, commit latency and failover time of a "
        "3-controller quorum, through its HTTP API.",
    )
    parser.add_argument("--clients", type=parse_clients, default=[1, 8, 32])
    parser.add_argument("--duration", type=float, default=4.0, help="timed seconds per level")
    parser.add_argument("--warmup", type=float, default=0.5, help="untimed seconds per level")
    parser.add_argument("--latency-writes", type=int, default=5000)
    parser.add_argument("--failovers", type=int, default=5)
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument(
        "--alter-changes", type=int, default=1000, help="AlterPartition changes per round (0: skip)"
    )
    parser.add_argument("--alter-rounds", type=int, default=4)
    parser.add_argument(
        "--alter-modes",
        type=lambda t: [m for m in t.split(",") if m],
        default=["batched", "single"],
        help="batched (/v1/partitions/alter-many) and/or single (/v1/partitions/alter)",
    )
    parser.add_argument(
        "--alter-chunk", type=int, default=0, help="partitions per batched request (0: all)"
    )
    parser.add_argument(
        "--alter-concurrency", type=int, default=32, help="single requests in flight"
    )
    parser.add_argument(
        "--dir", type=Path, default=REPO / "bench", help="where the scratch dir goes"
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON results file")
    args = parser.parse_args(argv)
    if args.duration <= 0 or args.warmup < 0:
        parser.error("--duration must be > 0 and --warmup >= 0")
    if args.latency_writes < 1 or args.failovers < 0 or args.controllers < 1:
        parser.error("--latency-writes >= 1, --failovers >= 0, --controllers >= 1")
    if args.failovers and args.controllers < 3:
        parser.error("failover needs at least 3 controllers (a majority must survive)")

    started = time.perf_counter()
    args.dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".controller-bench-", dir=args.dir))
    filesystem = filesystem_of(scratch)
    print(
        f"controller bench: {args.controllers} controllers on 127.0.0.1, data in {scratch} "
        f"[{filesystem or 'unknown filesystem'}]\nwrite: {WRITE_DESCRIPTION}",
        flush=True,
    )
    controllers: list[NodeProcess] = []
    try:
        # No brokers: nothing to fence. Long sessions anyway, so no tick ever writes.
        controllers = start_controllers(
            args.controllers, scratch, properties={"broker.session.timeout.ms": "600000"}
        )
        print(f"quorum up in {time.perf_counter() - started:.1f} s", flush=True)
        results = asyncio.run(run_all(controllers, args))
    except (LauncherError, RuntimeError, BenchError) as exc:
        print(f"controller bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        stop_nodes(controllers)
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    print_table(results)
    elapsed = time.perf_counter() - started
    write_results(
        args.out,
        "controller",
        ("kraft", "metadata_log"),
        {
            "settings": {
                "controllers": args.controllers,
                "host": "127.0.0.1",
                "write": WRITE_DESCRIPTION,
                "clients": args.clients,
                "duration_s": args.duration,
                "warmup_s": args.warmup,
                "latency_writes": args.latency_writes,
                "latency_warmup_writes": LATENCY_WARMUP_WRITES,
                "failovers": args.failovers,
                "alter_changes": args.alter_changes,
                "alter_rounds": args.alter_rounds,
                "alter_modes": args.alter_modes,
                "alter_chunk": args.alter_chunk,
                "alter_concurrency": args.alter_concurrency,
                "failover_retry_s": FAILOVER_RETRY_S,
                "failover_request_timeout_s": FAILOVER_REQUEST_TIMEOUT_S,
                "data_filesystem": filesystem,
                "client": f"aiohttp {aiohttp.__version__}, in one process with the bench",
                "percentiles": "nearest rank",
            },
            "results": results,
        },
        elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
