"""Broker benchmark: produce then consume N messages with confluent-kafka.

    python -m bench.broker_bench [--messages 1000000] [--sizes 100,1024]
                                 [--setups 1x1,1x1:sasl_ssl,3x3]

For each setup, a real local cluster is started with `kraft dev` (3 controllers and B
brokers, free ports, data in a scratch directory under `bench/`), a topic of 4
partitions with replication factor RF is created per message size (topic-level
`min.insync.replicas` left at the broker default), and one Python process (this one)
runs one confluent-kafka producer, then one consumer, as in /work/shared/notes/peers.md:

- produce: N messages of S bytes (no key), acks=all, linger.ms=5, batch.size=1000000;
  timed from the first produce() to the end of flush() (every message acknowledged).
- consume: a new consumer, assign() of all partitions from the beginning, no group
  commits, fetch.queue.backoff.ms=0, queued.min.messages=10000000,
  queued.max.messages.kbytes=2097151; timed from assign() to the N-th message.

msg/s and MB/s (10^6 bytes of message value per second) are printed with the broker CPU
seconds per million messages: utime+stime of every broker process from /proc/<pid>/stat,
read before and after each phase (the controllers' CPU is recorded in the JSON too).
Client, brokers and controllers share the machine's CPUs. The clusters are stopped with
SIGTERM to `kraft dev` (brokers first, then controllers). Writes bench/results/broker.json.

A `:sasl_ssl` setup runs the same on `kraft dev --secure`: clients over TLS with
SCRAM-SHA-512 as its user `alice` (ACLs: ALL on topics prefixed `bench-`, READ on the
consumer's group, so every request is authorized), replication on the brokers' own
SASL_SSL listener. Its figures are compared with the PLAINTEXT setup of the same shape
in the same run, as a ratio (target: at least 0.7x at 1 KiB).

Rounds (`--rounds R`, default 3): every setup runs R times, interleaved (round 1 of each
setup, then round 2 of each, ...), so twins meet the same machine state. Why: on a
2-core VM the client and the broker share the CPUs, and produce time is dominated by
writes into the page cache, whose cost swings with the kernel's memory state (fresh
pages fault in the hypervisor); one PLAINTEXT run measured anywhere from 280 to 550 MB/s
in the same hour. Each figure reported is the median of its rounds (every round is kept
in the JSON), and the SASL_SSL ratio is the median of the per-round ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaException,
    Producer,
    TopicPartition,
    libversion,
)
from confluent_kafka.admin import AdminClient, NewTopic

from bench.storage_bench import filesystem_of, write_results
from common.client_config import load_command_config

CLIENT = f"confluent-kafka {confluent_kafka.__version__} (librdkafka {libversion()[0]})"

REPO = Path(__file__).resolve().parent.parent
DEFAULT_OUT = REPO / "bench" / "results" / "broker.json"
MB = 1_000_000
PARTITIONS = 4
CLK_TCK = os.sysconf("SC_CLK_TCK")
STALL_S = 60.0  # a phase with no progress for this long fails
# Targets for 1 KiB messages on 1 broker, RF 1.
TARGET_PRODUCE_MB_S = 150.0
TARGET_CONSUME_MB_S = 300.0
TARGET_SECURE_RATIO = 0.7  # SASL_SSL throughput / PLAINTEXT throughput, 1 KiB

PRODUCER_CONFIG = {
    "acks": "all",
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "queue.buffering.max.messages": 2_000_000,
    "queue.buffering.max.kbytes": 2_097_151,
    "delivery.report.only.error": True,
}
CONSUMER_CONFIG = {
    "group.id": "broker-bench",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.queue.backoff.ms": 0,
    "queued.min.messages": 10_000_000,
    "queued.max.messages.kbytes": 2_097_151,
}


class BenchError(Exception):
    pass


@dataclass
class Setup:
    brokers: int
    rf: int
    secure: bool = False  # kraft dev --secure: SASL_SSL (SCRAM-SHA-512) clients

    @property
    def label(self) -> str:
        s = f"{self.brokers} broker{'s' if self.brokers > 1 else ''}, RF {self.rf}"
        return s + (", SASL_SSL" if self.secure else "")


# -- the cluster ------------------------------------------------------------------------------


class Cluster:
    """`kraft dev --brokers B --base-port 0` in a scratch dir; stopped with SIGTERM."""

    def __init__(
        self, brokers: int, scratch: Path, timeout_s: float, secure: bool, round_no: int = 1
    ) -> None:
        name = f"{brokers}b" + ("-secure" if secure else "") + f"-r{round_no}"
        self.data_dir = scratch / f"cluster-{name}"
        self.data_dir.mkdir(parents=True)
        self.log_path = scratch / f"kraft-dev-{name}.out"
        kraft = Path(sys.executable).parent / "kraft"
        cmd = [str(kraft)] if kraft.exists() else [sys.executable, "-m", "kraft.tools.cli"]
        cmd += ["dev", "--data-dir", str(self.data_dir), "--brokers", str(brokers)]
        cmd += ["--base-port", "0", "--timeout", str(timeout_s)] + (["--secure"] if secure else [])
        self.command = " ".join(cmd[-8:])
        self.secure = secure
        with open(self.log_path, "wb") as out:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPO,
                start_new_session=True,
            )
        self.desc = self._wait_ready(timeout_s + 10)
        self.bootstrap: str = self.desc["bootstrap_servers"]
        self.broker_pids = [n["pid"] for n in self.desc["nodes"] if n["role"] == "broker"]
        self.controller_pids = [n["pid"] for n in self.desc["nodes"] if n["role"] == "controller"]
        props = (Path(self.desc["nodes"][-1]["data_dir"]) / "broker.properties").read_text()
        self.broker_props = dict(line.split("=", 1) for line in props.splitlines() if "=" in line)
        # librdkafka settings of the bench's user and of the super user (empty: PLAINTEXT)
        self.client_conf: dict[str, str] = {}
        self.admin_conf: dict[str, str] = {}
        if secure:
            self.client_conf = self._config("client.properties", timeout_s)
            self.admin_conf = self._config("admin.properties", timeout_s)
            grant_bench_acls(self.bootstrap, self.admin_conf, self.client_conf)

    def _config(self, name: str, timeout_s: float) -> dict[str, str]:
        """A client config `kraft dev --secure` writes once its user exists."""
        path = self.data_dir / name
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError(f"kraft dev --secure wrote no {name}:\n{self.tail()}")
            time.sleep(0.1)
        return load_command_config(path)

    def _wait_ready(self, timeout_s: float) -> dict[str, Any]:
        path = self.data_dir / "cluster.json"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BenchError(f"kraft dev exited ({self.proc.returncode}):\n{self.tail()}")
            if path.exists():
                with contextlib.suppress(ValueError):
                    desc = json.loads(path.read_text())
                    if all(n["pid"] for n in desc["nodes"]):
                        return desc
            time.sleep(0.1)
        raise BenchError(f"kraft dev not ready after {timeout_s:.0f}s:\n{self.tail()}")

    def tail(self, lines: int = 20) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(90)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of `pids` (their threads included), in seconds."""
    total = 0
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError as exc:
            raise BenchError(f"process {pid} is gone: {exc}") from None
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5)
    return total / CLK_TCK


def grant_bench_acls(bootstrap: str, admin_conf: dict[str, str], user_conf: dict[str, str]) -> None:
    """The bench user may do anything to `bench-*` topics and read its group."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    principal = "User:" + user_conf["sasl.username"]
    allow = AclPermissionType.ALLOW
    bindings = [
        AclBinding(
            ResourceType.TOPIC, "bench-", ResourcePatternType.PREFIXED, principal, "*",
            AclOperation.ALL, allow,
        ),
        AclBinding(
            ResourceType.GROUP, CONSUMER_CONFIG["group.id"], ResourcePatternType.LITERAL,
            principal, "*", AclOperation.READ, allow,
        ),
    ]  # fmt: skip
    admin = AdminClient({"bootstrap.servers": bootstrap, **admin_conf})
    for f in admin.create_acls(bindings).values():
        f.result(30)


def create_topic(bootstrap: str, name: str, rf: int, conf: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **conf})
    futures = admin.create_topics([NewTopic(name, PARTITIONS, rf)], operation_timeout=30)
    futures[name].result(60)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # metadata reaches the brokers a little later
        md = admin.list_topics(name, timeout=10).topics.get(name)
        if (
            md is not None
            and md.error is None
            and len(md.partitions) == PARTITIONS
            and all(p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values())
        ):
            return
        time.sleep(0.2)
    raise BenchError(f"topic {name}: no leaders / full ISR after 60 s")


# -- the phases -------------------------------------------------------------------------------


def produce(
    bootstrap: str, topic: str, n: int, size: int, conf: dict[str, str]
) -> tuple[float, int]:
    """(seconds, failed deliveries) for producing n messages of `size` bytes."""
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({"bootstrap.servers": bootstrap, **PRODUCER_CONFIG, **conf})
    producer.list_topics(topic, timeout=10)  # connect before the clock starts
    value = os.urandom(size)
    send = producer.produce
    poll = producer.poll
    t0 = time.perf_counter()
    for _ in range(n):
        try:
            send(topic, value, on_delivery=on_delivery)
        except BufferError:
            poll(0.005)
            send(topic, value, on_delivery=on_delivery)
    last, left = time.monotonic(), producer.flush(STALL_S)
    while left:
        before = left
        left = producer.flush(STALL_S)
        if left == before and time.monotonic() - last > STALL_S:
            raise BenchError(f"produce stalled with {left} messages unacknowledged")
        last = time.monotonic()
    elapsed = time.perf_counter() - t0
    if errors:
        print(f"  {len(errors)} delivery errors, first: {errors[0]}", file=sys.stderr)
    return elapsed, len(errors)


def consume(bootstrap: str, topic: str, n: int, conf: dict[str, str]) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG, **conf})
    try:
        consumer.list_topics(topic, timeout=10)
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        got = 0
        batch = consumer.consume
        t0 = time.perf_counter()
        consumer.assign(tps)
        last = time.monotonic()
        while got < n:
            msgs = batch(10_000, 1.0)
            if msgs:
                for m in msgs:
                    if m.error() is not None:
                        raise KafkaException(m.error())
                got += len(msgs)
                last = time.monotonic()
            elif time.monotonic() - last > STALL_S:
                raise BenchError(f"consume stalled at {got} of {n} messages")
        return time.perf_counter() - t0
    finally:
        consumer.close()


def run_phase(cluster: Cluster, fn: Any) -> tuple[Any, dict[str, float]]:
    b0, c0 = cpu_seconds(cluster.broker_pids), cpu_seconds(cluster.controller_pids)
    p0 = os.times()
    result = fn()
    p1 = os.times()
    b1, c1 = cpu_seconds(cluster.broker_pids), cpu_seconds(cluster.controller_pids)
    return result, {
        "broker_cpu_s": round(b1 - b0, 3),
        "controller_cpu_s": round(c1 - c0, 3),
        "client_cpu_s": round((p1.user - p0.user) + (p1.system - p0.system), 3),
    }


def figures(n: int, size: int, seconds: float, cpu: dict[str, float]) -> dict[str, Any]:
    return {
        "seconds": round(seconds, 3),
        "msg_per_s": round(n / seconds),
        "mb_per_s": round(n * size / seconds / MB, 1),
        "broker_cpu_s_per_million": round(cpu["broker_cpu_s"] / n * 1e6, 2),
        **cpu,
    }


def bench_setup(
    setup: Setup,
    sizes: list[int],
    n: int,
    scratch: Path,
    timeout: float,
    keep: bool = False,
    round_no: int = 1,
) -> dict:
    flag = " --secure" if setup.secure else ""
    print(f"starting kraft dev{flag}: {setup.brokers} broker(s) + 3 controllers ...", flush=True)
    t0 = time.monotonic()
    cluster = Cluster(setup.brokers, scratch, timeout, setup.secure, round_no)
    conf = cluster.client_conf
    out: dict[str, Any] = {
        "setup": setup.label,
        "brokers": setup.brokers,
        "replication_factor": setup.rf,
        "security_protocol": "SASL_SSL" if setup.secure else "PLAINTEXT",
        "partitions": PARTITIONS,
        "broker_min_insync_replicas": cluster.broker_props.get("min.insync.replicas"),
        "startup_s": round(time.monotonic() - t0, 1),
        "results": [],
    }
    try:
        for size in sizes:
            topic = f"bench-{size}b-rf{setup.rf}"
            create_topic(cluster.bootstrap, topic, setup.rf, cluster.admin_conf)
            # Earlier phases' dirty pages (another setup's log, gigabytes) would be
            # written back during this one and throttle its writes: start it clean.
            os.sync()
            (p_s, failed), p_cpu = run_phase(
                cluster, lambda t=topic, s=size: produce(cluster.bootstrap, t, n, s, conf)
            )
            c_s, c_cpu = run_phase(cluster, lambda t=topic: consume(cluster.bootstrap, t, n, conf))
            res = {
                "message_bytes": size,
                "messages": n,
                "failed_deliveries": failed,
                "produce": figures(n, size, p_s, p_cpu),
                "consume": figures(n, size, c_s, c_cpu),
            }
            out["results"].append(res)
            pr, co = res["produce"], res["consume"]
            print(
                f"  {size:>5} B: produce {pr['msg_per_s']:>9,} msg/s {pr['mb_per_s']:>6.1f} MB/s"
                f" ({pr['seconds']:.1f} s) | consume {co['msg_per_s']:>9,} msg/s "
                f"{co['mb_per_s']:>6.1f} MB/s ({co['seconds']:.1f} s)",
                flush=True,
            )
    except BaseException:
        print(cluster.tail(), file=sys.stderr)
        raise
    finally:
        cluster.stop()
        if not keep:
            # Its logs (gigabytes) would otherwise fill the page cache the next setup writes
            # through, and the later setups would pay for the earlier ones.
            shutil.rmtree(cluster.data_dir, ignore_errors=True)
    return out


def _median(values: list[Any]) -> Any:
    """The median, in the figures' own type (ints stay ints)."""
    m = statistics.median(values)
    return round(m) if all(isinstance(v, int) for v in values) else round(m, 3)


def median_of_rounds(rounds: list[dict]) -> dict:
    """One setup's rounds as one result: each figure the median of its rounds; every
    round's produce and consume figures are kept under `rounds`."""
    out = {**rounds[0], "startup_s": statistics.median(r["startup_s"] for r in rounds)}
    out["results"] = []
    for i, first in enumerate(rounds[0]["results"]):
        per_round = [r["results"][i] for r in rounds]
        merged = {**first, "failed_deliveries": max(x["failed_deliveries"] for x in per_round)}
        for phase in ("produce", "consume"):
            merged[phase] = {
                key: _median([x[phase][key] for x in per_round]) for key in first[phase]
            }
        merged["rounds"] = [{p: x[p] for p in ("produce", "consume")} for x in per_round]
        out["results"].append(merged)
    return out


# -- reporting --------------------------------------------------------------------------------


def size_label(size: int) -> str:
    return f"{size // 1024} KiB" if size % 1024 == 0 else f"{size} B"


def print_table(setups: list[dict]) -> None:
    head = (
        f"{'setup':<18} {'msg':>6} | {'produce msg/s':>13} {'MB/s':>7} {'CPU s/M':>7} | "
        f"{'consume msg/s':>13} {'MB/s':>7} {'CPU s/M':>7}"
    )
    print("\n" + head)
    print("-" * len(head))
    for s in setups:
        for r in s["results"]:
            p, c = r["produce"], r["consume"]
            print(
                f"{s['setup']:<18} {size_label(r['message_bytes']):>6} | "
                f"{p['msg_per_s']:>13,} {p['mb_per_s']:>7.1f} "
                f"{p['broker_cpu_s_per_million']:>7.1f} | "
                f"{c['msg_per_s']:>13,} {c['mb_per_s']:>7.1f} "
                f"{c['broker_cpu_s_per_million']:>7.1f}"
            )
    print("CPU s/M = broker CPU seconds (utime+stime, all broker processes) per 10^6 messages")


def check_targets(setups: list[dict]) -> dict[str, Any] | None:
    base = next(
        (
            s
            for s in setups
            if s["brokers"] == 1 and s["replication_factor"] == 1 and "SASL" not in s["setup"]
        ),
        None,
    )
    res = next((r for r in base["results"] if r["message_bytes"] == 1024), None) if base else None
    if res is None:
        print("\ntargets: not checked (needs the 1 broker RF 1 setup with 1 KiB messages)")
        return None
    produce_mb, consume_mb = res["produce"]["mb_per_s"], res["consume"]["mb_per_s"]
    out = {
        "setup": base["setup"],
        "message_bytes": 1024,
        "produce_mb_s": {
            "target": TARGET_PRODUCE_MB_S,
            "measured": produce_mb,
            "met": produce_mb >= TARGET_PRODUCE_MB_S,
        },
        "consume_mb_s": {
            "target": TARGET_CONSUME_MB_S,
            "measured": consume_mb,
            "met": consume_mb >= TARGET_CONSUME_MB_S,
        },
    }
    print(f"\ntargets ({base['setup']}, 1 KiB):")
    for phase in ("produce", "consume"):
        t = out[f"{phase}_mb_s"]
        print(
            f"  {phase} >= {t['target']:.0f} MB/s: {'met' if t['met'] else 'NOT met'} "
            f"({t['measured']:.1f} MB/s, {t['measured'] / t['target']:.0%} of target)"
        )
    return out


def check_secure_ratio(setups: list[dict]) -> list[dict[str, Any]]:
    """SASL_SSL / PLAINTEXT throughput for each secured setup with a plain twin."""
    out = []
    for sec in (s for s in setups if s.get("security_protocol") == "SASL_SSL"):
        plain = next(
            (
                s
                for s in setups
                if s.get("security_protocol") == "PLAINTEXT"
                and (s["brokers"], s["replication_factor"])
                == (sec["brokers"], sec["replication_factor"])
            ),
            None,
        )
        if plain is None:
            continue
        for r in sec["results"]:
            twin = next(
                (x for x in plain["results"] if x["message_bytes"] == r["message_bytes"]), None
            )
            if twin is None:
                continue
            # Round k of one against round k of the other: they ran side by side.
            pairs = list(zip(r.get("rounds", [r]), twin.get("rounds", [twin]), strict=True))
            per_round = {
                phase: [round(s[phase]["mb_per_s"] / p[phase]["mb_per_s"], 2) for s, p in pairs]
                for phase in ("produce", "consume")
            }
            ratio = {phase: round(statistics.median(v), 2) for phase, v in per_round.items()}
            entry = {
                "setup": sec["setup"],
                "message_bytes": r["message_bytes"],
                "produce_ratio": ratio["produce"],
                "consume_ratio": ratio["consume"],
                "produce_ratio_rounds": per_round["produce"],
                "consume_ratio_rounds": per_round["consume"],
                "target": TARGET_SECURE_RATIO,
                "met": min(ratio.values()) >= TARGET_SECURE_RATIO,
            }
            out.append(entry)
            print(
                f"SASL_SSL / PLAINTEXT ({sec['setup']}, {size_label(r['message_bytes'])}): "
                f"produce {ratio['produce']:.2f}x, consume {ratio['consume']:.2f}x, medians of "
                f"{len(pairs)} round(s) (produce {per_round['produce']}, consume "
                f"{per_round['consume']}; target >= {TARGET_SECURE_RATIO}x: "
                f"{'met' if entry['met'] else 'NOT met'})"
            )
    return out


def parse_setups(text: str) -> list[Setup]:
    setups = []
    for item in text.split(","):
        shape, _, security = item.strip().partition(":")
        if security.lower() not in ("", "plaintext", "sasl_ssl"):
            raise argparse.ArgumentTypeError(f"bad setup {item!r}: security is sasl_ssl or none")
        b, _, rf = shape.partition("x")
        setup = Setup(int(b), int(rf or b), security.lower() == "sasl_ssl")
        if not 1 <= setup.rf <= setup.brokers:
            raise argparse.ArgumentTypeError(f"bad setup {item!r}: need 1 <= RF <= brokers")
        setups.append(setup)
    return setups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="messages per phase")
    parser.add_argument("--sizes", default="100,1024", help="message value sizes in bytes")
    parser.add_argument(
        "--setups",
        type=parse_setups,
        default=parse_setups("1x1,1x1:sasl_ssl,3x3"),
        help="BROKERSxRF[:sasl_ssl],...: clusters to run (default 1x1,1x1:sasl_ssl,3x3)",
    )
    parser.add_argument("--dir", type=Path, default=REPO / "bench", help="scratch dir parent")
    parser.add_argument("--keep", action="store_true", help="keep the scratch dir (logs, data)")
    parser.add_argument("--timeout", type=float, default=60.0, help="cluster start timeout, s")
    parser.add_argument(
        "--rounds", type=int, default=3, help="runs of each setup, interleaved (medians)"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    if args.messages < 1:
        parser.error("--messages must be >= 1")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    sizes = [int(s) for s in args.sizes.split(",")]

    started = time.perf_counter()
    args.dir.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".broker-bench-", dir=args.dir))
    print(
        f"broker bench: {args.messages:,} messages per phase, sizes {sizes} B, "
        f"{PARTITIONS} partitions; {CLIENT}"
    )
    print(f"scratch dir: {scratch} [{filesystem_of(scratch) or 'unknown filesystem'}]")
    rounds: list[list[dict]] = []
    try:
        for round_no in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"round {round_no} of {args.rounds}", flush=True)
            rounds.append(
                [
                    bench_setup(
                        setup, sizes, args.messages, scratch, args.timeout, args.keep, round_no
                    )
                    for setup in args.setups
                ]
            )
    except (BenchError, KafkaException) as exc:
        print(f"broker bench failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    results = [median_of_rounds([r[i] for r in rounds]) for i in range(len(args.setups))]
    print_table(results)
    target = check_targets(results)
    secure_ratio = check_secure_ratio(results)
    elapsed = time.perf_counter() - started
    write_results(
        args.out,
        "broker",
        ("broker", "storage"),
        {
            "settings": {
                "messages": args.messages,
                "rounds": args.rounds,
                "message_bytes": sizes,
                "partitions": PARTITIONS,
                "key": None,
                "compression": "none",
                "client": f"{CLIENT}: one producer, then one consumer, in the bench process",
                "producer": PRODUCER_CONFIG,
                "consumer": {**CONSUMER_CONFIG, "assign": "all partitions from the beginning"},
                "cluster": "kraft dev --base-port 0 (3 controllers)",
                "units": "MB/s = 10^6 bytes of message value per second; CPU s/M = broker "
                "utime+stime seconds per 10^6 messages, from /proc/<pid>/stat",
                "clk_tck": CLK_TCK,
            },
            "target": target,
            "sasl_ssl_vs_plaintext": secure_ratio,
            "results": results,
        },
        elapsed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
