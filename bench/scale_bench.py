"""Scale benchmark: 10,000 partitions on a real local cluster (3 controllers, 3 brokers).

    python -m bench.scale_bench [--topics 10] [--partitions 1000] [--profile DIR]
                                [--out bench/results/scale.json]

Processes as `kraft dev` starts them (tests/harness/cluster_procs.py's ProcCluster over
kraft/tools/local_cluster.py), data in a scratch directory. This process follows the
metadata log itself (`GET /v1/metadata/log` long-polled from the active controller,
replayed with `MetadataDelta`), so "the controller committed X" is timed to the batch
that carried it, without polling the whole cluster state.

Phases, each with a condition deadline:
1. create: `--topics` topics of `--partitions` partitions, RF 3, in one CreateTopics;
   timed from the request until every broker's Metadata answer names a leader for
   every partition (target < 20 s). Also: until the controller committed them all.
2. produce: one acks=all message to every partition (remembered: topic, partition,
   offset, value).
3. restart: SIGTERM one broker (it hosts every replica), start it again; timed from
   the start until it is back in the ISR of every partition (target < 60 s).
4. failover: SIGKILL the broker leading the most partitions (about a third); timed
   from its fencing (the FenceBrokerRecord reaching us) until no partition names it as
   leader in the committed metadata (target < 3 s), and until every surviving broker's
   Metadata says so. Then every acknowledged message of phase 2 must be read back.

`--profile DIR` runs `py-spy record --format raw` on every node for the whole run
(flame-graph input, DIR/<role>-<id>.txt). Prints figures, writes JSON to
bench/results/scale.json (or --out). CPU seconds of brokers and controllers are
recorded per phase (utime + stime from /proc), and each node's memory (VmRSS and its
peak VmHWM from /proc/PID/status) after the create phase and at the end (target: broker
RSS < 500 MB with 10,000 partitions hosted).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.broker_bench import cpu_seconds
from bench.storage_bench import write_results
from metadata_log.controller_api import LogResponse
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.snapshot import decode_snapshot
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, request

REPO = Path(__file__).resolve().parent.parent
TARGETS = {"create_visible_s": 20.0, "restart_isr_s": 60.0, "failover_leaders_moved_s": 3.0}
RSS_TARGET_MIB = 500  # broker RSS with 10,000 partitions hosted (issue 16: < 500 MB)


class BenchError(RuntimeError):
    pass


# -- following the metadata log ---------------------------------------------------------------


class LogFollower:
    """A thread replaying the committed metadata log; `wait(pred)` gives the monotonic time
    at which the first image satisfying `pred` arrived."""

    def __init__(self, cluster: ProcCluster) -> None:
        self._cluster = cluster
        self.image = MetadataImage()
        self.received_at = time.monotonic()
        self.last_error: Exception | None = None
        self._cond = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="log-follower", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _get(self, url: str, timeout_s: float) -> tuple[int, bytes, Any]:
        try:
            with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310
                return resp.status, resp.read(), resp.headers
        except urllib.error.HTTPError as exc:
            return exc.code, b"", exc.headers

    def _run(self) -> None:
        i = 0
        while not self._stop.is_set():
            controllers = [c for c in self._cluster.controllers if c.running]
            c = controllers[i % len(controllers)]
            try:
                url = c.url(
                    f"/v1/metadata/log?from={self.image.offset + 1}&wait_ms=1000"
                    "&max_records=5000&format=msgpack"
                )
                status, body, _ = self._get(url, 5)
                if status == 410:
                    status, body, headers = self._get(c.url("/v1/metadata/snapshot"), 30)
                    image = decode_snapshot(body)
                    nxt = int(headers.get("X-Next-Offset", "-1"))
                    image = msgspec.structs.replace(image, offset=max(image.offset, nxt - 1))
                    self._publish(image)
                    continue
                if status != 200:
                    raise OSError(f"HTTP {status}")
                resp = msgspec.msgpack.decode(body, type=LogResponse)
                if not resp.records:
                    continue
                delta = MetadataDelta(self.image)
                for e in resp.records:
                    if e.offset > self.image.offset:
                        delta.replay(e.record, e.offset)
                self._publish(delta.apply())
            except Exception as exc:  # noqa: BLE001 - keep following; `wait` reports it
                self.last_error = exc
                i += 1
                time.sleep(0.05)

    def _publish(self, image: MetadataImage) -> None:
        with self._cond:
            self.image, self.received_at = image, time.monotonic()
            self._cond.notify_all()

    def wait(self, pred: Callable[[MetadataImage], bool], timeout_s: float, what: str) -> float:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if pred(self.image):
                    return self.received_at
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BenchError(
                        f"timed out after {timeout_s:.0f} s waiting for {what} (image at "
                        f"{self.image.offset}, last error {self.last_error!r})"
                    )
                self._cond.wait(min(left, 1.0))


def memory_of(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak RSS) of a process, in MiB, from /proc/PID/status."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key.lower() + "_mib"] = round(int(value.split()[0]) / 1024, 1)
    return out


def memory(cluster: ProcCluster) -> dict[str, dict[str, dict[str, float]]]:
    """Memory of each running node, by role and node id."""
    out: dict[str, dict[str, dict[str, float]]] = {"brokers": {}, "controllers": {}}
    for role, nodes in (("brokers", cluster.brokers), ("controllers", cluster.controllers)):
        for n in nodes:
            if n.running and n.pid:
                with contextlib.suppress(OSError, ValueError):  # exited meanwhile
                    out[role][str(n.node_id)] = memory_of(n.pid)
    return out


def print_memory(when: str, mem: dict[str, dict[str, dict[str, float]]]) -> None:
    parts = [
        f"{role[:-1]} {nid} {m.get('vmrss_mib', 0):.0f}/{m.get('vmhwm_mib', 0):.0f}"
        for role, nodes in mem.items()
        for nid, m in nodes.items()
    ]
    print(f"RSS/peak MiB {when}: " + ", ".join(parts) + f" (broker target < {RSS_TARGET_MIB} MB)")


def partitions_of(image: MetadataImage, names: list[str]) -> list[Any]:
    out = []
    for name in names:
        t = image.topic_by_name(name)
        if t is not None:
            out.extend(t.partitions.values())
    return out


# -- brokers' own view ------------------------------------------------------------------------


def broker_leaders(host: str, port: int, names: list[str]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> leader id, from one Metadata v12 request to this broker."""
    client = RawClient(host, port, timeout=30)
    try:
        body = request(3, 12, {
            "topics": [{"topic_id": None, "name": n} for n in names],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        })  # fmt: skip
        resp = client.call(3, 12, body)
    finally:
        client.close()
    out = {}
    for t in resp.topics:
        if t.error_code:
            continue
        for p in t.partitions:  # an offline partition: LEADER_NOT_AVAILABLE, leader -1
            out[(t.name, p.partition_index)] = p.leader_id if p.error_code == 0 else -1
    return out


def wait_brokers_view(
    cluster: ProcCluster,
    broker_ids: list[int],
    names: list[str],
    total: int,
    ok: Callable[[int], bool],
    timeout_s: float,
    what: str,
) -> float:
    """Poll each broker's Metadata until all `total` partitions have a leader passing
    `ok`; the monotonic time when the last broker got there."""
    pending = set(broker_ids)
    deadline = time.monotonic() + timeout_s
    while pending:
        for b in sorted(pending):
            node = cluster.broker(b)
            with contextlib.suppress(OSError, ConnectionError, AssertionError):
                leaders = broker_leaders(node.host, node.port, names)
                if len(leaders) == total and all(ok(v) for v in leaders.values()):
                    pending.discard(b)
        if pending:
            if time.monotonic() > deadline:
                raise BenchError(f"timed out waiting for brokers {sorted(pending)}: {what}")
            # Each Metadata answer of 10,000 partitions costs the broker real CPU: do not
            # let the bench's own polling be what slows the cluster down.
            time.sleep(0.5)
    return time.monotonic()


# -- produce and verify -----------------------------------------------------------------------


def produce_everywhere(
    bootstrap: str, names: list[str], partitions: int
) -> tuple[dict[Any, Any], list[Any]]:
    """One acks=all message per partition: ((topic, partition) -> (offset, value) of those
    acknowledged, delivery errors)."""
    acked: dict[tuple[str, int], tuple[int, bytes]] = {}
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked[(msg.topic(), msg.partition())] = (msg.offset(), msg.value())

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": True,
            "message.timeout.ms": 120_000,
        }
    )
    for name in names:
        for i in range(partitions):
            while True:
                try:
                    p.produce(name, f"{name}/{i}".encode(), partition=i, on_delivery=on_delivery)
                    break
                except BufferError:
                    p.poll(0.05)
        p.poll(0)
    left = p.flush(150)
    if left:
        raise BenchError(f"produce: {left} messages neither acknowledged nor failed")
    return acked, errors


def verify_acked(bootstrap: str, acked: dict[Any, Any], timeout_s: float) -> int:
    """Read every acknowledged message back; the number missing (0 expected)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "scale-bench-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        c.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in acked])
        missing = dict(acked)
        deadline = time.monotonic() + timeout_s
        while missing and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    key = (m.topic(), m.partition())
                    if missing.get(key) == (m.offset(), m.value()):
                        del missing[key]
        return len(missing)
    finally:
        c.close()


# -- the run ----------------------------------------------------------------------------------


def run(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    names = [f"scale-{i:02d}" for i in range(args.topics)]
    total = args.topics * args.partitions
    res: dict[str, Any] = {}
    profilers: list[subprocess.Popen[bytes]] = []
    with ProcCluster(scratch / "cluster") as cluster:
        cluster.start(timeout_s=120)
        follower = LogFollower(cluster)
        follower.start()
        broker_ids = [b.node_id for b in cluster.brokers]

        def cpu() -> dict[str, dict[int, float]]:
            """CPU seconds of each running node process, by role and pid."""
            out: dict[str, dict[int, float]] = {"brokers": {}, "controllers": {}}
            for role, nodes in (("brokers", cluster.brokers), ("controllers", cluster.controllers)):
                for n in nodes:
                    if n.running and n.pid:
                        with contextlib.suppress(Exception):  # exited meanwhile
                            out[role][n.pid] = cpu_seconds([n.pid])
            return out

        def spent(before: dict[str, dict[int, float]]) -> dict[str, float]:
            """CPU used since `before` by the processes running now (a process started
            meanwhile counts whole; one killed meanwhile is lost)."""
            after = cpu()
            return {
                role: round(sum(t - before[role].get(pid, 0.0) for pid, t in now.items()), 1)
                for role, now in after.items()
            }

        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for n in cluster.cluster.nodes:
                out = args.profile / f"{n.role}-{n.node_id}.txt"
                profilers.append(subprocess.Popen(
                    [args.py_spy, "record", "--format", "raw", "--rate", "50", "-o", str(out),
                     "--pid", str(n.pid)],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                ))  # fmt: skip
        try:
            # 1. create
            c0 = cpu()
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            t0 = time.monotonic()
            futures = admin.create_topics(
                [NewTopic(n, args.partitions, 3) for n in names],
                operation_timeout=120,
                request_timeout=180,
            )
            for f in futures.values():
                f.result(180)
            t_answered = time.monotonic()

            def created(img: MetadataImage) -> bool:
                ps = partitions_of(img, names)
                return len(ps) == total and all(p.leader >= 0 for p in ps)

            t_committed = follower.wait(created, args.timeout, "the topics' partitions committed")
            t_visible = wait_brokers_view(
                cluster,
                broker_ids,
                names,
                total,
                lambda v: v >= 0,
                args.timeout,
                "a leader for every partition",
            )
            res["create"] = {
                "answered_s": round(t_answered - t0, 2),
                "committed_s": round(t_committed - t0, 2),
                "visible_on_all_brokers_s": round(t_visible - t0, 2),
                "cpu_s": spent(c0),
            }
            res["memory_after_create"] = memory(cluster)
            print(
                f"create {total:,} partitions: answered {t_answered - t0:.1f} s, committed "
                f"{t_committed - t0:.1f} s, leaders visible on every broker "
                f"{t_visible - t0:.1f} s (target < {TARGETS['create_visible_s']:.0f} s)"
            )
            print_memory("after create", res["memory_after_create"])

            # 2. produce (acks=all), checked after the failover
            c0 = cpu()
            t0 = time.monotonic()
            acked, errors = produce_everywhere(cluster.bootstrap, names, args.partitions)
            res["produce"] = {
                "acked": len(acked),
                "failed": len(errors),
                "first_error": str(errors[0]) if errors else None,
                "seconds": round(time.monotonic() - t0, 2),
                "cpu_s": spent(c0),
            }
            print(
                f"produce: {len(acked):,} acks=all messages acknowledged, {len(errors):,} "
                f"failed, in {time.monotonic() - t0:.1f} s"
            )

            # 3. restart one broker
            victim = broker_ids[0]
            c0 = cpu()
            node = cluster.broker(victim)
            node.terminate()
            ts = time.monotonic()
            wait_for(lambda: not node.running, args.timeout, f"broker {victim} to stop")
            t_stopped = time.monotonic()
            node.start()
            t0 = time.monotonic()
            t_unfenced = follower.wait(
                lambda img: victim in img.brokers and not img.brokers[victim].fenced,
                args.timeout,
                f"broker {victim} unfenced",
            )
            try:
                t_isr: float | None = follower.wait(
                    lambda img: all(victim in p.isr for p in partitions_of(img, names)),
                    args.timeout,
                    f"broker {victim} back in every ISR",
                )
            except BenchError as exc:  # go on to the failover: record how far it got
                print(exc, file=sys.stderr)
                t_isr = None
            outside = sum(victim not in p.isr for p in partitions_of(follower.image, names))
            res["restart"] = {
                "broker": victim,
                "shutdown_s": round(t_stopped - ts, 2),
                "unfenced_s": round(t_unfenced - t0, 2),
                "back_in_all_isr_s": None if t_isr is None else round(t_isr - t0, 2),
                "isrs_without_it_at_end": outside,
                "cpu_s": spent(c0),
            }
            isr_text = (
                f"NOT back in {outside:,} of {total:,} ISRs after {args.timeout:.0f} s"
                if t_isr is None
                else f"back in all {total:,} ISRs {t_isr - t0:.1f} s"
            )
            print(
                f"restart broker {victim}: clean shutdown {t_stopped - ts:.1f} s; after start "
                f"unfenced {t_unfenced - t0:.1f} s, {isr_text} "
                f"(target < {TARGETS['restart_isr_s']:.0f} s)"
            )

            # 4. SIGKILL the broker leading the most
            img = follower.image
            led = {b: 0 for b in broker_ids}
            for p in partitions_of(img, names):
                if p.leader in led:  # not NO_LEADER
                    led[p.leader] += 1
            victim = max(led, key=lambda b: led[b])
            c0 = cpu()
            node = cluster.broker(victim)
            t_kill = time.monotonic()
            assert node.proc is not None
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait(10)
            fo: dict[str, Any] = {"broker": victim, "partitions_led": led[victim]}
            res["failover"] = fo  # filled as it goes: a later timeout keeps what was measured
            t_fenced = follower.wait(
                lambda img: img.brokers[victim].fenced, args.timeout, f"broker {victim} fenced"
            )
            fo["kill_to_fenced_s"] = round(t_fenced - t_kill, 2)
            t_moved = follower.wait(
                lambda img: not any(p.leader == victim for p in partitions_of(img, names)),
                args.timeout,
                f"no partition led by broker {victim}",
            )
            fo["fenced_to_leaders_moved_s"] = round(t_moved - t_fenced, 3)
            # Offline: the victim was the whole ISR (no clean leader left to elect).
            offline = sum(p.leader < 0 for p in partitions_of(follower.image, names))
            fo["offline_partitions"] = offline
            print(
                f"SIGKILL broker {victim} (leader of {led[victim]:,}): fenced after "
                f"{t_fenced - t_kill:.1f} s; leaders moved {t_moved - t_fenced:.2f} s after "
                f"fencing (target < {TARGETS['failover_leaders_moved_s']:.0f} s); "
                f"{offline:,} partitions offline"
            )
            survivors = [b for b in broker_ids if b != victim]
            t_seen = wait_brokers_view(
                cluster,
                survivors,
                names,
                total,
                lambda v: v != victim,
                args.timeout,
                f"every leader moved off broker {victim}",
            )
            fo["fenced_to_visible_on_survivors_s"] = round(t_seen - t_fenced, 2)
            missing = verify_acked(cluster.bootstrap, acked, args.timeout)
            fo["acked_messages_missing"] = missing
            fo["cpu_s"] = spent(c0)
            print(
                f"  visible on survivors {t_seen - t_fenced:.1f} s after fencing; acked "
                f"messages missing: {missing} of {len(acked):,}"
            )
        except BenchError as exc:
            print(f"stopped: {exc}", file=sys.stderr)
            res["error"] = str(exc)
        finally:
            res["memory_at_end"] = memory(cluster)  # the SIGKILLed broker is absent
            print_memory("at the end", res["memory_at_end"])
            for p in profilers:
                p.send_signal(signal.SIGINT)
            for p in profilers:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(60)
            follower.stop()
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topics", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--timeout", type=float, default=300.0, help="deadline of every wait (s)")
    ap.add_argument("--profile", type=Path, default=None, help="py-spy raw profiles here")
    ap.add_argument(
        "--py-spy", default=shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    )
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/scale.json")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    scratch = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    try:
        res = run(args, scratch)
    finally:
        if args.keep:
            print(f"kept {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)

    def get(phase: str, key: str) -> Any:
        return res.get(phase, {}).get(key)

    def below(value: Any, target: float) -> bool:
        return value is not None and value < target

    met = {
        "create_visible_s": below(
            get("create", "visible_on_all_brokers_s"), TARGETS["create_visible_s"]
        ),
        "restart_isr_s": below(get("restart", "back_in_all_isr_s"), TARGETS["restart_isr_s"]),
        "failover_leaders_moved_s": below(
            get("failover", "fenced_to_leaders_moved_s"), TARGETS["failover_leaders_moved_s"]
        ),
        "no_acked_loss": get("failover", "acked_messages_missing") == 0,
        "all_produced": get("produce", "failed") == 0,
        "broker_rss_mib": all(
            m.get("vmrss_mib", 1e9) < RSS_TARGET_MIB
            for phase in ("memory_after_create", "memory_at_end")
            for m in res.get(phase, {}).get("brokers", {}).values()
        ),
    }
    print("targets:", ", ".join(f"{k} {'met' if v else 'MISSED'}" for k, v in met.items()))
    body = {
        "settings": {
            "topics": args.topics,
            "partitions_per_topic": args.partitions,
            "rf": 3,
            "controllers": 3,
            "brokers": 3,
            "nproc": os.cpu_count(),
        },
        "target": TARGETS,
        "results": {**res, "met": met},
    }
    write_results(
        args.out,
        "scale",
        ("broker", "kraft", "metadata_log", "storage"),
        body,
        time.perf_counter() - started,
    )
    return 0 if all(met.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
