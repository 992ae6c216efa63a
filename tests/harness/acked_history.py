"""What a failover test checks its history with: a paced acks=all idempotent producer that
records every acknowledgement, a reader of every partition up to the high watermarks,
and the Jepsen-style check (shared/notes/reliability.md): no acknowledged value
lost, none duplicated, one value per offset, offsets as acknowledged, nothing never sent.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Ack:
    value: str
    partition: int
    offset: int
    produced_at: float
    acked_at: float


@dataclass
class Workload:
    """A paced acks=all idempotent producer in a thread, recording what was acknowledged."""

    bootstrap: str
    topic: str
    partitions: int
    rate_per_s: float = 200.0
    producer_conf: dict[str, Any] = field(default_factory=dict)  # over the settings below
    sent: dict[str, tuple[int, float]] = field(default_factory=dict)  # value -> (p, time)
    acked: list[Ack] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)  # (value, error)
    client_errors: list[str] = field(default_factory=list)
    unflushed: int = -1
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop_event: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    crashed: BaseException | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="failover-producer", daemon=True)
        self.thread.start()

    def stop(self, timeout_s: float = 90.0) -> None:
        self.stop_event.set()
        assert self.thread is not None
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), f"producer thread still running after {timeout_s}s"

    def acks_since(self, t: float) -> list[Ack]:
        with self.lock:
            return [a for a in self.acked if a.produced_at > t]

    def summary(self) -> str:
        with self.lock:
            return (
                f"sent={len(self.sent)} acked={len(self.acked)} failed={len(self.failed)} "
                f"(first: {self.failed[:3]}) client errors={self.client_errors[:5]} "
                f"unflushed={self.unflushed} crashed={self.crashed!r}"
            )

    def _run(self) -> None:
        from confluent_kafka import Producer

        def on_error(err: Any) -> None:
            with self.lock:
                self.client_errors.append(f"{err.name()} fatal={err.fatal()}: {err.str()}")

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 2000,
                "error_cb": on_error,
                **self.producer_conf,
            }
        )
        try:
            i = 0
            t_next = time.monotonic()
            while not self.stop_event.is_set():
                i += 1
                value = f"v-{i:06d}"
                part = i % self.partitions
                produced_at = time.monotonic()
                with self.lock:
                    self.sent[value] = (part, produced_at)

                def on_delivery(err: Any, msg: Any, value: str = value,
                                produced_at: float = produced_at) -> None:
                    with self.lock:
                        if err is not None:
                            self.failed.append((value, f"{err.name()}: {err.str()}"))
                        else:
                            self.acked.append(Ack(value, msg.partition(), msg.offset(),
                                                  produced_at, time.monotonic()))

                while True:
                    try:
                        producer.produce(self.topic, value=value.encode(), partition=part,
                                         on_delivery=on_delivery)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)
                t_next = max(t_next + 1.0 / self.rate_per_s, time.monotonic() - 1.0)
                while (delay := t_next - time.monotonic()) > 0:
                    producer.poll(delay)  # pacing; serves delivery callbacks meanwhile
            self.unflushed = producer.flush(70)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.crashed = exc


Rec = tuple[int, int, str]  # partition, offset, value


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> list[Rec]:
    """Assign every partition from the beginning and read up to the high watermarks."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "failover-check",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    recs: list[Rec] = []
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        last: dict[int, int] = {p: -1 for p in range(partitions)}
        deadline = time.monotonic() + timeout_s
        while any(last[p] + 1 < ends[p] for p in ends):
            assert time.monotonic() < deadline, (
                f"expected to read every partition up to its high watermark {ends} within "
                f"{timeout_s}s; read up to {last}"
            )
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, f"expected no consume error, got {m.error()}"
                recs.append((m.partition(), m.offset(), m.value().decode()))
                last[m.partition()] = max(last[m.partition()], m.offset())
        for m in consumer.consume(num_messages=1000, timeout=0.3):  # anything past the marks
            if m.error() is None:
                recs.append((m.partition(), m.offset(), m.value().decode()))
    finally:
        consumer.close()
    return recs


def check_history(w: Workload, recs: list[Rec]) -> list[str]:
    """The Jepsen-style checks; returns the violations (empty: all good)."""
    problems: list[str] = []
    by_part: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for p, off, v in recs:
        by_part[p].append((off, v))
    value_at: dict[tuple[int, int], str] = {}
    for p, rs in sorted(by_part.items()):
        offsets = [o for o, _ in rs]
        bad = [(a, b) for a, b in zip(offsets, offsets[1:], strict=False) if not a < b]
        if bad:
            problems.append(f"p{p}: offsets not strictly increasing at {bad[:5]}")
        for off, v in rs:
            prev = value_at.setdefault((p, off), v)
            if prev != v:
                problems.append(f"inconsistent offset: p{p}@{off} holds {prev!r} and {v!r}")
    where: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for p, off, v in recs:
        where[v].append((p, off))
    dups = {v: ws for v, ws in where.items() if len(set(ws)) > 1}
    if dups:
        problems.append(f"{len(dups)} duplicated values, e.g. {sorted(dups.items())[:5]}")
    never_sent = sorted(v for v in where if v not in w.sent)
    if never_sent:
        problems.append(f"{len(never_sent)} values never sent, e.g. {never_sent[:5]}")
    wrong_part = sorted(v for v, ws in where.items() if v in w.sent and
                        any(p != w.sent[v][0] for p, _ in ws))
    if wrong_part:
        problems.append(f"{len(wrong_part)} values in a partition they were not sent to, "
                        f"e.g. {wrong_part[:5]}")
    lost = [a for a in w.acked if a.value not in where]
    if lost:
        problems.append(
            f"{len(lost)} acknowledged values lost, e.g. "
            f"{[(a.value, a.partition, a.offset) for a in lost[:5]]}"
        )
    moved = [
        a for a in w.acked if a.value in where and (a.partition, a.offset) not in where[a.value]
    ]
    if moved:
        problems.append(
            f"{len(moved)} acknowledged values read at another offset than acknowledged, e.g. "
            f"{[(a.value, (a.partition, a.offset), where[a.value]) for a in moved[:5]]}"
        )
    return problems
