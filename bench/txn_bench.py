"""Transactional produce beside idempotent produce, in the same run (issue 15).

    python -m bench.txn_bench [--records 200000] [--per-txn 100] [--brokers 3] [--rf 3]
                              [--rounds 3]

One local cluster (`kraft dev`, 3 controllers, B brokers), one topic of 4 partitions at
replication factor RF per phase. Each round runs, interleaved so twins meet the same
machine state:
- idempotent: N records of 1 KiB, acks=all, `enable.idempotence`, linger.ms=5; timed
  from the first produce() to the end of flush();
- transactional: the same N records in transactions of `--per-txn` records
  (begin, produce, commit_transaction; the commit waits for every record and for the
  markers), one transactional.id; timed the same way.
The figure of interest is the ratio transactional / idempotent (median over rounds):
the cost of the coordinator's round trips and markers per transaction. Prints a table
and writes bench/results/txn.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import Producer

from bench.broker_bench import REPO, Cluster, create_topic, run_phase
from bench.storage_bench import write_results

SIZE = 1024
MB = 1_000_000
DEFAULT_OUT = REPO / "bench" / "results" / "txn.json"
BASE = {"acks": "all", "linger.ms": "5", "batch.size": "1000000"}


def produce_idempotent(bootstrap: str, topic: str, n: int) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, **BASE})
    p.list_topics(topic, timeout=10)
    value = os.urandom(SIZE)
    errors: list[Any] = []
    t0 = time.perf_counter()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value, on_delivery=lambda e, m: errors.append(e) if e else None)
                break
            except BufferError:
                p.poll(0.005)
    if p.flush(120) or errors:
        raise RuntimeError(f"idempotent produce failed: {errors[:1]}")
    return time.perf_counter() - t0


def produce_transactional(bootstrap: str, topic: str, n: int, per_txn: int, tid: str) -> float:
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, **BASE})
    p.init_transactions(60)
    value = os.urandom(SIZE)
    t0 = time.perf_counter()
    for start in range(0, n, per_txn):
        p.begin_transaction()
        for _ in range(min(per_txn, n - start)):
            while True:
                try:
                    p.produce(topic, value)
                    break
                except BufferError:
                    p.poll(0.005)
        p.commit_transaction(120)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--per-txn", type=int, default=100)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--rf", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    n = args.records
    rounds: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="txn-bench-", dir=REPO / "bench") as scratch:
        cluster = Cluster(args.brokers, Path(scratch), 60, False)
        try:
            for r in range(1, args.rounds + 1):
                row: dict[str, Any] = {"round": r}
                for mode in ("idempotent", "transactional"):
                    topic = f"bench-{mode}-{r}"
                    create_topic(cluster.bootstrap, topic, args.rf, {})
                    if mode == "idempotent":
                        secs, cpu = run_phase(
                            cluster, lambda t=topic: produce_idempotent(cluster.bootstrap, t, n))
                    else:
                        secs, cpu = run_phase(cluster, lambda t=topic, r=r: produce_transactional(
                            cluster.bootstrap, t, n, args.per_txn, f"bench-txn-{r}"))
                    row[mode] = {"seconds": round(secs, 3), "msg_per_s": round(n / secs),
                                 "mb_per_s": round(n * SIZE / secs / MB, 1), **cpu}
                    print(f"round {r} {mode:>13}: {row[mode]['msg_per_s']:>8} msg/s "
                          f"{row[mode]['mb_per_s']:>7} MB/s", flush=True)
                row["ratio"] = round(row["transactional"]["mb_per_s"]
                                     / row["idempotent"]["mb_per_s"], 3)
                rounds.append(row)
        finally:
            cluster.stop()
    med = {m: statistics.median(r[m]["mb_per_s"] for r in rounds)
           for m in ("idempotent", "transactional")}
    ratio = statistics.median(r["ratio"] for r in rounds)
    print(f"\n1 KiB, {args.per_txn} records per transaction, {args.brokers} brokers RF {args.rf}:"
          f" idempotent {med['idempotent']} MB/s, transactional {med['transactional']} MB/s,"
          f" ratio {ratio:.2f}x (median of {args.rounds} rounds)")
    write_results(args.out, "txn", ("broker", "storage"), {
        "records": n, "record_bytes": SIZE, "records_per_txn": args.per_txn,
        "brokers": args.brokers, "rf": args.rf, "rounds": rounds,
        "median_mb_per_s": med, "median_ratio": ratio,
        "client": f"confluent-kafka {confluent_kafka.__version__}",
        "command": "python -m bench.txn_bench " + " ".join(sys.argv[1:] if argv is None else argv),
    }, time.monotonic() - started)
    return 0


if __name__ == "__main__":
    sys.exit(main())
