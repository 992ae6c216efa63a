"""Exactly-once across failures (issue 15): a consume-transform-produce job copies
100,000 records from an RF 3 input topic to an RF 3 output topic in transactions
(confluent-kafka, `send_offsets_to_transaction`) while the test SIGKILLs, in turn, the
transaction coordinator's broker, an output partition leader and the active controller,
restarting each and waiting for the cluster to be whole again before the next fault.

Then the output, read with read_committed, must hold every input record exactly once
(per partition, in the input's order), and the group's committed offsets must equal the
input's end offsets.

Timings are shrunk as in tests/cluster/test_failover.py so failures are detected fast.
Every wait is a condition under a deadline; failures carry the nodes' logs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.group.config import partition_for
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.eos_copier import EosCopier
from tests.harness.txn_clients import create_topic, read_partitions

TOTAL = 100_000
PARTITIONS = 3
TXN_PARTITIONS = 5
SESSION_MS = 6000
BROKER_PROPS = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": "1500",
    "replica.fetch.backoff.ms": "200",
    "replica.fetch.wait.max.ms": "200",
    "transaction.state.log.num.partitions": str(TXN_PARTITIONS),
    "offsets.topic.num.partitions": "5",
}
CONTROLLER_PROPS = {"broker.session.timeout.ms": str(SESSION_MS)}
TXN_ID = "eos-copy"
STUCK_S = 25.0  # no progress this long: the copier is replaced
GROUP = "eos-copy-group"


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcCluster]:
    c = ProcCluster(tmp_path / "data", controller_props=CONTROLLER_PROPS,
                    broker_props=BROKER_PROPS)
    try:
        c.start()
        yield c
    finally:
        c.close()


def fill_input(bootstrap: str, topic: str) -> dict[int, int]:
    """TOTAL records, round robin over the partitions; returns the end offsets."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                  "linger.ms": 20, "batch.num.messages": 10000})
    failed: list[str] = []
    for i in range(TOTAL):
        while True:
            try:
                p.produce(topic, b"v-%d" % i, key=b"k-%d" % i, partition=i % PARTITIONS,
                          on_delivery=lambda e, m: failed.append(str(e)) if e else None)
                break
            except BufferError:
                p.poll(0.05)
    assert p.flush(60) == 0 and not failed, failed[:3]
    return {part: len(range(part, TOTAL, PARTITIONS)) for part in range(PARTITIONS)}


def committed_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                  "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def leader_of(c: ProcCluster, topic: str, partition: int) -> int | None:
    parts = c.partitions(topic)
    if not parts or partition not in parts:
        return None
    leader = parts[partition].get("leader", -1)
    return leader if leader is not None and leader >= 0 else None


def wait_whole(c: ProcCluster, topics: list[str], what: str) -> None:
    """Every partition of `topics` has a leader and all 3 replicas in its ISR."""
    def probe() -> bool:
        for t in topics:
            parts = c.partitions(t)
            if not parts or any(len(p.get("isr", [])) < 3 or p.get("leader", -1) < 0
                                for p in parts.values()):
                return False
        return True
    wait_for(probe, 90, f"full ISRs after {what}", c.logs)


def crash_and_restart(c: ProcCluster, broker: int, topics: list[str]) -> None:
    """SIGKILL `broker`, wait until the controllers fence it (its leaderships move to the
    other replicas while the copier goes on), restart it, wait for full ISRs again."""
    c.kill_broker(broker)
    wait_for(lambda: broker in (c.fenced_brokers() or set()), 60,
             f"broker {broker} to be fenced", c.logs)
    c.restart_broker(broker)
    wait_whole(c, topics, f"broker {broker}'s restart")


def wait_progress(c: ProcCluster, copier: EosCopier, at_least: int, what: str) -> None:
    """Until the group has committed `at_least` input records. A copier that makes no
    progress for STUCK_S is replaced (see tests/harness/eos_copier.py for why)."""
    last = [-1, time.monotonic()]

    def probe() -> bool:
        if (why := copier.failed()) is not None:
            raise AssertionError(why)
        done = sum(max(0, o) for o in committed_offsets(c.bootstrap, "eos-in").values())
        if done != last[0]:
            last[:] = [done, time.monotonic()]
        elif time.monotonic() - last[1] > STUCK_S:
            copier.replace()
            last[1] = time.monotonic()
        return done >= at_least

    def logs() -> str:
        return f"copier (start {copier.starts}):\n{copier.tail()}\n{c.logs()}"

    wait_for(probe, 180, f"{at_least} records copied {what}", logs)


def test_copy_is_exactly_once_across_coordinator_leader_and_controller_kills(
    cluster: ProcCluster, tmp_path: Path
) -> None:
    c = cluster
    create_topic(c.bootstrap, "eos-in", PARTITIONS, 3, {"min.insync.replicas": "2"})
    create_topic(c.bootstrap, "eos-out", PARTITIONS, 3, {"min.insync.replicas": "2"})
    ends = fill_input(c.bootstrap, "eos-in")
    copier = EosCopier(c.bootstrap, "eos-in", "eos-out", GROUP, TXN_ID, tmp_path)
    copier.start()
    try:
        wait_progress(c, copier, 10_000, "before any fault")
        # 1. the transaction coordinator's broker
        coord = wait_for(lambda: leader_of(c, "__transaction_state",
                                           partition_for(TXN_ID, TXN_PARTITIONS)),
                         30, "the transaction coordinator", c.logs)
        crash_and_restart(c, coord, ["eos-in", "eos-out", "__transaction_state"])
        wait_progress(c, copier, 30_000, "after the coordinator's broker came back")
        # 2. an output partition's leader (another broker when it can be)
        leaders = {p: leader_of(c, "eos-out", p) for p in range(PARTITIONS)}
        victim = next((b for b in leaders.values() if b is not None and b != coord),
                      leaders[0])
        assert victim is not None
        crash_and_restart(c, victim, ["eos-in", "eos-out", "__transaction_state"])
        wait_progress(c, copier, 50_000, "after the output leader came back")
        # 3. the active controller
        active = c.wait_active_controller(30)
        c.kill_controller(active.node_id)
        wait_progress(c, copier, 70_000, "with the active controller down")
        c.restart_controller(active.node_id)
        c.wait_active_controller(30)
        wait_progress(c, copier, TOTAL, "to the end")
    finally:
        copier.stop()
    assert committed_offsets(c.bootstrap, "eos-in") == ends
    out_ends = {p: -1 for p in range(PARTITIONS)}
    from confluent_kafka import Consumer, TopicPartition

    probe = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "probe",
                      "isolation.level": "read_committed"})
    try:
        for p in range(PARTITIONS):
            out_ends[p] = probe.get_watermark_offsets(TopicPartition("eos-out", p), 10)[1]
    finally:
        probe.close()
    got = read_partitions(c.bootstrap, "eos-out", "read_committed", out_ends, 120)
    for p in range(PARTITIONS):
        values = [v for _, _, v in got[p]]
        want = [b"v-%d" % i for i in range(p, TOTAL, PARTITIONS)]
        dupes = len(values) - len(set(values))
        assert values == want, (
            f"partition {p}: {len(values)} records, {dupes} duplicated, "
            f"{len(set(want) - set(values))} missing; copier started {copier.starts} times"
        )
