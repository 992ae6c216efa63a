"""The campaign's clients, in the root namespace: acks=all idempotent producers writing
unique values, consumers in a group and consumers by assign, a thread of admin
operations, and the final drain. Everything they see goes into one History (the plain
data tests/chaos/checker.py checks); times are time.monotonic().
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

PRODUCE_RATE_PER_S = 40.0  # per producer: the brokers share 2 cores with everything else
# 0 = never: librdkafka bumps the producer epoch when an in-flight message times out and
# then re-sends the other partitions' possibly-written messages under the new epoch,
# duplicates no broker can catch (confluentinc/librdkafka#4953; seen here with 15 s).
# Infinite, a send ends only acknowledged or by a non-retriable error.
MESSAGE_TIMEOUT_MS = 0
CLIENT_QUIET = {"log_level": 2}  # librdkafka logs every refused connection otherwise


class History:
    """What every client saw, under one lock."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.sends: list[dict[str, Any]] = []
        self.polls: list[dict[str, Any]] = []
        self.admin: list[dict[str, Any]] = []
        self.client_errors: list[str] = []

    def add(self, kind: str, item: dict[str, Any]) -> None:
        with self.lock:
            getattr(self, kind).append(item)

    def progressed(self, who: str, since: float) -> bool:
        """Has producer or consumer `who` made progress after `since`?"""
        with self.lock:
            if who.startswith("p"):
                return any(s["producer"] == who and s["status"] == "ok" and s["t"] > since
                           for s in reversed(self.sends))  # fmt: skip
            return any(p["consumer"] == who and p["t"] > since for p in reversed(self.polls))


class Workload:
    def __init__(self, bootstrap: str, topics: list[str], partitions: int,
                 n_producers: int = 2, n_group_consumers: int = 2,
                 client_log: Path | None = None) -> None:  # fmt: skip
        self.bootstrap = bootstrap
        # librdkafka's debug log of the group consumers ("cgrp") and the producers ("eos"):
        # a member that never rejoins, or a producer epoch bump (which re-sends messages
        # that may already be written: a duplicate), is diagnosed from the client's side.
        self._client_logger: logging.Logger | None = None
        if client_log is not None:
            self._client_logger = logging.getLogger(f"chaos.clients.{uuid.uuid4().hex[:8]}")
            self._client_logger.propagate = False
            self._client_logger.setLevel(logging.DEBUG)
            handler = logging.FileHandler(client_log)
            handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
            self._client_logger.addHandler(handler)
        self.topics = topics
        self.partitions = partitions
        self.history = History()
        self.stop_event = threading.Event()
        self.producers = [f"p{i}" for i in range(n_producers)]
        self.consumers = [f"g{i}" for i in range(n_group_consumers)] + ["a0"]
        self.group = f"chaos-{uuid.uuid4().hex[:8]}"
        self.threads: list[threading.Thread] = []
        self._consumers: dict[str, Consumer] = {}

    def start(self) -> None:
        targets: list[tuple[str, Any]] = [(p, self._produce) for p in self.producers]
        targets += [(c, self._consume) for c in self.consumers]
        targets.append(("admin", self._admin))
        for name, fn in targets:
            t = threading.Thread(target=fn, args=(name,), name=f"chaos-{name}", daemon=True)
            t.start()
            self.threads.append(t)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every client; all share one deadline (a stuck consumer's close would
        otherwise cost its own full timeout)."""
        self.stop_event.set()
        deadline = time.monotonic() + timeout_s
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if self._client_logger is not None:
            for handler in list(self._client_logger.handlers):
                handler.close()
                self._client_logger.removeHandler(handler)

    def describe_consumer(self, name: str, timeout_s: float = 5.0) -> dict[str, Any]:
        """What a (stalled) consumer holds: its assignment and positions (librdkafka's
        handles are thread-safe for these). Asked on a thread, given `timeout_s`: a stuck
        consumer's assignment() can block forever, and the campaign must go on."""
        consumer = self._consumers.get(name)
        if consumer is None:
            return {"consumer": name, "state": "not running"}
        out: dict[str, Any] = {"consumer": name, "state": f"no answer in {timeout_s:.0f} s"}

        def ask() -> None:
            try:
                parts = consumer.assignment()
                pos = consumer.position(parts) if parts else []
                out.pop("state")
                out["assignment"] = [f"{tp.topic}/{tp.partition}@{tp.offset}" for tp in pos]
            except Exception as exc:  # noqa: BLE001 - diagnosis only
                out["error"] = repr(exc)

        asker = threading.Thread(target=ask, name=f"describe-{name}", daemon=True)
        asker.start()
        asker.join(timeout_s)
        return dict(out)

    @property
    def clients(self) -> list[str]:
        return self.producers + self.consumers

    # -- producers --------------------------------------------------------------------------

    def _new_producer(self, name: str, fatal: threading.Event) -> Producer:
        def on_error(err: Any) -> None:
            self.history.add("client_errors", f"{name}: {err.name()} fatal={err.fatal()}")
            if err.fatal():
                fatal.set()

        conf = {
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True,
            "linger.ms": 5, "message.timeout.ms": MESSAGE_TIMEOUT_MS, "socket.timeout.ms": 5000,
            "topic.metadata.refresh.interval.ms": 2000, "error_cb": on_error, **CLIENT_QUIET,
            "client.id": f"chaos-{name}",
        }  # fmt: skip
        if self._client_logger is not None:
            conf.update(debug="eos", log_level=7, logger=self._client_logger)
        return Producer(conf)

    def _produce(self, name: str) -> None:
        pending: dict[str, dict[str, Any]] = {}
        fatal = threading.Event()
        producer = self._new_producer(name, fatal)
        seq = itertools.count()
        period = 1.0 / PRODUCE_RATE_PER_S
        next_at = time.monotonic()

        def report(err: Any, msg: Any) -> None:
            value = msg.value().decode()
            send = pending.pop(value, None)
            if send is None:
                return
            send["t"] = time.monotonic()
            if err is None:
                send.update(status="ok", offset=msg.offset())
            else:
                send.update(status="failed", error=err.name())
            self.history.add("sends", send)

        while not self.stop_event.is_set():
            if fatal.is_set():
                # A fatal idempotence error ends this producer, as in an application that
                # then makes a new one; what it had in flight is indefinite.
                self._abandon(pending, "fatal")
                fatal.clear()
                producer = self._new_producer(name, fatal)
            i = next(seq)
            topic = self.topics[i % len(self.topics)]
            part = (i // len(self.topics)) % self.partitions
            value = f"{name}-{i}"
            pending[value] = {
                "producer": name, "value": value, "topic": topic, "partition": part,
                "status": "unknown", "t_sent": time.monotonic(),
            }  # fmt: skip
            try:
                producer.produce(topic, value.encode(), partition=part, on_delivery=report)
            except BufferError:
                pending.pop(value)
            producer.poll(0)
            next_at += period
            delay = next_at - time.monotonic()
            if delay > 0:
                producer.poll(delay)  # pacing: serve delivery reports meanwhile
            else:
                next_at = time.monotonic()
        producer.flush(10)
        self._abandon(pending, "still in flight at the end")

    def _abandon(self, pending: dict[str, dict[str, Any]], why: str) -> None:
        for send in list(pending.values()):
            send.update(t=time.monotonic(), error=why)
            self.history.add("sends", send)
        pending.clear()

    # -- consumers --------------------------------------------------------------------------

    def _consume(self, name: str) -> None:
        gen = itertools.count()
        current = [next(gen)]
        conf: dict[str, Any] = {
            "bootstrap.servers": self.bootstrap, "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000,
            "topic.metadata.refresh.interval.ms": 2000, **CLIENT_QUIET,
        }  # fmt: skip
        if name.startswith("g"):
            conf.update({"group.id": self.group, "auto.commit.interval.ms": 1000,
                         "client.id": f"chaos-{name}"})  # fmt: skip
            if self._client_logger is not None:
                conf.update(debug="cgrp", log_level=7, logger=self._client_logger)
        else:
            conf.update({"group.id": f"{self.group}-assign", "enable.auto.commit": False})
        consumer = Consumer(conf)
        self._consumers[name] = consumer

        def new_generation(_c: Any, _parts: Any) -> None:
            current[0] = next(gen)

        if name.startswith("g"):
            consumer.subscribe(self.topics, on_assign=new_generation, on_revoke=new_generation)
        else:
            consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t in self.topics
                             for p in range(self.partitions)])  # fmt: skip
        try:
            while not self.stop_event.is_set():
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                if msg.error():
                    self.history.add("client_errors", f"{name}: {msg.error().name()}")
                    continue
                self.history.add("polls", {
                    "consumer": name, "gen": current[0], "topic": msg.topic(),
                    "partition": msg.partition(), "offset": msg.offset(),
                    "value": msg.value().decode(), "t": time.monotonic(),
                })  # fmt: skip
        finally:
            with contextlib.suppress(Exception):
                consumer.close()

    # -- admin ------------------------------------------------------------------------------

    def _admin(self, _name: str) -> None:
        admin = AdminClient({"bootstrap.servers": self.bootstrap, **CLIENT_QUIET})
        for k in itertools.count():
            if self.stop_event.wait(2.0):
                return
            topic = f"chaos-admin-{k // 2}"
            if k % 2 == 0:
                op, fut = "create", admin.create_topics(
                    [NewTopic(topic, 1, 3)], request_timeout=8)[topic]  # fmt: skip
            elif k % 4 == 1:
                op, fut = "delete", admin.delete_topics([topic], request_timeout=8)[topic]
            else:
                entry = ConfigEntry("retention.ms", str(3600000 + k),
                                    incremental_operation=AlterConfigOpType.SET)  # fmt: skip
                res = ConfigResource("topic", self.topics[0], incremental_configs=[entry])
                op, fut = "alter-config", admin.incremental_alter_configs([res])[res]
            try:
                fut.result(10)
                outcome = "ok"
            except Exception as exc:  # noqa: BLE001 - an admin call may fail under faults
                outcome = f"failed: {exc}"[:200]
            self.history.add("admin", {"op": op, "topic": topic, "outcome": outcome,
                                       "t": time.monotonic()})  # fmt: skip


def create_topics(bootstrap: str, topics: list[str], partitions: int,
                  timeout_s: float = 60.0) -> None:  # fmt: skip
    """Create the topics, retrying what fails until `timeout_s`. Just after the start a
    broker's image may lag the controllers' by a poll: its Metadata answer can leave out
    a broker that registered since, and librdkafka then drops that broker with the
    CreateTopics request it carried ("Broker handle destroyed", seed 762310834)."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **CLIENT_QUIET})
    todo = list(topics)
    deadline = time.monotonic() + timeout_s
    while todo:
        new = [NewTopic(t, partitions, 3, config={"min.insync.replicas": "2"}) for t in todo]
        failed: list[str] = []
        for topic, fut in admin.create_topics(new, request_timeout=15).items():
            try:
                fut.result(20)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:  # a retry's echo
                    if time.monotonic() > deadline:
                        raise
                    failed.append(topic)
        todo = failed
        if todo:
            time.sleep(0.5)


def drain(bootstrap: str, topics: list[str], partitions: int,
          timeout_s: float = 60.0) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Every partition from the beginning up to its high watermark, by assign."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"chaos-drain-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False, **CLIENT_QUIET,
    })  # fmt: skip
    deadline = time.monotonic() + timeout_s
    out: dict[str, dict[str, Any]] = {}
    try:
        ends: dict[tuple[str, int], int] = {}
        for t in topics:
            for p in range(partitions):
                while (t, p) not in ends:
                    try:
                        ends[(t, p)] = consumer.get_watermark_offsets(
                            TopicPartition(t, p), timeout=5)[1]  # fmt: skip
                    except Exception:  # noqa: BLE001 - retried until the deadline
                        if time.monotonic() > deadline:
                            raise
                out[f"{t}/{p}"] = {"records": [], "end": ends[(t, p)]}
        todo = {tp for tp, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            key = (msg.topic(), msg.partition())
            out[f"{key[0]}/{key[1]}"]["records"].append([msg.offset(), msg.value().decode()])
            if msg.offset() + 1 >= ends[key]:
                todo.discard(key)
        for t, p in todo:
            out[f"{t}/{p}"]["incomplete"] = True
    finally:
        consumer.close()
    return out
