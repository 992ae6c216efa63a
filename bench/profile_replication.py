"""Where the brokers spend their CPU under produce load: py-spy (and perf) on every broker.

    python -m bench.profile_replication OUT_DIR [--brokers 3] [--size 1024]
                                        [--messages 2500000] [--perf]

Starts `kraft dev` with B brokers (as bench/broker_bench.py does), creates a 4-partition
topic with replication factor B, runs one confluent-kafka producer (acks=all) in a
thread and, 1.5 s into it, records every broker with `py-spy record --format raw` for
3 s (then, with --perf, `perf record -g` for 3 s: C and kernel frames, e.g. the page
cache's copy_folio_from_iter_atomic). Prints per broker the top leaf and inclusive
Python frames (idle time in select() left out) and leaves the raw files in OUT_DIR
(`perf report -i OUT_DIR/perfN.data --no-children --sort symbol`).

Needs py-spy (the venv's, or on PATH) and, for --perf, perf with permission to attach.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.broker_bench import Cluster, create_topic, produce


def py_spy() -> str:
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else (shutil.which("py-spy") or "py-spy")


def summarize(path: Path, top: int = 15) -> str:
    leaf: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    busy = idle = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        n = int(count)
        frames = stack.split(";")
        if "select (selectors" in frames[-1]:
            idle += n
            continue
        busy += n
        leaf[frames[-1]] += n
        for f in {x.split(" (")[0] for x in frames}:
            incl[f] += n
    out = [f"== {path.name}: {busy} busy samples (+{idle} idle in select)", " leaf:"]
    out += [f"  {100 * n / busy:5.1f}% {f}" for f, n in leaf.most_common(top)]
    out.append(" inclusive (below 90%):")
    out += [f"  {100 * n / busy:5.1f}% {f}" for f, n in incl.most_common(4 * top)
            if n / busy < 0.9][:top]  # fmt: skip
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--messages", type=int, default=2_500_000)
    ap.add_argument("--perf", action="store_true")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="profile-"))
    cluster = Cluster(args.brokers, scratch, 60.0, False)
    try:
        create_topic(cluster.bootstrap, "bench-profile", args.brokers, {})
        load = threading.Thread(
            target=produce,
            args=(cluster.bootstrap, "bench-profile", args.messages, args.size, {}),
        )
        load.start()
        time.sleep(1.5)
        spy = [
            subprocess.Popen(
                [
                    py_spy(),
                    "record",
                    "-p",
                    str(pid),
                    "--duration",
                    "3",
                    "--rate",
                    "250",
                    "--format",
                    "raw",
                    "--nonblocking",
                    "-o",
                    str(args.out / f"b{i}.txt"),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            for i, pid in enumerate(cluster.broker_pids)
        ]
        for p in spy:
            p.wait()
        if args.perf:
            perf = [
                subprocess.Popen(
                    [
                        "perf",
                        "record",
                        "-g",
                        "-p",
                        str(pid),
                        "-o",
                        str(args.out / f"perf{i}.data"),
                        "--",
                        "sleep",
                        "3",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )  # fmt: skip
                for i, pid in enumerate(cluster.broker_pids)
            ]
            for p in perf:
                p.wait()
        load.join()
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    for i in range(len(cluster.broker_pids)):
        path = args.out / f"b{i}.txt"
        if path.exists() and os.path.getsize(path):
            print(summarize(path))


if __name__ == "__main__":
    main()
