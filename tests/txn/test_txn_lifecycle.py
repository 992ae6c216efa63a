"""A transaction's life beyond commit and abort (issue 15), on one real cluster:

- a second producer with the same transactional.id fences the first: the first's next
  transaction fails with PRODUCER_FENCED (fatal) and its records never commit;
- a transaction left open past its transaction.timeout.ms is aborted by the coordinator
  (with an epoch bump, so its producer is fenced) and its records never appear under
  read_committed;
- a stuck-open transaction holds the last stable offset; `kraft transactions abort`
  (kafka-transactions' flags) writes its abort marker and releases it; `list` and
  `describe` show transactions as kafka-transactions does;
- a broker restart rebuilds the LSO and the aborted list from `.txnindex` and the producer
  snapshots, and again from the log alone after those files are corrupted.

Every wait is a condition under a deadline.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.cli import kraft, ok
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.txn_clients import consume_all, create_topic

PROPS = {
    # the coordinator looks for timed-out transactions often, so the test need not wait
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    "broker.session.timeout.ms": "6000",
    "broker.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    c = ProcCluster(tmp_path_factory.mktemp("txn-life") / "data", broker_props=PROPS,
                    controller_props={"broker.session.timeout.ms": "6000"})
    try:
        c.start()
        yield c
    finally:
        c.close()


def producer(c: ProcCluster, tid: str, **extra: Any) -> Any:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid, **extra})
    p.init_transactions(30)
    return p


def watermarks(c: ProcCluster, topic: str, isolation: str) -> int:
    """The end a consumer at `isolation` sees: the HW, or the LSO for read_committed."""
    from confluent_kafka import Consumer, TopicPartition

    cons = Consumer({"bootstrap.servers": c.bootstrap, "group.id": "wm",
                     "isolation.level": isolation})
    try:
        return cons.get_watermark_offsets(TopicPartition(topic, 0), 10)[1]
    finally:
        cons.close()


def test_a_second_producer_with_the_same_id_fences_the_first(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError, KafkaException

    c = cluster
    create_topic(c.bootstrap, "fence", 1, 3)
    first = producer(c, "fenced-id")
    first.begin_transaction()
    first.produce("fence", b"from-the-first")
    first.flush(30)
    second = producer(c, "fenced-id")  # bumps the epoch: the first's open txn is aborted
    second.begin_transaction()
    second.produce("fence", b"from-the-second")
    second.commit_transaction(30)
    with pytest.raises(KafkaException) as info:
        first.produce("fence", b"late")
        first.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal() and err.code() == KafkaError._FENCED, err
    assert [v for _, v in consume_all(c.bootstrap, "fence", "read_committed", 4)] == [
        b"from-the-second"]


def test_a_transaction_past_its_timeout_is_aborted(cluster: ProcCluster) -> None:
    c = cluster
    create_topic(c.bootstrap, "timeout", 1, 3)
    p = producer(c, "slow-id", **{"transaction.timeout.ms": "2000"})
    p.begin_transaction()
    p.produce("timeout", b"never-committed")
    p.flush(30)
    assert watermarks(c, "timeout", "read_committed") == 0  # the open txn holds the LSO
    # The coordinator aborts it: its marker makes the LSO reach the end (record + marker).
    wait_for(lambda: watermarks(c, "timeout", "read_committed") == 2, 30,
             "the timed-out transaction to be aborted", c.logs)
    assert consume_all(c.bootstrap, "timeout", "read_committed", 2) == []
    assert [v for _, v in consume_all(c.bootstrap, "timeout", "read_uncommitted", 2)] == [
        b"never-committed"]


def test_kraft_transactions_abort_releases_a_stuck_lso(cluster: ProcCluster) -> None:
    c = cluster
    create_topic(c.bootstrap, "stuck", 1, 3)
    done = producer(c, "ok-id")
    done.begin_transaction()
    done.produce("stuck", b"committed", partition=0)
    done.commit_transaction(30)  # offsets 0 (record) and 1 (marker)
    stuck = producer(c, "stuck-id", **{"transaction.timeout.ms": "900000"})
    stuck.begin_transaction()
    stuck.produce("stuck", b"stuck-1", partition=0)
    stuck.produce("stuck", b"stuck-2", partition=0)
    stuck.flush(30)  # offsets 2, 3: open
    assert watermarks(c, "stuck", "read_committed") == 2
    listed = ok(kraft("transactions", "--bootstrap-server", c.bootstrap, "list"))
    assert listed.splitlines()[0].split() == [
        "TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    rows = {line.split()[0]: line.split() for line in listed.splitlines()[1:]}
    assert rows["stuck-id"][3] == "Ongoing" and rows["ok-id"][3] == "CompleteCommit"
    described = ok(kraft("transactions", "--bootstrap-server", c.bootstrap, "describe",
                         "--transactional-id", "stuck-id"))
    assert "stuck-0" in described and "Ongoing" in described
    ok(kraft("transactions", "--bootstrap-server", c.bootstrap, "abort", "--topic", "stuck",
             "--partition", "0", "--start-offset", "2"))
    wait_for(lambda: watermarks(c, "stuck", "read_committed") == 5, 30,
             "the LSO to pass the aborted transaction", c.logs)
    assert [v for _, v in consume_all(c.bootstrap, "stuck", "read_committed", 5)] == [
        b"committed"]


def _txn_files(c: ProcCluster, topic: str) -> list[Path]:
    return [f for b in c.brokers for f in Path(b.data_dir).rglob(f"{topic}-0/*")
            if f.suffix in (".txnindex", ".snapshot")]


def test_a_restart_rebuilds_the_lso_and_aborted_list_even_from_corrupt_files(
    cluster: ProcCluster,
) -> None:
    c = cluster
    topic = "restart-txn"
    create_topic(c.bootstrap, topic, 1, 3, {"segment.bytes": "2048"})  # several segments
    p = producer(c, "restart-id")
    layout = []
    for i in range(6):
        commit = i % 2 == 0
        p.begin_transaction()
        for j in range(5):
            kind = b"c" if commit else b"a"
            p.produce(topic, b"%s-%d-%d" % (kind, i, j) + b"." * 200, partition=0)
        p.flush(30)
        (p.commit_transaction if commit else p.abort_transaction)(30)
        layout.append(commit)
    open_at = 6 * 6
    p.begin_transaction()
    p.produce(topic, b"open" + b"." * 200, partition=0)
    p.flush(30)
    end = open_at + 1
    want_committed = [o for i, commit in enumerate(layout) if commit
                      for o in range(i * 6, i * 6 + 5)]

    def committed_offsets() -> list[int]:
        return [o for o, _ in consume_all(c.bootstrap, topic, "read_committed", open_at)]

    assert watermarks(c, topic, "read_committed") == open_at
    assert committed_offsets() == want_committed
    for b in [b.node_id for b in c.brokers]:  # restart every replica, in turn, with the files
        state = c.cluster_state()
        assert state is not None
        c.kill_broker(b)
        c.restart_broker(b)
        c.wait_brokers_unfenced({b}, int(state["metadata_offset"]), 60)
    files = _txn_files(c, topic)
    assert any(f.suffix == ".txnindex" and f.stat().st_size for f in files), files
    assert any(f.suffix == ".snapshot" for f in files), files
    wait_for(lambda: watermarks(c, topic, "read_committed") == open_at, 60,
             "the LSO after restarts", c.logs)
    assert committed_offsets() == want_committed
    # Corrupt every .txnindex and .snapshot (while the brokers are down), restart again.
    for b in [b.node_id for b in c.brokers]:
        state = c.cluster_state()
        assert state is not None
        c.kill_broker(b)
        for f in _txn_files(c, topic):
            if str(f).startswith(str(Path(c.broker(b).data_dir))):
                f.write_bytes(b"\xff" * 7 + f.read_bytes()[7:])
        c.restart_broker(b)
        c.wait_brokers_unfenced({b}, int(state["metadata_offset"]), 60)
    wait_for(lambda: watermarks(c, topic, "read_committed") == open_at, 60,
             "the LSO after rebuilding from the log", c.logs)
    assert committed_offsets() == want_committed
    p.commit_transaction(30)
    wait_for(lambda: watermarks(c, topic, "read_committed") == end + 1, 30,
             "the LSO after the last commit", c.logs)
