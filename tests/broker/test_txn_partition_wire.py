"""Transactional partitions over the wire, by raw protocol against real broker
processes (1 controller, 3 brokers): transactional batches produced by hand for two
producer ids, a COMMIT and an ABORT marker written with WriteTxnMarkers, then Fetch
with read_committed stops at the LSO and lists the aborted transaction while
read_uncommitted returns everything; ListOffsets and DescribeProducers answer by the
transaction state; and a new leader (the old one SIGKILLed) answers read_committed
with the same aborted list, from the transaction index its follower side wrote.

No transaction coordinator is involved: plain producer ids from InitProducerId stand
in for the coordinator's, and the test plays the coordinator's part with WriteTxnMarkers.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from common.errors import Errors
from storage.record_batch import iter_batches
from storage.records import Record, build_batch
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, fetch, produce, request

TOPIC = "txn-wire"
TXN_ID = "wire-txn"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(
        Path(tmp_path_factory.mktemp("txnwire")),
        n_controllers=1,
        n_brokers=3,
        controller_props={"auto.leader.rebalance.enable": "false"},
        # raw transactional batches with no coordinator behind them: KIP-890's
        # verification (on by default now that a coordinator exists) is switched off
        broker_props={
            "replica.lag.time.max.ms": "1500",
            "transaction.partition.verification.enable": "false",
        },
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


def raw_to(c: ProcCluster, broker: int) -> RawClient:
    b = c.broker(broker)
    return RawClient(b.host, b.port)


def leader_of(c: ProcCluster) -> int:
    parts = c.partitions(TOPIC)
    assert parts is not None
    return int(parts[0]["leader"])


def create_topic(c: ProcCluster) -> None:
    ids = [b.node_id for b in c.brokers]
    with closing(raw_to(c, ids[0])) as raw:
        topics = [{"name": TOPIC, "num_partitions": -1, "replication_factor": -1,
                   "assignments": [{"partition_index": 0, "broker_ids": ids}],
                   "configs": []}]  # fmt: skip
        resp = raw.call(19, 7, request(19, 7, {"topics": topics, "timeout": 30000,
                                               "validate_only": False}))  # fmt: skip
        assert resp.topics[0].error_code == 0, resp

    def ready() -> bool:
        parts = c.partitions(TOPIC)
        return bool(parts) and parts[0]["leader"] >= 0 and len(parts[0]["isr"]) == 3

    wait_for(ready, 30, f"{TOPIC} led with a full ISR", c.logs)


def init_producer_id(raw: RawClient) -> int:
    data = {"transactional_id": None, "transaction_timeout": 60000,
            "producer_id": -1, "producer_epoch": -1}  # fmt: skip
    resp = raw.call(22, 4, request(22, 4, data))
    assert resp.error_code == 0
    return int(resp.producer_id)


def txn_records(pid: int, *values: bytes, seq: int = 0) -> bytes:
    return build_batch(
        [Record(key=b"k", value=v) for v in values],
        producer_id=pid,
        producer_epoch=0,
        base_sequence=seq,
        is_transactional=True,
    )


def produce_txn(raw: RawClient, records: bytes) -> Any:
    req = dataclasses.replace(produce(TOPIC, 0, records, acks=-1), transactional_id=TXN_ID)
    return raw.call(0, 9, req).responses[0].partition_responses[0]


def write_markers(raw: RawClient, markers: list[tuple[int, bool]]) -> list[int]:
    data = {"markers": [
        {"producer_id": pid, "producer_epoch": 0, "transaction_result": commit,
         "topics": [{"name": TOPIC, "partition_indexes": [0]}], "coordinator_epoch": 3}
        for pid, commit in markers
    ]}  # fmt: skip
    resp = raw.call(27, 1, request(27, 1, data))
    return [p.error_code for m in resp.markers for t in m.topics for p in t.partitions]


def fetch_at(raw: RawClient, isolation: int) -> Any:
    req = dataclasses.replace(fetch([(TOPIC, 0, 0, 1 << 20)]), isolation_level=isolation)
    return raw.call(1, 12, req).responses[0].partitions[0]


def batches(records: bytes) -> list[tuple[bool, int, int]]:
    """(is control, producer id, base offset) of each whole batch."""
    return [(b.is_control, b.producer_id, b.base_offset) for b in iter_batches(records)]


def list_latest(raw: RawClient, isolation: int) -> int:
    parts = [{"partition_index": 0, "timestamp": -1, "current_leader_epoch": -1}]
    data = {"replica_id": -1, "isolation_level": isolation,
            "topics": [{"name": TOPIC, "partitions": parts}]}  # fmt: skip
    resp = raw.call(2, 7, request(2, 7, data))
    p = resp.topics[0].partitions[0]
    assert p.error_code == 0
    return int(p.offset)


def consume(c: ProcCluster, isolation: str, n: int) -> list[tuple[int, bytes]]:
    """The first `n` records a confluent-kafka consumer gets from offset 0."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": c.bootstrap, "group.id": f"txn-wire-{isolation}",
                         "enable.auto.commit": False, "isolation.level": isolation})  # fmt: skip
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        out: list[tuple[int, bytes]] = []
        deadline = time.monotonic() + 30
        while len(out) < n:
            assert time.monotonic() < deadline, f"{isolation}: only {out}"
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset(), msg.value()))
        return out
    finally:
        consumer.close()


def test_markers_read_committed_and_a_new_leader(cluster: ProcCluster) -> None:
    create_topic(cluster)
    leader = leader_of(cluster)
    with closing(raw_to(cluster, leader)) as raw:
        aborted_pid, committed_pid = init_producer_id(raw), init_producer_id(raw)
        assert produce_txn(raw, txn_records(aborted_pid, b"a0", b"a1")).error_code == 0
        assert produce_txn(raw, txn_records(committed_pid, b"c0")).error_code == 0
        # Transactional records without a transactional id: refused, as Kafka.
        plain = raw.call(0, 9, produce(TOPIC, 0, txn_records(committed_pid, b"x", seq=1)))
        code = plain.responses[0].partition_responses[0].error_code
        assert code == Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        # One producer per request (Kafka's INVALID_PRODUCER_ID_MAPPING), for every
        # partition, nothing appended.
        two = {"transactional_id": TXN_ID, "acks": -1, "timeout": 5000, "topic_data": [
            {"name": n, "partition_data": [{"index": 0, "records": txn_records(pid, b"y")}]}
            for n, pid in ((TOPIC, aborted_pid), ("elsewhere", committed_pid))]}  # fmt: skip
        resp = raw.call(0, 9, request(0, 9, two))
        assert [p.error_code for t in resp.responses for p in t.partition_responses] == [
            Errors.INVALID_PRODUCER_ID_MAPPING
        ] * 2
        open_ = fetch_at(raw, 1)
        assert (open_.high_watermark, open_.last_stable_offset, open_.records) == (3, 0, b"")
        assert open_.aborted_transactions == ()
        assert list_latest(raw, 1) == 0 and list_latest(raw, 0) == 3
        described = raw.call(61, 0, request(61, 0, {"topics": [
            {"name": TOPIC, "partition_indexes": [0]}]}))  # fmt: skip
        states = {s.producer_id: s for s in described.topics[0].partitions[0].active_producers}
        assert states[aborted_pid].current_txn_start_offset == 0
        assert states[committed_pid].current_txn_start_offset == 2

        assert write_markers(raw, [(aborted_pid, False), (committed_pid, True)]) == [0, 0]
        committed = fetch_at(raw, 1)
        assert (committed.high_watermark, committed.last_stable_offset) == (5, 5)
        assert [(a.producer_id, a.first_offset) for a in committed.aborted_transactions] == [
            (aborted_pid, 0)
        ]
        assert batches(committed.records) == [
            (False, aborted_pid, 0), (False, committed_pid, 2),
            (True, aborted_pid, 3), (True, committed_pid, 4),
        ]  # fmt: skip
        uncommitted = fetch_at(raw, 0)
        assert uncommitted.aborted_transactions is None
        assert uncommitted.records == committed.records
        assert list_latest(raw, 1) == 5
        described = raw.call(61, 0, request(61, 0, {"topics": [
            {"name": TOPIC, "partition_indexes": [0]}]}))  # fmt: skip
        states = {s.producer_id: s for s in described.topics[0].partitions[0].active_producers}
        assert states[committed_pid].coordinator_epoch == 3
        assert states[committed_pid].current_txn_start_offset == -1
        # A zombie coordinator (older epoch) is fenced.
        stale = request(
            27,
            1,
            {
                "markers": [
                    {
                        "producer_id": committed_pid,
                        "producer_epoch": 0,
                        "transaction_result": True,
                        "topics": [{"name": TOPIC, "partition_indexes": [0]}],
                        "coordinator_epoch": 2,
                    }
                ]
            },
        )
        codes = [p.error_code for m in raw.call(27, 1, stale).markers
                 for t in m.topics for p in t.partitions]  # fmt: skip
        assert codes == [Errors.TRANSACTION_COORDINATOR_FENCED]

    # librdkafka reads our aborted list: read_committed skips a0, a1 (its first record is
    # c0 at 2, records come in order), read_uncommitted gets all three.
    assert consume(cluster, "read_committed", 1) == [(2, b"c0")]
    assert consume(cluster, "read_uncommitted", 3) == [(0, b"a0"), (1, b"a1"), (2, b"c0")]

    # The followers completed the transactions and indexed the abort themselves.
    cluster.kill_broker(leader)

    def new_leader() -> int | None:
        parts = cluster.partitions(TOPIC)
        if not parts or parts[0]["leader"] in (-1, leader):
            return None
        return int(parts[0]["leader"])

    successor = wait_for(new_leader, 30, "a new leader", cluster.logs)
    assert successor is not None

    def answer() -> Any:
        with closing(raw_to(cluster, successor)) as raw:
            got = fetch_at(raw, 1)
        return got if got.error_code == 0 and got.high_watermark == 5 else None

    again = wait_for(answer, 30, "read_committed from the new leader", cluster.logs)
    assert again.last_stable_offset == 5
    assert [(a.producer_id, a.first_offset) for a in again.aborted_transactions] == [
        (aborted_pid, 0)
    ]
    cluster.restart_broker(leader)
