"""The transaction coordinator end to end: confluent-kafka's transactional producer
against a real cluster (1 controller, 3 brokers as processes, RF 3 topics): a timeout
above transaction.max.timeout.ms, the coordinator's broker killed mid-transaction (the
new coordinator loads it from __transaction_state and the producer commits there), and
KIP-890 verification refusing a partition the transaction never added. The
coordinator's state is read back with raw FindCoordinator (key type 1) and
DescribeTransactions / ListTransactions requests. (Commit/abort with three clients,
fencing and timeouts: tests/txn/test_txn_clients.py and test_txn_lifecycle.py.)

What read_committed consumers see is decided by a committed "sentinel" transaction
produced last: once a read_committed consumer reaches it, everything before it has been
decided, so the test never waits for "no more records".
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from common.errors import Errors
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, decode_response, encode_request, request

TOPIC = "txn-e2e"
PARTITIONS = 3
BROKER_PROPS = {
    "replica.lag.time.max.ms": "1500",
    "transaction.state.log.num.partitions": "3",
    # timed-out transactions are looked for every 500 ms (Kafka: 10 s)
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(
        Path(tmp_path_factory.mktemp("txn")), n_controllers=1, broker_props=BROKER_PROPS
    )
    try:
        c.start()
        _create_topic(c)
        yield c
    finally:
        c.close()


def _create_topic(c: ProcCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])[TOPIC].result(30)

    def ready() -> bool:
        parts = c.partitions(TOPIC)
        return (
            parts is not None
            and len(parts) == PARTITIONS
            and all(p["leader"] >= 0 and len(p["isr"]) == 3 for p in parts.values())
        )

    wait_for(ready, 30, f"{TOPIC} with full ISRs", c.logs)


def producer(c: ProcCluster, tid: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    live = ",".join(f"{b.host}:{b.port}" for b in c.brokers if b.running)
    return Producer({"bootstrap.servers": live, "transactional.id": tid, **extra})


def send(p: Any, values: list[bytes]) -> None:
    for i, v in enumerate(values):
        p.produce(TOPIC, value=v, partition=i % PARTITIONS)
    assert p.flush(30) == 0


def read_until_sentinel(c: ProcCluster, isolation: str, sentinel: bytes) -> list[bytes]:
    """Every record value before (and not counting) the sentinel, in all partitions."""
    from confluent_kafka import Consumer, TopicPartition

    live = ",".join(f"{b.host}:{b.port}" for b in c.brokers if b.running)
    consumer = Consumer({
        "bootstrap.servers": live, "group.id": f"g-{isolation}-{sentinel.decode()}",
        "isolation.level": isolation, "enable.auto.commit": False,
    })  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        seen: list[bytes] = []
        done: set[int] = set()  # partitions whose sentinel was read
        deadline = time.monotonic() + 60
        while len(done) < PARTITIONS:
            assert time.monotonic() < deadline, f"no sentinel for {isolation}; saw {seen}"
            m = consumer.poll(0.5)
            if m is None or m.error() is not None or m.partition() in done:
                continue
            if m.value() == sentinel:
                done.add(m.partition())
            else:
                seen.append(m.value())
        return [v for v in seen if not v.startswith(b"sentinel")]
    finally:
        consumer.close()


def commit_sentinel(c: ProcCluster, name: str) -> bytes:
    """A committed transaction with one record on every partition."""
    value = b"sentinel-" + name.encode()
    p = producer(c, f"sentinel-{name}")
    p.init_transactions(30)
    p.begin_transaction()
    for part in range(PARTITIONS):
        p.produce(TOPIC, value=value, partition=part)
    p.commit_transaction(30)
    return value


def raw(c: ProcCluster, api_key: int, version: int, body: Any, node: int) -> Any:
    """One request (plain data, or a kio entity) to broker `node`, its answer."""
    b = c.broker(node)
    req = request(api_key, version, body) if isinstance(body, dict) else body
    with closing(RawClient(b.host, b.port)) as client:
        client.send(encode_request(api_key, version, req))
        return decode_response(api_key, version, client.recv_frame())[1]


def coordinator_of(c: ProcCluster, tid: str) -> int:
    def probe() -> int | None:
        via = next(b.node_id for b in c.brokers if b.running)
        r = raw(c, 10, 4, {"key_type": 1, "coordinator_keys": [tid]}, via)
        found = r.coordinators[0]
        return int(found.node_id) if found.error_code == Errors.NONE else None

    return wait_for(probe, 30, f"the coordinator of {tid}", c.logs)


def describe(c: ProcCluster, tid: str) -> Any:
    r = raw(c, 65, 0, {"transactional_ids": [tid]}, coordinator_of(c, tid))
    return r.transaction_states[0]


def in_state(c: ProcCluster, tid: str, state: str) -> Any:
    d = describe(c, tid)
    return d if d.transaction_state == state else None


# -- tests -----------------------------------------------------------------------------------


def test_invalid_transaction_timeout(cluster: ProcCluster) -> None:
    tid = "tx-too-long"
    node = coordinator_of(cluster, tid)
    body = {"transactional_id": tid, "transaction_timeout": 900_001, "producer_id": -1,
            "producer_epoch": -1}  # fmt: skip
    assert raw(cluster, 22, 4, body, node).error_code == Errors.INVALID_TRANSACTION_TIMEOUT


def test_coordinator_failover_mid_transaction(cluster: ProcCluster) -> None:
    """SIGKILL the coordinator while a transaction is open: the new leader of its
    __transaction_state partition loads it, the producer commits there, and the state
    (producer id, epoch) carries on from the log."""
    tid = "tx-failover"
    p = producer(cluster, tid)
    p.init_transactions(60)
    p.begin_transaction()
    send(p, [b"before-%d" % i for i in range(3)])
    old = coordinator_of(cluster, tid)
    pid = describe(cluster, tid).producer_id
    cluster.kill_broker(old)
    try:
        new = wait_for(
            lambda: (n := coordinator_of(cluster, tid)) != old and n, 60, "a new coordinator",
            cluster.logs,
        )  # fmt: skip
        d = describe(cluster, tid)
        assert (d.transaction_state, d.producer_id, d.producer_epoch) == ("Ongoing", pid, 0)
        send(p, [b"after-%d" % i for i in range(3)])
        p.commit_transaction(60)
        d = wait_for(lambda: in_state(cluster, tid, "CompleteCommit"), 60, "commit", cluster.logs)
        assert (d.producer_id, d.producer_epoch, new) == (pid, 0, coordinator_of(cluster, tid))
        sentinel = commit_sentinel(cluster, "d")
        seen = read_until_sentinel(cluster, "read_committed", sentinel)
        assert sorted(v for v in seen if v.startswith((b"before", b"after"))) == sorted(
            [b"before-%d" % i for i in range(3)] + [b"after-%d" % i for i in range(3)]
        )
        again = producer(cluster, tid)
        again.init_transactions(60)  # the loaded state's epoch, bumped: not a fresh id
        again.begin_transaction()
        send(again, [b"again"])
        again.commit_transaction(60)
        d = wait_for(lambda: in_state(cluster, tid, "CompleteCommit"), 30, "second commit")
        assert (d.producer_id, d.producer_epoch) == (pid, 1)
    finally:
        cluster.restart_broker(old)


def test_kip890_verification_refuses_a_partition_not_added(cluster: ProcCluster) -> None:
    """A transactional batch for a partition the transaction never added is refused by
    its leader after asking the coordinator (itself or, over the inter-broker
    listener, another broker); once added it is taken. Every partition, so both the
    local and the remote question are asked (the leaders differ)."""
    import dataclasses

    from storage.records import Record, build_batch
    from tests.harness.raw_protocol import produce

    tid = "tx-verify"
    node = coordinator_of(cluster, tid)
    init = {"transactional_id": tid, "transaction_timeout": 60_000, "producer_id": -1,
            "producer_epoch": -1}  # fmt: skip
    r = raw(cluster, 22, 4, init, node)
    assert r.error_code == Errors.NONE
    pid, epoch = int(r.producer_id), int(r.producer_epoch)
    parts = cluster.partitions(TOPIC)
    assert parts is not None
    leaders = {p: int(parts[p]["leader"]) for p in range(PARTITIONS)}

    def produce_to(p: int, seq: int) -> int:
        batch = build_batch([Record(value=b"v")], producer_id=pid, producer_epoch=epoch,
                            base_sequence=seq, is_transactional=True)  # fmt: skip
        req = dataclasses.replace(produce(TOPIC, p, batch, acks=-1), transactional_id=tid)
        return int(raw(cluster, 0, 9, req, leaders[p]).responses[0].partition_responses[0]
                   .error_code)  # fmt: skip

    refused = {p: produce_to(p, 0) for p in range(PARTITIONS)}
    assert refused == dict.fromkeys(range(PARTITIONS), Errors.INVALID_TXN_STATE), refused
    add = {
        "v3_and_below_transactional_id": tid,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": TOPIC, "partitions": list(range(PARTITIONS))}],
    }
    added = raw(cluster, 24, 3, add, node)
    assert [x.partition_error_code for t in added.results_by_topic_v3_and_below
            for x in t.results_by_partition] == [Errors.NONE] * PARTITIONS  # fmt: skip
    assert {p: produce_to(p, 0) for p in range(PARTITIONS)} == dict.fromkeys(
        range(PARTITIONS), Errors.NONE
    )
    end = {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
           "committed": False}  # fmt: skip
    assert raw(cluster, 26, 3, end, node).error_code == Errors.NONE
