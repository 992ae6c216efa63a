"""A consume-transform-produce job, as Kafka's exactly-once examples write it with
confluent-kafka: a read_committed consumer in a group, a transactional producer, each
batch of records copied inside one transaction together with the group's offsets
(`send_offsets_to_transaction`).

It runs as its own process (`python -m tests.harness.eos_copier ...`), so a test can
crash brokers and controllers under it, and can replace a stuck instance the way an
operator replaces a stuck application: SIGKILL it and start another with the same
transactional.id, which fences the old one. librdkafka can hang inside
send_offsets_to_transaction when the group coordinator's broker leaves the metadata
(librdkafka#5511, and #5456: the call's timeout is not applied), whatever the broker.

Errors are handled as librdkafka documents them: a retriable commit is retried, an
abortable error aborts the transaction and rewinds the consumer to its committed
offsets, a fatal one (fenced) replaces the producer. Nothing here knows about faults.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _debug() -> dict[str, str]:
    """KRAFT_TEST_RDKAFKA_DEBUG=eos,protocol,... turns librdkafka's debug logs on."""
    flags = os.environ.get("KRAFT_TEST_RDKAFKA_DEBUG")
    return {"debug": flags} if flags else {}


class EosCopier:
    """The job's process, from the test's side: start, replace, stop."""

    def __init__(self, bootstrap: str, source: str, sink: str, group: str, txn_id: str,
                 log_dir: Path, batch: int = 500) -> None:
        self.argv = [sys.executable, "-m", "tests.harness.eos_copier", bootstrap, source, sink,
                     group, txn_id, str(batch)]
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        out = open(self.log_dir / f"copier-{self.starts}.log", "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
        out.close()

    def replace(self) -> None:
        """SIGKILL this instance and start another (same transactional.id: fences it)."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(30)
        self.start()

    def failed(self) -> str | None:
        """Why the job exited on its own (it never should), or None while it runs."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"the copier exited with {self.proc.returncode}: {self.tail()}"

    def tail(self, lines: int = 15) -> str:
        text = (self.log_dir / f"copier-{self.starts}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:  # stuck in a client call: nothing left to lose
            self.proc.kill()
            self.proc.wait(30)


# -- the job itself -------------------------------------------------------------------------


class _Job:
    def __init__(self, bootstrap: str, source: str, sink: str, group: str, txn_id: str,
                 batch: int) -> None:
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        self.group, self.txn_id, self.batch = group, txn_id, batch
        self.stopping = False

    def log(self, what: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {what}", flush=True)

    def producer(self) -> Any:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                      "linger.ms": 5, "transaction.timeout.ms": 60000,
                      "message.timeout.ms": 60000, **_debug()})
        while True:  # the coordinator may be down or loading: retry until it answers
            try:
                p.init_transactions(30)
                return p
            except Exception as exc:  # noqa: BLE001
                self.log(f"init_transactions: {exc}")
                time.sleep(0.2)

    def consumer(self) -> Any:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 10000})
        c.subscribe([self.source])
        return c

    def run(self) -> None:
        from confluent_kafka import KafkaException

        consumer = self.consumer()
        producer = self.producer()
        committed = 0
        try:
            while not self.stopping:
                msgs = [m for m in consumer.consume(self.batch, 0.5) if m.error() is None]
                if not msgs:
                    continue
                try:
                    self.transaction(producer, consumer, msgs)
                    committed += 1
                except KafkaException as exc:
                    err = exc.args[0]
                    self.log(f"transaction failed: {err}")
                    if err.fatal():
                        producer = self.producer()
                    else:
                        self.abort(producer)
                    self.rewind(consumer)
        finally:
            self.log(f"stopping after {committed} committed transactions")
            consumer.close()

    def transaction(self, producer: Any, consumer: Any, msgs: list[Any]) -> None:
        from confluent_kafka import KafkaException

        producer.begin_transaction()
        for m in msgs:
            producer.produce(self.sink, m.value(), key=m.key(), partition=m.partition())
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 60)
        while True:
            try:
                producer.commit_transaction(60)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                self.log(f"commit retried: {exc.args[0]}")

    def abort(self, producer: Any) -> None:
        from confluent_kafka import KafkaException

        while True:
            try:
                producer.abort_transaction(60)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                self.log(f"abort retried: {exc.args[0]}")

    def rewind(self, consumer: Any) -> None:
        """Back to the group's committed offsets: the aborted batch is read again."""
        from confluent_kafka import OFFSET_BEGINNING

        for tp in consumer.committed(consumer.assignment(), 30):
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "source", "sink", "group", "txn_id"):
        ap.add_argument(name)
    ap.add_argument("batch", type=int)
    a = ap.parse_args(argv)
    job = _Job(a.bootstrap, a.source, a.sink, a.group, a.txn_id, a.batch)

    def stop(_sig: int, _frame: object) -> None:
        job.stopping = True

    signal.signal(signal.SIGTERM, stop)
    job.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
