"""Transactional offsets and the client tools end to end: confluent-kafka's
consume-transform-produce loop (`send_offsets_to_transaction`) against a real cluster
(1 controller, 3 brokers as processes, RF 3), `kraft consume --isolation-level` and
`kraft transactions list | describe | describe-producers | abort` as subprocesses.

Every wait is a condition under a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from tests.harness.cli import kraft, ok
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, decode_response, encode_request, request

PARTITIONS = 3
BROKER_PROPS = {
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(
        Path(tmp_path_factory.mktemp("txn-offsets")), n_controllers=1, broker_props=BROKER_PROPS
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


def create_topic(c: ProcCluster, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)

    def ready() -> bool:
        parts = c.partitions(topic)
        return parts is not None and all(p["leader"] >= 0 for p in parts.values())

    wait_for(ready, 30, f"{topic} with leaders", c.logs)


def produce_plain(c: ProcCluster, topic: str, n: int) -> None:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=f"in-{i}".encode(), partition=i % PARTITIONS)
    assert p.flush(30) == 0


def committed(c: ProcCluster, group: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": group})
    try:
        got = consumer.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 30)
        return {tp.partition: tp.offset for tp in got}
    finally:
        consumer.close()


def read_all(c: ProcCluster, topic: str, isolation: str, expect: int) -> list[bytes]:
    """Records from the start until `expect` were read (and a little longer, so more
    would be seen)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "reader",
                         "isolation.level": isolation, "enable.auto.commit": False})  # fmt: skip
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        seen: list[bytes] = []
        deadline = time.monotonic() + 60
        quiet_until = None
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                seen.append(m.value())
            if len(seen) >= expect:
                quiet_until = quiet_until or time.monotonic() + 1.0
                if time.monotonic() >= quiet_until:
                    break
        return seen
    finally:
        consumer.close()


def test_consume_transform_produce_commits_offsets_only_with_its_transaction(
    cluster: ProcCluster,
) -> None:
    """Several committed transactions, each sending the consumer's positions (all three
    partitions at once), then one aborted: the group's offsets are those of the last
    committed transaction, and the output holds every input record once."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    src, dst, group = "ctp-in", "ctp-out", "ctp-group"
    create_topic(cluster, src)
    create_topic(cluster, dst)
    n = 90
    produce_plain(cluster, src, n)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group,
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest"})  # fmt: skip
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "ctp-1"})
    producer.init_transactions(30)
    try:
        consumer.assign([TopicPartition(src, p, 0) for p in range(PARTITIONS)])
        copied = 0
        deadline = time.monotonic() + 90
        while copied < n:
            assert time.monotonic() < deadline, f"copied only {copied} of {n}"
            msgs = [m for m in consumer.consume(30, 1.0) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(dst, value=m.value(), partition=m.partition())
            positions = consumer.position(consumer.assignment())
            producer.send_offsets_to_transaction(
                positions, consumer.consumer_group_metadata(), 30
            )
            producer.commit_transaction(30)
            copied += len(msgs)
        assert committed(cluster, group, src) == dict.fromkeys(range(PARTITIONS), n // 3)
        # An aborted transaction's offsets never become the group's.
        producer.begin_transaction()
        producer.produce(dst, value=b"aborted", partition=0)
        assert producer.flush(30) == 0  # in the log before the marker (abort would purge it)
        moved = [TopicPartition(src, p, 1) for p in range(PARTITIONS)]
        producer.send_offsets_to_transaction(moved, consumer.consumer_group_metadata(), 30)
        producer.abort_transaction(30)
        assert committed(cluster, group, src) == dict.fromkeys(range(PARTITIONS), n // 3)
    finally:
        consumer.close()
    # The group's coordinator is SIGKILLed: the next one loads the offsets from the log
    # (every transaction's batch, its markers), and restarts.
    from broker.group.config import partition_for

    parts = cluster.partitions("__consumer_offsets")
    assert parts is not None
    victim = parts[partition_for(group, 3)]["leader"]
    state = cluster.cluster_state()
    assert state is not None
    cluster.kill_broker(victim)
    try:
        want = dict.fromkeys(range(PARTITIONS), n // 3)

        def moved() -> bool | None:
            try:
                return committed(cluster, group, src) == want or None
            except KafkaException:  # the coordinator is moving: ask again
                return None

        wait_for(moved, 60, "the offsets on the new coordinator", cluster.logs)
    finally:
        cluster.restart_broker(victim)
        cluster.wait_brokers_unfenced({victim}, int(state["metadata_offset"]), 60)
    out = read_all(cluster, dst, "read_committed", n)
    assert sorted(out) == sorted(f"in-{i}".encode() for i in range(n))
    assert b"aborted" in read_all(cluster, dst, "read_uncommitted", n + 1)


def test_kraft_consume_isolation_and_transactions_abort(cluster: ProcCluster) -> None:
    """A transaction left open holds the LSO: read_committed `kraft consume` sees nothing
    past it, `kraft transactions` lists and describes it, and `abort --start-offset`
    (found with describe-producers) releases it."""
    from confluent_kafka import Producer

    topic = "stuck"
    create_topic(cluster, topic)
    b = cluster.bootstrap
    stuck = Producer({"bootstrap.servers": b, "transactional.id": "stuck-1",
                      "transaction.timeout.ms": 600_000})  # fmt: skip
    stuck.init_transactions(30)
    stuck.begin_transaction()
    stuck.produce(topic, value=b"open", partition=0)
    assert stuck.flush(30) == 0
    after = Producer({"bootstrap.servers": b, "acks": "all"})
    after.produce(topic, value=b"after", partition=0)
    assert after.flush(30) == 0

    def consume(isolation: str) -> list[str]:
        out = ok(kraft("consume", "--bootstrap-server", b, "--topic", topic, "--partition", "0",
                       "--from-beginning", "--timeout-ms", "3000",
                       "--isolation-level", isolation))  # fmt: skip
        return out.split()

    assert consume("read_uncommitted") == ["open", "after"]
    assert consume("read_committed") == []  # the open transaction holds the LSO at 0

    listed = ok(kraft("transactions", "--bootstrap-server", b, "list")).splitlines()
    assert listed[0].split() == ["TransactionalId", "Coordinator", "ProducerId",
                                 "TransactionState"]  # fmt: skip
    row = next(r.split() for r in listed[1:] if r.split()[0] == "stuck-1")
    assert row[3] == "Ongoing"
    described = ok(kraft("transactions", "--bootstrap-server", b, "describe",
                         "--transactional-id", "stuck-1")).splitlines()  # fmt: skip
    assert described[1].split()[4] == "Ongoing" and f"{topic}-0" in described[1]
    producers = ok(kraft("transactions", "--bootstrap-server", b, "describe-producers",
                         "--topic", topic, "--partition", "0")).splitlines()  # fmt: skip
    start = [r.split()[5] for r in producers[1:] if r.split()[5] != "None"]
    assert start == ["0"], producers
    ok(kraft("transactions", "--bootstrap-server", b, "abort", "--topic", topic,
             "--partition", "0", "--start-offset", "0"))  # fmt: skip
    assert consume("read_committed") == ["after"]


def test_offsets_of_an_open_transaction_are_unstable_until_it_commits(
    cluster: ProcCluster,
) -> None:
    """Between send_offsets_to_transaction and the commit, OffsetFetch (raw, v8) shows
    no offset, and with require_stable answers UNSTABLE_OFFSET_COMMIT (88) for those
    partitions; after the commit marker they are the group's."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    src, group = "unstable-in", "unstable-group"
    create_topic(cluster, src)
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": group})
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": "unst-1"})
    producer.init_transactions(30)
    producer.begin_transaction()
    offsets = [TopicPartition(src, p, 5 + p) for p in range(PARTITIONS)]
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 30)

    def fetch(stable: bool) -> dict[int, tuple[int, int]]:
        from broker.group.config import partition_for

        coordinator = cluster.partitions("__consumer_offsets")
        assert coordinator is not None
        leader = coordinator[partition_for(group, 3)]["leader"]
        b = cluster.broker(leader)
        wanted = [{"name": src, "partition_indexes": list(range(PARTITIONS))}]
        body = {"groups": [{"group_id": group, "topics": wanted}], "require_stable": stable}
        with closing(RawClient(b.host, b.port)) as client:
            client.send(encode_request(9, 8, request(9, 8, body)))
            resp = decode_response(9, 8, client.recv_frame())[1]
        [t] = resp.groups[0].topics
        return {p.partition_index: (p.committed_offset, p.error_code) for p in t.partitions}

    try:
        assert fetch(False) == dict.fromkeys(range(PARTITIONS), (-1, 0))
        assert fetch(True) == dict.fromkeys(range(PARTITIONS), (-1, 88))
        producer.commit_transaction(30)
        want = {p: (5 + p, 0) for p in range(PARTITIONS)}
        wait_for(lambda: fetch(True) == want or None, 30, "the committed offsets", cluster.logs)
    finally:
        consumer.close()
