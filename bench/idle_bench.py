"""Idle cost: CPU and RSS of every process of an idle cluster.

    python -m bench.idle_bench [--seconds 30] [--settle 10] [--partitions 100]
                               [--out bench/results/idle.json]

3 controllers and 3 brokers, each its own process with every timing at its default
(tests/harness/cluster_procs.py's ProcCluster), hosting one topic of --partitions
partitions at RF 3 (so the followers' fetch sessions and the controllers' ticks have
something to do, as in a real idle cluster). After --settle seconds (start-up, leader
elections, ISRs whole), each process's utime + stime is read from /proc before and after
--seconds of nothing: CPU as % of one core, and its RSS (VmRSS) at the end. The issue's
target (issue 16: < 2 % of a core per process) is printed met / NOT met, never enforced.
Writes bench/results/idle.json.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

from bench.broker_bench import cpu_seconds
from bench.storage_bench import REPO, write_results
from tests.harness.cluster_procs import ProcCluster, wait_for

TOPIC = "idle-bench"
TARGET_PCT = 2.0


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0, help="measured idle seconds")
    ap.add_argument("--settle", type=float, default=10.0, help="seconds before measuring")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/idle.json")
    args = ap.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="idle-bench-") as scratch:
        c = ProcCluster(Path(scratch) / "data")
        try:
            c.start()
            admin = AdminClient({"bootstrap.servers": c.bootstrap})
            admin.create_topics([NewTopic(TOPIC, args.partitions, 3)])[TOPIC].result(60)

            def whole() -> bool:
                parts = c.partitions(TOPIC) or {}
                return len(parts) == args.partitions and all(
                    len(p["isr"]) == 3 for p in parts.values()
                )

            wait_for(whole, 120, "every ISR whole")
            time.sleep(args.settle)  # a deliberate idle period: what is measured
            nodes = [("controller", n) for n in c.controllers] + [("broker", n) for n in c.brokers]
            pids = {f"{role}-{n.node_id}": n.pid for role, n in nodes}
            before = {k: cpu_seconds([pid]) for k, pid in pids.items() if pid}
            t0 = time.monotonic()
            time.sleep(args.seconds)  # the measured idle interval itself
            wall = time.monotonic() - t0
            after = {k: cpu_seconds([pid]) for k, pid in pids.items() if pid}
            rows: dict[str, Any] = {
                k: {
                    "cpu_pct_of_core": round(100 * (after[k] - before[k]) / wall, 2),
                    "rss_mb": round(rss_mb(pids[k]), 1),  # type: ignore[arg-type]
                }
                for k in before
            }
        finally:
            c.close()
    worst = max(r["cpu_pct_of_core"] for r in rows.values())
    for k, r in rows.items():
        print(f"{k:14s} cpu {r['cpu_pct_of_core']:5.2f} % of a core   rss {r['rss_mb']:6.1f} MB")
    print(
        f"busiest process: {worst:.2f} % of a core (target < {TARGET_PCT} %: "
        f"{'met' if worst < TARGET_PCT else 'NOT met'})"
    )
    body = {
        "settings": {
            "seconds": args.seconds,
            "settle_s": args.settle,
            "topic": f"{args.partitions} partitions, RF 3",
            "cluster": "3 controllers + 3 brokers, default timings",
        },
        "targets": {"cpu_pct_of_core_max": TARGET_PCT},
        "processes": rows,
    }
    write_results(args.out, "idle", ("kraft", "broker", "bench"), body, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
