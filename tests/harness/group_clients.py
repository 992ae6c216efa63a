"""Consumer-group members for the end-to-end tests: each runs one real client
(confluent-kafka, kafka-python or aiokafka) in its own thread, subscribes, and after
every poll that returned records commits them synchronously (commits after
processing), recording what it consumed and what it owns."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

Consumed = tuple[int, int, bytes]  # (partition, offset, value)


class Member:
    """A group member in a thread; `stop()` closes the client (a LeaveGroup)."""

    def __init__(self, kind: str, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.kind, self.bootstrap, self.group, self.topic, self.name = (
            kind,
            bootstrap,
            group,
            topic,
            name,
        )
        self.consumed: list[Consumed] = []
        self.assigned: set[int] = set()
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self) -> Member:
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 30) -> None:
        self._stop.set()
        self._thread.join(timeout_s)
        assert not self._thread.is_alive(), f"{self.name} did not close in {timeout_s}s"

    def snapshot(self) -> tuple[set[int], list[Consumed]]:
        with self.lock:
            return set(self.assigned), list(self.consumed)

    def _took(self, records: list[Consumed]) -> None:
        with self.lock:
            self.consumed.extend(records)

    def _owns(self, partitions: set[int]) -> None:
        with self.lock:
            self.assigned = partitions

    def _run(self) -> None:
        try:
            {"ck": self._confluent, "kp": self._kafka_python, "aio": self._aiokafka_thread}[
                self.kind
            ]()
        except Exception as e:  # reported by the test, with the member's name
            self.errors.append(repr(e))

    # -- confluent-kafka ---------------------------------------------------------------------

    def _confluent(self) -> None:
        from confluent_kafka import Consumer

        c = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.group,
                "client.id": self.name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": 10_000,
                "heartbeat.interval.ms": 500,
            }
        )

        def assigned(_c: Any, parts: list[Any]) -> None:
            self._owns({p.partition for p in parts})

        def revoked(_c: Any, _parts: list[Any]) -> None:
            self._owns(set())

        c.subscribe([self.topic], on_assign=assigned, on_revoke=revoked)
        try:
            while not self._stop.is_set():
                msgs = [m for m in c.consume(200, 0.2) if not m.error()]
                if msgs:
                    self._took([(m.partition(), m.offset(), m.value()) for m in msgs])
                    self._commit(lambda: c.commit(asynchronous=False))
        finally:
            c.close()

    def _commit(self, commit: Callable[[], object]) -> None:
        try:
            commit()
        except Exception as e:  # e.g. a coordinator moving: the records come again
            self.errors.append(f"commit: {e!r}")

    # -- kafka-python --------------------------------------------------------------------------

    def _kafka_python(self) -> None:
        from kafka import ConsumerRebalanceListener, KafkaConsumer

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            def on_partitions_revoked(self, revoked: Any) -> None:
                member._owns(set())

            def on_partitions_assigned(self, assigned: Any) -> None:
                member._owns({tp.partition for tp in assigned})

        c = KafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        c.subscribe([self.topic], listener=Listener())
        try:
            while not self._stop.is_set():
                batches = c.poll(timeout_ms=200)
                recs = [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]
                if recs:
                    self._took(recs)
                    self._commit(c.commit)
        finally:
            c.close()

    # -- aiokafka ------------------------------------------------------------------------------

    def _aiokafka_thread(self) -> None:
        asyncio.run(self._aiokafka())

    async def _aiokafka(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.abc import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
            async def on_partitions_revoked(self, revoked: Any) -> None:
                member._owns(set())

            async def on_partitions_assigned(self, assigned: Any) -> None:
                member._owns({tp.partition for tp in assigned})

        c = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=10_000,
            heartbeat_interval_ms=500,
        )
        c.subscribe([self.topic], listener=Listener())
        await c.start()
        try:
            while not self._stop.is_set():
                batches = await c.getmany(timeout_ms=200)
                recs = [(r.partition, r.offset, r.value) for rs in batches.values() for r in rs]
                if recs:
                    self._took(recs)
                    try:
                        await c.commit()
                    except Exception as e:
                        self.errors.append(f"commit: {e!r}")
        finally:
            await c.stop()
