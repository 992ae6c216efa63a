"""Spark bench: a full-topic read with `spark.read.format("kraft")` beside an in-memory
Arrow source giving Spark the same rows, in the same run.

    python -m bench.spark_bench [--messages 1000000] [--value-bytes 100] [--rounds 5]

A local cluster is started with `kraft dev` (3 controllers, 3 brokers, scratch data
dir), a topic of 4 partitions (replication factor 3) is filled with N values of S
bytes (no key) by confluent-kafka. Then, in one local[2] SparkSession, each round
times the same action on both sources: `df.write.format("noop").mode("overwrite")
.save()`, which makes every row of every column and throws it away. The kraft source
fetches over the Kafka protocol from the brokers, which share the 2 cores with Spark;
the "arrow_memory" source (bench/spark_baseline.py) has its batches in memory. One
untimed warm-up round each first; rounds alternate the two; the figures are medians.
Target: kraft >= 0.7 x arrow_memory. Writes bench/results/spark.json.
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

from bench.broker_bench import Cluster, create_topic, produce
from bench.latency_bench import machine_busy_s
from bench.storage_bench import write_results

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "spark.json"
TARGET = 0.7
PARTITIONS = 4


def session() -> Any:
    # Workers must find `bench` too (the baseline source's class): PYTHONPATH, set
    # before the JVM starts.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    from bench.spark_baseline import ArrowMemorySource
    from spark_jobs.job_common import local_session

    spark = local_session("kraft-spark-bench")
    spark.dataSource.register(ArrowMemorySource)
    return spark


def timed_read(df: Any, busy: list[float] | None = None) -> float:
    b0, t0 = machine_busy_s(), time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - t0
    if busy is not None:
        busy.append(machine_busy_s() - b0)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--value-bytes", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    started = time.monotonic()
    n = args.messages
    with tempfile.TemporaryDirectory(prefix="spark-bench-", dir=REPO / "bench") as scratch:
        print("starting kraft dev: 3 brokers + 3 controllers ...", flush=True)
        cluster = Cluster(3, Path(scratch), args.timeout)
        try:
            create_topic(cluster.bootstrap, "spark-bench", 3)
            print(f"producing {n:,} x {args.value_bytes} B ...", flush=True)
            _, failed = produce(cluster.bootstrap, "spark-bench", n, args.value_bytes)
            if failed:
                raise SystemExit(f"{failed} messages were not acknowledged")
            spark = session()
            kraft = (spark.read.format("kraft")
                     .option("kafka.bootstrap.servers", cluster.bootstrap)
                     .option("subscribe", "spark-bench").load())
            memory = (spark.read.format("arrow_memory").option("rows", str(n))
                      .option("partitions", str(PARTITIONS))
                      .option("valueBytes", str(args.value_bytes)).load())
            assert kraft.count() == n, "the topic does not hold every message"
            timed_read(kraft)
            timed_read(memory)  # warm-up: worker start, first query planning
            times: dict[str, list[float]] = {"kraft": [], "arrow_memory": []}
            busy: dict[str, list[float]] = {"kraft": [], "arrow_memory": []}
            for r in range(args.rounds):
                for name, df in (("kraft", kraft), ("arrow_memory", memory)):
                    times[name].append(timed_read(df, busy[name]))
                print(f"round {r + 1}: " + ", ".join(
                    f"{k} {n / times[k][-1]:,.0f} rows/s ({busy[k][-1]:.2f} CPU-s busy)"
                    for k in times), flush=True)
            spark.stop()
        finally:
            cluster.stop()
    rates = {k: n / statistics.median(v) for k, v in times.items()}
    ratio = rates["kraft"] / rates["arrow_memory"]
    print(f"\nfull-topic read of {n:,} x {args.value_bytes} B in local[2] (medians of "
          f"{args.rounds}):")
    print(f"  kraft source        {rates['kraft']:>12,.0f} rows/s")
    print(f"  in-memory Arrow     {rates['arrow_memory']:>12,.0f} rows/s")
    print(f"  ratio {ratio:.2f} (target >= {TARGET}): {'met' if ratio >= TARGET else 'NOT met'}")
    write_results(
        args.out,
        "spark_read",
        ("spark_jobs", "bench"),
        {
            "settings": {"messages": n, "value_bytes": args.value_bytes,
                         "partitions": PARTITIONS, "replication_factor": 3,
                         "master": "local[2]", "action": "write.format('noop')",
                         "rounds": args.rounds},
            "target": {"ratio_min": TARGET, "met": ratio >= TARGET},
            "results": {"rows_per_s": {k: round(v) for k, v in rates.items()},
                        "ratio": round(ratio, 3),
                        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
                        # CPU seconds the whole machine was busy during each read
                        "machine_busy_cpu_s": {k: [round(x, 2) for x in v]
                                               for k, v in busy.items()}},
        },
        time.monotonic() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
