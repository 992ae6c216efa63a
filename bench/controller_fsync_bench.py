"""What durable metadata costs: controller commit throughput with the Raft journal
fsynced (the default) beside the same quorum with `controller.quorum.fsync.enable=false`.

    python -m bench.controller_fsync_bench [--rounds 3] [--clients 32] [--duration 4]
                                           [--out bench/results/controller_fsync.json]

Each round starts a fresh 3-controller quorum per mode (the order alternates between
rounds) and measures, with bench/controller_bench.py's write (one ConfigRecord per
Raft entry through the HTTP API): writes/s with `--clients` concurrent clients, and the
sequential commit latency of one client. The figure is the ratio fsync / no fsync per
round, and its median (target: throughput >= 0.5x, from group commit: one fsync covers
every entry a voter received in one poll round, kraft/raft_durability.py). The
filesystem under the scratch dir is printed: an fsync's price is the disk's.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.controller_bench import sequential_latency, throughput
from bench.storage_bench import filesystem_of, write_results
from kraft.tools.launcher import NodeProcess, stop_nodes, wait_for_active
from kraft.tools.local_cluster import start_controllers

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "controller_fsync.json"
TARGET = 0.5


async def measure(controllers: list[NodeProcess], args: argparse.Namespace) -> dict[str, Any]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        active = await asyncio.to_thread(wait_for_active, controllers, 30.0)
        row = await throughput(session, active.address, args.clients, args.duration, 0.5)
        latency = await sequential_latency(session, active.address, args.latency_writes)
    return {"writes_per_s": row["writes_per_s"], "errors": row["errors"], "latency": latency}


def one(mode: str, scratch: Path, args: argparse.Namespace) -> dict[str, Any]:
    props = {
        "broker.session.timeout.ms": "600000",
        "controller.quorum.fsync.enable": "true" if mode == "fsync" else "false",
    }
    controllers = start_controllers(3, scratch / mode, properties=props)
    try:
        return asyncio.run(measure(controllers, args))
    finally:
        stop_nodes(controllers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controller_fsync_bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=4.0)
    parser.add_argument("--latency-writes", type=int, default=2000)
    parser.add_argument("--dir", type=Path, default=REPO / "bench")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    rounds = []
    for rnd in range(args.rounds):
        order = ["fsync", "nofsync"] if rnd % 2 == 0 else ["nofsync", "fsync"]
        row: dict[str, Any] = {"order": order}
        for mode in order:
            scratch = Path(tempfile.mkdtemp(prefix=".fsync-bench-", dir=args.dir))
            try:
                if rnd == 0 and mode == order[0]:
                    print(f"data on {filesystem_of(scratch) or 'unknown filesystem'}")
                row[mode] = one(mode, scratch, args)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        row["throughput_ratio"] = round(
            row["fsync"]["writes_per_s"] / max(row["nofsync"]["writes_per_s"], 1e-9), 3
        )
        row["p50_latency_ratio"] = round(
            row["fsync"]["latency"]["p50_ms"] / max(row["nofsync"]["latency"]["p50_ms"], 1e-9), 3
        )
        rounds.append(row)
        print(
            f"round {rnd + 1}: {args.clients} clients fsync {row['fsync']['writes_per_s']:.0f} "
            f"vs off {row['nofsync']['writes_per_s']:.0f} writes/s = "
            f"{row['throughput_ratio']:.2f}x; sequential p50 "
            f"{row['fsync']['latency']['p50_ms']:.2f} vs "
            f"{row['nofsync']['latency']['p50_ms']:.2f} ms",
            flush=True,
        )
    median = statistics.median(r["throughput_ratio"] for r in rounds)
    print(f"commit throughput with fsync: median {median:.2f}x of without (target >= {TARGET}x)")
    write_results(
        args.out,
        "controller_fsync",
        ("kraft",),
        {
            "settings": vars(args) | {"dir": str(args.dir), "out": str(args.out)},
            "target": {"throughput_ratio_min": TARGET},
            "rounds": rounds,
            "median_throughput_ratio": median,
        },
        time.perf_counter() - started,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
