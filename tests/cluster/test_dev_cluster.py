"""`kraft dev` for real: a subprocess starting 3 controllers and 3 brokers on free ports
under tmp_path, driven by a real client, stopped with SIGTERM, started again on the same
data dir. Every wait is a condition under a deadline.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
READY = "all brokers unfenced"


class DevProcess:
    """`python -m kraft.cli dev` with its output read line by line in a thread."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kraft.cli", "dev", "--data-dir", str(data_dir),
             "--base-port", "0", "--timeout", "60"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for_line(self, text: str, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(
                    f"no {text!r} within {timeout_s}s; output so far:\n" + "\n".join(self.lines)
                ) from None
            if line is None:
                raise AssertionError(
                    f"kraft dev exited ({self.proc.wait()}) before {text!r}:\n"
                    + "\n".join(self.lines)
                )
            self.lines.append(line)
            if text in line:
                return line

    def stop(self, timeout_s: float = 60) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout_s)

    def kill_everything(self) -> None:
        """After a failed test: nothing may outlive it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in node_pids(self.data_dir):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def cluster_json(data_dir: Path) -> dict[str, Any]:
    return json.loads((data_dir / "cluster.json").read_text())


def node_pids(data_dir: Path) -> list[int]:
    try:
        return [n["pid"] for n in cluster_json(data_dir)["nodes"] if n["pid"]]
    except (OSError, ValueError):
        return []


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by kraft dev) still answers kill(0).
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


def wait_until(cond: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[list[DevProcess]]:
    started: list[DevProcess] = []
    yield started
    for d in started:
        d.kill_everything()


def produce_and_consume(bootstrap: str, topic: str, values: list[bytes]) -> list[bytes]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 1})
    errors: list[Any] = []
    for v in values:
        producer.produce(topic, value=v, on_delivery=lambda e, m: errors.append(e) if e else None)
    assert producer.flush(30) == 0 and errors == []
    return consume(bootstrap, topic, len(values))


def consume(bootstrap: str, topic: str, n: int) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "dev-test", "enable.auto.commit": False}
    )
    try:
        md = consumer.list_topics(topic, timeout=10)
        parts = list(md.topics[topic].partitions)
        consumer.assign([TopicPartition(topic, p, 0) for p in parts])
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        consumer.close()


def test_kraft_dev_starts_stops_and_restarts_on_the_same_data(
    tmp_path: Path, dev: list[DevProcess]
) -> None:
    data = tmp_path / "data"
    first = DevProcess(data)
    dev.append(first)
    first.wait_for_line(READY, 90)
    bootstrap = first.wait_for_line("bootstrap servers:", 5).split(":", 1)[1].strip()

    desc = cluster_json(data)
    roles = sorted((n["role"], n["id"]) for n in desc["nodes"])
    assert roles == [("broker", 4), ("broker", 5), ("broker", 6)] + [
        ("controller", i) for i in (1, 2, 3)
    ]
    assert desc["bootstrap_servers"] == bootstrap
    brokers = [n for n in desc["nodes"] if n["role"] == "broker"]
    assert bootstrap == ",".join(f"127.0.0.1:{b['port']}" for b in brokers)
    for n in desc["nodes"]:
        assert alive(n["pid"]) and Path(n["data_dir"]).is_dir()
    props = (data / "broker-4" / "broker.properties").read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{brokers[0]['port']}" in props

    values = [b"value-%d" % i for i in range(20)]
    assert sorted(produce_and_consume(bootstrap, "dev-topic", values)) == sorted(values)

    pids = [n["pid"] for n in desc["nodes"]]
    assert first.stop() == 0
    assert not [p for p in pids if alive(p)]
    assert all(n["pid"] is None for n in cluster_json(data)["nodes"])
    for b in (4, 5, 6):
        assert (data / f"broker-{b}" / "logs" / ".kafka_cleanshutdown").exists()

    second = DevProcess(data)
    dev.append(second)
    second.wait_for_line("existing cluster", 10)
    second.wait_for_line(READY, 90)
    again = cluster_json(data)
    ports = {(n["id"], n.get("port"), n.get("http_port")) for n in again["nodes"]}
    assert ports == {(n["id"], n.get("port"), n.get("http_port")) for n in desc["nodes"]}
    assert again["cluster_id"] == desc["cluster_id"]
    assert sorted(consume(bootstrap, "dev-topic", len(values))) == sorted(values)
    assert second.stop() == 0
    wait_until(lambda: not [p for p in node_pids(data) if alive(p)], 10, "all nodes to exit")
