"""What a replicated message costs the brokers: CPU, page faults, context switches, bytes.

    python -m bench.replication_cost [--messages 2000000] [--rf 1,3] [--rounds 2]
                                     [--probe-mb 3072] [--out bench/results/replication_cost.json]

For each replication factor, a fresh `kraft dev` with RF brokers (bench.broker_bench.Cluster),
a 4-partition topic, 20,000 warm-up messages, then `--messages` 1 KiB messages produced
with acks=all (bench.broker_bench.produce). Around the measured produce, every broker's
/proc/<pid>/stat (utime, stime, minflt, majflt), /proc/<pid>/task/*/status (voluntary
and involuntary context switches) and /proc/<pid>/io (wchar, rchar, syscw, syscr) are
read; the figures are per 10^6 messages, per broker and summed over the brokers, and
RF N / RF 1 of the summed CPU is given per round (RF cases alternate within a round).

Why the message count matters: a run that writes more than the kernel holds in recently
freed pages allocates page cache from memory the VM's host took back (virtio-balloon free
page reporting), and the first touch of each such page costs a host fault inside the
copy (copy_folio_from_iter_atomic), about 15x the copy itself. RF 3 writes three copies,
so it crosses that line three times sooner; and a case run after another whose data is
still on disk starts further into it (so each case's data is deleted when it ends).
`--probe-mb` first measures the effect on its own: a plain file written 1 MiB at a time,
CPU ms per GB for every 256 MiB, without and with drop-behind (storage/segment.py
LogSegment.drop_behind, which the followers' logs use). Writes bench/results/replication_cost.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.broker_bench import REPO, Cluster, create_topic, produce
from bench.storage_bench import write_results

SIZE = 1024
CHUNK = 256 << 20


def proc_counters(pid: int) -> dict[str, float]:
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    out = {
        "cpu_s": (int(stat[11]) + int(stat[12])) / tick,
        "user_s": int(stat[11]) / tick,
        "sys_s": int(stat[12]) / tick,
        "minflt": int(stat[7]),
        "majflt": int(stat[9]),
        "vol_ctxsw": 0,
        "invol_ctxsw": 0,
    }
    for task in os.listdir(f"/proc/{pid}/task"):
        for line in Path(f"/proc/{pid}/task/{task}/status").read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches"):
                out["vol_ctxsw"] += int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches"):
                out["invol_ctxsw"] += int(line.split()[1])
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    for key in ("wchar", "rchar", "syscw", "syscr"):
        out[key] = int(io[key])
    return out


def run_case(rf: int, messages: int, scratch: Path, round_no: int) -> dict:
    """One fresh cluster; its data is deleted afterwards, as peer_bench does per round."""
    scratch = scratch / f"rf{rf}-r{round_no}"
    scratch.mkdir()
    cluster = Cluster(rf, scratch, 60.0, False, round_no)
    try:
        create_topic(cluster.bootstrap, "bench-cost", rf, {})
        produce(cluster.bootstrap, "bench-cost", 20_000, SIZE, {})
        before = [proc_counters(p) for p in cluster.broker_pids]
        seconds, errors = produce(cluster.bootstrap, "bench-cost", messages, SIZE, {})
        after = [proc_counters(p) for p in cluster.broker_pids]
    finally:
        cluster.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    per = [
        {k: round((a[k] - b[k]) * 1e6 / messages, 3) for k in a}
        for b, a in zip(before, after, strict=True)
    ]
    total = {k: round(sum(p[k] for p in per), 3) for k in per[0]}
    return {"rf": rf, "msg_per_s": round(messages / seconds), "errors": errors,
            "per_million_summed": total, "per_million_by_broker": per}  # fmt: skip


def probe(path: Path, total_mb: int, keep: int) -> list[int]:
    """CPU ms per GB of each 256 MiB written to a new file; `keep` > 0: drop-behind."""
    buf = memoryview(bytearray(os.urandom(1 << 20)))
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY | os.O_APPEND)
    size = kicked = dropped = 0
    out = []
    try:
        for _ in range(total_mb // 256):
            t0 = time.process_time()
            for _ in range(256):
                size += os.writev(fd, [buf])
                if keep and size - keep - kicked >= 8 << 20:  # as LogSegment.drop_behind
                    os.posix_fadvise(fd, kicked, size - keep - kicked, os.POSIX_FADV_DONTNEED)
                    kicked = size - keep
                    if kicked - keep > dropped:
                        n = kicked - keep - dropped
                        os.posix_fadvise(fd, dropped, n, os.POSIX_FADV_DONTNEED)
                        dropped = kicked - keep
            out.append(round((time.process_time() - t0) * 1000 * 1e9 / CHUNK))
    finally:
        os.close(fd)
        path.unlink()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=2_000_000)
    ap.add_argument("--rf", default="1,3")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--probe-mb", type=int, default=3072, help="0: no page-cache probe")
    ap.add_argument("--settle-s", type=float, default=20.0, help="idle before each probe")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/replication_cost.json")
    args = ap.parse_args()
    t0 = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="replication-cost-", dir=REPO / "bench"))
    body: dict = {"settings": vars(args) | {"out": str(args.out), "size": SIZE}}
    try:
        if args.probe_mb:
            body["probe_cpu_ms_per_gb"] = {}
            for label, keep in (("plain", 0), ("drop_behind_32mib", 32 << 20)):
                time.sleep(args.settle_s)  # let the host take freed memory back first
                body["probe_cpu_ms_per_gb"][label] = got = probe(
                    scratch / "probe", args.probe_mb, keep
                )
                print(f"page-cache probe, {label}: CPU ms/GB per 256 MiB: {got}")
        rfs = [int(x) for x in args.rf.split(",")]
        rounds = []
        for r in range(1, args.rounds + 1):
            order = rfs if r % 2 else rfs[::-1]
            cases = {rf: run_case(rf, args.messages, scratch, r) for rf in order}
            for rf in order:
                c = cases[rf]
                print(f"round {r} RF {rf}: {c['msg_per_s']} msg/s, per 10^6 msgs summed: "
                      f"{c['per_million_summed']}")  # fmt: skip
            rounds.append({str(rf): cases[rf] for rf in rfs})
        body["rounds"] = rounds
        if 1 in rfs:
            body["cpu_over_rf1"] = {
                str(rf): [round(x[str(rf)]["per_million_summed"]["cpu_s"]
                                / x["1"]["per_million_summed"]["cpu_s"], 2) for x in rounds]
                for rf in rfs if rf != 1
            }  # fmt: skip
            for rf, ratios in body["cpu_over_rf1"].items():
                print(f"RF {rf} / RF 1 broker CPU per message: {ratios} "
                      f"(median {statistics.median(ratios)})")  # fmt: skip
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    write_results(args.out, "replication_cost", ("broker", "storage"), body, time.monotonic() - t0)


if __name__ == "__main__":
    main()
