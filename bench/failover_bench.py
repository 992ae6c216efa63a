"""Failover under acks=all load: SIGKILL a partition leader while a producer writes.

    python -m bench.failover_bench [--rounds 5] [--rate 2000] [--size 1024]
                                   [--out bench/results/failover.json]

A real cluster of 3 controllers and 3 brokers, each its own process, every timing at its
Kafka default (heartbeats 2 s, session 9 s; tests/harness/cluster_procs.py's ProcCluster).
A topic of 6 partitions, RF 3, `min.insync.replicas=2`. One confluent-kafka producer
(acks=all, enable.idempotence=true) sends --rate messages/s of --size bytes, each value
unique, for the whole run; its delivery reports are kept.

Each round SIGKILLs the broker leading partition 0 and times, from the kill:
- fenced: the controller's cluster state lists it fenced;
- seen: a client's Metadata (a survivor answering) names a live leader for every
  partition it led (the issue's "new leader visible to clients", target < 2 s);
- resumed: the producer's first acknowledgement, for a partition it led, of a message
  sent after the kill.
Then it is restarted and every ISR must be whole again before the next round.

At the end every acknowledged message is read back (a consumer from the beginning of
every partition): lost = acknowledged but not found at its acknowledged offset. The
issue's targets (issue 16: seen < 2 s, 0 lost) are printed met / NOT met, never enforced.
The measuring loops poll the cluster every 10 ms: the resolution of the figures.
Writes bench/results/failover.json.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from bench.storage_bench import REPO, write_results
from tests.harness.cluster_procs import ProcCluster, wait_for

TOPIC, PARTITIONS = "failover-bench", 6
STEP_S = 0.01
SEEN_TARGET_S = 2.0


class LoadProducer(threading.Thread):
    """Sends at a fixed rate; remembers every acknowledged (partition, offset, value)."""

    def __init__(self, bootstrap: str, rate: int, size: int) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "log_level": 2,
            }
        )
        self.rate, self.size = rate, size
        self.stop = threading.Event()
        self.acked: dict[bytes, tuple[int, int, float]] = {}  # value -> partition, offset, t
        self.sent_at: dict[bytes, float] = {}
        self.failed = 0
        self.lock = threading.Lock()

    def _report(self, err: Any, msg: Any) -> None:
        now = time.monotonic()
        with self.lock:
            if err is None:
                self.acked[msg.value()] = (msg.partition(), msg.offset(), now)
            else:
                self.failed += 1

    def run(self) -> None:
        pad = b"x" * max(0, self.size - 24)
        t0, i = time.monotonic(), 0
        while not self.stop.is_set():
            due = t0 + i / self.rate
            now = time.monotonic()
            if now < due:
                self.producer.poll(min(due - now, 0.005))
                continue
            value = b"%023d|" % i + pad
            with self.lock:
                self.sent_at[value] = now
            while True:
                try:
                    self.producer.produce(TOPIC, value, callback=self._report)
                    break
                except BufferError:
                    self.producer.poll(0.01)
            self.producer.poll(0)
            i += 1
        self.producer.flush(60)

    def first_ack_after(self, t: float, partitions: set[int]) -> float | None:
        with self.lock:
            times = [
                at
                for value, (p, _, at) in self.acked.items()
                if p in partitions and self.sent_at.get(value, 0.0) > t
            ]
        return min(times) if times else None


def leaders(c: ProcCluster) -> dict[int, int]:
    return {p: s["leader"] for p, s in (c.partitions(TOPIC) or {}).items()}


def admin(bootstrap: str) -> AdminClient:
    # Quiet: every kill makes librdkafka log the lost connections.
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})


def client_leaders(client: AdminClient) -> dict[int, int]:
    topic = client.list_topics(TOPIC, timeout=2)
    return {p: m.leader for p, m in topic.topics[TOPIC].partitions.items()}


def isr_full(c: ProcCluster) -> bool:
    parts = c.partitions(TOPIC)
    return bool(parts) and all(p["leader"] >= 0 and len(p["isr"]) == 3 for p in parts.values())


def until(probe: Any, deadline_s: float, t0: float) -> float | None:
    """Seconds from t0 until probe() holds (polled every STEP_S), None past the deadline."""
    while time.monotonic() - t0 < deadline_s:
        if probe():
            return time.monotonic() - t0
        time.sleep(STEP_S)
    return None


def kill_round(c: ProcCluster, load: LoadProducer) -> dict[str, Any]:
    now = leaders(c)
    victim = now[0]
    led = {p for p, b in now.items() if b == victim}
    survivors = admin(",".join(b.address for b in c.brokers if b.node_id != victim))
    client_leaders(survivors)  # connect first: the client's start-up is not the failover
    c.kill_broker(victim)
    t0 = time.monotonic()
    fenced = until(lambda: victim in (c.fenced_brokers() or set()), 30, t0)

    def seen() -> bool:
        try:
            got = client_leaders(survivors)
        except Exception:
            return False
        return all(got.get(p, -1) not in (-1, victim) for p in led)

    seen_s = until(seen, 30, t0)
    resumed = until(lambda: load.first_ack_after(t0, led) is not None, 60, t0)
    first = load.first_ack_after(t0, led)
    resumed_s = None if resumed is None or first is None else first - t0
    offset = int((c.cluster_state() or {}).get("metadata_offset", -1))
    c.restart_broker(victim)
    c.wait_brokers_unfenced({victim}, offset, 60)
    wait_for(lambda: isr_full(c), 60, f"every ISR whole again after broker {victim} restarted")
    r3 = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "killed": victim,
        "led": sorted(led),
        "fenced_s": r3(fenced),
        "seen_s": r3(seen_s),
        "resumed_s": r3(resumed_s),
    }


def read_back(bootstrap: str, acked: dict[bytes, tuple[int, int, float]]) -> dict[str, int]:
    """Every partition from the beginning to its end offset: is each ack where it said?"""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "failover-bench", "enable.auto.commit": False}
    )
    try:
        ends = {}
        for p in range(PARTITIONS):
            _, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=10)
            ends[p] = high
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        found: dict[tuple[int, int], bytes] = {}
        remaining = {p for p, h in ends.items() if h > 0}
        deadline = time.monotonic() + 120
        while remaining and time.monotonic() < deadline:
            for m in consumer.consume(10000, 1.0):
                if m.error():
                    continue
                found[(m.partition(), m.offset())] = m.value()
                if m.offset() >= ends[m.partition()] - 1:
                    remaining.discard(m.partition())
    finally:
        consumer.close()
    lost = sum(1 for v, (p, o, _) in acked.items() if found.get((p, o)) != v)
    return {"acknowledged": len(acked), "read": len(found), "lost": lost}


def summary(values: list[float | None]) -> dict[str, float | None]:
    got = [v for v in values if v is not None]
    return {
        "median": round(statistics.median(got), 3) if got else None,
        "max": round(max(got), 3) if got else None,
        "missed": len(values) - len(got),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rate", type=int, default=2000, help="messages per second")
    ap.add_argument("--size", type=int, default=1024, help="bytes per message")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/failover.json")
    args = ap.parse_args(argv)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as scratch:
        c = ProcCluster(Path(scratch) / "data")
        try:
            c.start()
            topic = NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})
            creator = admin(c.bootstrap)  # kept: the future dies with its client
            creator.create_topics([topic])[TOPIC].result(30)
            wait_for(lambda: isr_full(c), 60, "the topic's ISRs")
            load = LoadProducer(c.bootstrap, args.rate, args.size)
            load.start()
            wait_for(lambda: len(load.acked) > args.rate, 60, "the load to flow")
            rounds = []
            for i in range(args.rounds):
                row = kill_round(c, load)
                rounds.append(row)
                fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
                print(
                    f"round {i + 1}: killed broker {row['killed']} (leading p{row['led']}): "
                    f"fenced {fmt(row['fenced_s'])} s, new leaders seen by a client "
                    f"{fmt(row['seen_s'])} s, first ack on them {fmt(row['resumed_s'])} s",
                    flush=True,
                )
            load.stop.set()
            load.join(90)
            check = read_back(c.bootstrap, load.acked)
        finally:
            c.close()
    results = {
        "fenced_s": summary([r["fenced_s"] for r in rounds]),
        "seen_s": summary([r["seen_s"] for r in rounds]),
        "resumed_s": summary([r["resumed_s"] for r in rounds]),
        **check,
        "failed_deliveries": load.failed,
    }
    seen_max = results["seen_s"]["max"]
    met_seen = seen_max is not None and seen_max < SEEN_TARGET_S and not results["seen_s"]["missed"]
    print(
        f"kill -> new leaders seen by a client: median {results['seen_s']['median']} s, max "
        f"{seen_max} s (target < {SEEN_TARGET_S} s: {'met' if met_seen else 'NOT met'}); "
        f"acknowledged {check['acknowledged']}, lost {check['lost']} "
        f"({'met' if check['lost'] == 0 else 'NOT met'}); failed deliveries {load.failed}"
    )
    body = {
        "settings": {
            "rounds": args.rounds,
            "rate_msgs_per_s": args.rate,
            "size": args.size,
            "topic": f"{PARTITIONS} partitions, RF 3, min.insync.replicas=2",
            "producer": "confluent-kafka acks=all enable.idempotence=true linger.ms=5",
            "cluster": "3 controllers + 3 brokers, Kafka's default heartbeat/session",
            "resolution_s": STEP_S,
        },
        "targets": {"seen_s_max": SEEN_TARGET_S, "lost": 0},
        "rounds": rounds,
        "results": results,
    }
    write_results(
        args.out, "failover", ("kraft", "broker", "bench"), body, time.monotonic() - started
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
