"""A consume-transform-produce job, as Kafka's exactly-once examples write it with
confluent-kafka: a read_committed consumer in a group, a transactional producer, each
batch of records copied inside one transaction together with the group's offsets
(`send_offsets_to_transaction`). It runs in a thread so a test can crash brokers and
controllers under it.

Errors are handled as librdkafka documents them: a retriable commit is retried, an
abortable error aborts the transaction and rewinds the consumer to its committed
offsets, a fatal one (fenced) replaces the producer. Nothing here knows about faults.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

log = logging.getLogger("tests.eos_copier")


def _debug() -> dict[str, str]:
    """KRAFT_TEST_RDKAFKA_DEBUG=eos,protocol,... turns librdkafka's debug logs on."""
    flags = os.environ.get("KRAFT_TEST_RDKAFKA_DEBUG")
    return {"debug": flags} if flags else {}


class EosCopier:
    def __init__(self, bootstrap: str, source: str, sink: str, group: str, txn_id: str,
                 batch: int = 500) -> None:
        self.bootstrap, self.source, self.sink = bootstrap, source, sink
        self.group, self.txn_id, self.batch = group, txn_id, batch
        self.committed_txns = 0
        self.aborted_txns = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eos-copier", daemon=True)
        self.failure: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 60) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError("the copier did not stop")
        if self.failure is not None:
            raise AssertionError(f"the copier failed: {self.failure!r}") from self.failure

    # -- the job ------------------------------------------------------------------------------

    def _producer(self) -> Any:
        from confluent_kafka import Producer

        p = Producer({"bootstrap.servers": self.bootstrap, "transactional.id": self.txn_id,
                      "linger.ms": 5, "transaction.timeout.ms": 60000,
                      "message.timeout.ms": 60000, **_debug()})
        while True:  # the coordinator may be down or loading: retry until it answers
            try:
                p.init_transactions(30)
                return p
            except Exception as exc:  # noqa: BLE001
                if self._stop.is_set():
                    raise
                self.errors.append(f"init_transactions: {exc}")
                time.sleep(0.2)

    def _consumer(self) -> Any:
        from confluent_kafka import Consumer

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": self.group,
                      "isolation.level": "read_committed", "enable.auto.commit": False,
                      "auto.offset.reset": "earliest", "session.timeout.ms": 30000})
        c.subscribe([self.source])
        return c

    def _run(self) -> None:
        try:
            self._copy()
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.failure = exc

    def _copy(self) -> None:
        from confluent_kafka import KafkaException

        consumer = self._consumer()
        producer = self._producer()
        try:
            while not self._stop.is_set():
                msgs = [m for m in consumer.consume(self.batch, 0.5) if m.error() is None]
                if not msgs:
                    continue
                try:
                    self._transaction(producer, consumer, msgs)
                    self.committed_txns += 1
                except KafkaException as exc:
                    err = exc.args[0]
                    self.errors.append(str(err))
                    if err.fatal():
                        producer = self._producer()
                    else:
                        self._abort(producer)
                    self._rewind(consumer)
        finally:
            consumer.close()

    def _transaction(self, producer: Any, consumer: Any, msgs: list[Any]) -> None:
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
                self.errors.append(f"commit retried: {exc.args[0]}")

    def _abort(self, producer: Any) -> None:
        from confluent_kafka import KafkaException

        self.aborted_txns += 1
        while True:
            try:
                producer.abort_transaction(60)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable():
                    raise
                self.errors.append(f"abort retried: {exc.args[0]}")

    def _rewind(self, consumer: Any) -> None:
        """Back to the group's committed offsets: the aborted batch is read again."""
        from confluent_kafka import OFFSET_BEGINNING

        assignment = consumer.assignment()
        for tp in consumer.committed(assignment, 30):
            if tp.offset < 0:
                tp.offset = OFFSET_BEGINNING
            consumer.seek(tp)
