"""Client-side helpers of the transaction tests: create a topic and wait until every
partition has a leader and a full ISR, and read a topic back with confluent-kafka at a
chosen isolation level, by assign() from the beginning, until each partition's position
reaches a given end (positions move past markers and aborted batches too)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

Rec = tuple[int, bytes | None, bytes | None]  # offset, key, value


def create_topic(bootstrap: str, topic: str, partitions: int, rf: int,
                 config: Mapping[str, str] | None = None, timeout_s: float = 30) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(topic, partitions, rf, config=dict(config or {}))],
                             request_timeout=15)
    fs[topic].result(timeout_s)
    deadline = time.monotonic() + timeout_s
    while True:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions and all(
            p.leader >= 0 and len(p.isrs) == rf for p in md.partitions.values()
        ):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: no full ISR within {timeout_s}s: {md}")
        time.sleep(0.05)


def read_partitions(bootstrap: str, topic: str, isolation: str, ends: Mapping[int, int],
                    timeout_s: float = 60, extra: Mapping[str, Any] | None = None
                    ) -> dict[int, list[Rec]]:
    """Every record of the partitions in `ends` (partition -> offset to read up to), at
    `isolation` ("read_committed" or "read_uncommitted")."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": f"reader-{time.monotonic_ns()}",
            "enable.auto.commit": False, "isolation.level": isolation,
            "enable.partition.eof": False, **(extra or {})}
    cons = Consumer(conf)
    tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(ends)]
    cons.assign(tps)
    out: dict[int, list[Rec]] = {p: [] for p in ends}
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            positions = {tp.partition: tp.offset for tp in cons.position(
                [TopicPartition(topic, p) for p in ends])}
            if all(positions[p] >= end for p, end in ends.items()):
                return out
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{topic} at {isolation}: positions {positions}, wanted {dict(ends)}; "
                    f"read {[len(v) for v in out.values()]}")
            for m in cons.consume(1000, 0.2):
                if m.error() is not None:
                    raise AssertionError(f"consume error: {m.error()}")
                out[m.partition()].append((m.offset(), m.key(), m.value()))
    finally:
        cons.close()


def consume_all(bootstrap: str, topic: str, isolation: str, end: int,
                timeout_s: float = 60) -> list[tuple[int, bytes | None]]:
    """(offset, value) of partition 0 up to `end`."""
    recs = read_partitions(bootstrap, topic, isolation, {0: end}, timeout_s)[0]
    return [(o, v) for o, _, v in recs]
