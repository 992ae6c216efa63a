"""Authorization on a real cluster (issue 13): a controller and a broker as processes,
the broker with `authorizer.class.name` set, clients as User:ANONYMOUS on PLAINTEXT.

With `super.users=User:ANONYMOUS` the broker lets its clients do everything, and that
is how the state is set up and read. Restarted without it, the same clients are a
principal with no ACLs: every API the broker advertises must answer Kafka's
authorization error (or show nothing), and after a restart as super user again the
topics, their logs, the groups and their offsets are exactly as before.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
from kafka import KafkaConsumer
from kafka import TopicPartition as KTopicPartition
from kafka.errors import GroupAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

from broker.security.authorizer import STANDARD_AUTHORIZER
from common.acl import AclOperation
from common.properties import read_properties
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient
from tests.security.authz_refusals import ALL_TOPICS, Target, call, check_refused, cluster_view

BROKER_PROPS = {
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "num.partitions": "2",
    "default.replication.factor": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    "controlled.shutdown.timeout.ms": "3000",  # one broker: no one to hand leaders to
}
SUPER_USER = "User:ANONYMOUS"


def _bits(*ops: AclOperation) -> int:
    return sum(1 << op for op in ops)


Op = AclOperation
# What Kafka reports a super user may do (AclEntry.supportedOperations per type).
ALL_TOPIC_OPS = _bits(Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
                      Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)  # fmt: skip
ALL_GROUP_OPS = _bits(Op.READ, Op.DELETE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS)
ALL_CLUSTER_OPS = _bits(Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION,
                        Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS, Op.IDEMPOTENT_WRITE)  # fmt: skip
RECORDS = {0: 5, 1: 3}  # records produced to each partition of the topic


class AuthzCluster:
    """The cluster, and which principal its one broker treats as super user."""

    def __init__(self, procs: ProcCluster) -> None:
        self.procs = procs
        self.broker = procs.brokers[0]
        self.super_user = True

    @property
    def bootstrap(self) -> str:
        return self.broker.address

    def raw(self) -> contextlib.closing[RawClient]:
        return contextlib.closing(RawClient(self.broker.host, self.broker.port, timeout=15))

    def become(self, *, super_user: bool) -> None:
        """Restart the broker (cleanly) with or without `super.users`."""
        if super_user == self.super_user:
            return
        state = self.procs.cluster_state()
        assert state is not None
        after = int(state["metadata_offset"])
        self.broker.terminate()
        self.broker.wait_stopped(time.monotonic() + 60)
        props = read_properties(self.broker.properties_path)
        props.pop("super.users", None)
        if super_user:
            props["super.users"] = SUPER_USER
        self.broker.write_properties(props)
        self.broker.start()
        self.procs.wait_brokers_unfenced({self.broker.node_id}, after, 60)
        self.super_user = super_user

    def target(self) -> Target:
        with self.raw() as c:
            md = call(c, 3, 12, ALL_TOPICS)
        ids = {t.name: t.topic_id for t in md.topics}
        return Target("t", ids["t"], "doomed", "g", self.broker.node_id)


def _client(bootstrap: str, **conf: Any) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10000, **conf}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthzCluster]:
    procs = ProcCluster(
        tmp_path_factory.mktemp("authz"),
        n_controllers=1,
        n_brokers=1,
        broker_props={**BROKER_PROPS, "super.users": SUPER_USER},
    )
    with procs:
        procs.start()
        c = AuthzCluster(procs)
        _set_up(c.bootstrap)
        yield c


def _set_up(bootstrap: str) -> None:
    """As super user: topics `t` (with records) and `doomed`, group `g` (Empty, with
    committed offsets)."""
    admin = AdminClient(_client(bootstrap))
    for f in admin.create_topics([NewTopic("t", 2, 1), NewTopic("doomed", 1, 1)]).values():
        f.result(30)
    _produce(bootstrap, "t")
    assert _consume_and_commit(bootstrap, "t", "g") == sum(RECORDS.values())


def _produce(bootstrap: str, topic: str) -> None:
    """RECORDS to the topic's partitions, idempotently (InitProducerId too)."""
    failed: list[KafkaError] = []
    producer = Producer(_client(bootstrap, acks="all", **{"enable.idempotence": True}))
    for p, n in RECORDS.items():
        for i in range(n):
            producer.produce(topic, f"v{i}".encode(), partition=p,
                             on_delivery=lambda e, _m: e and failed.append(e))  # fmt: skip
    assert producer.flush(30) == 0 and not failed, failed


def _consume_and_commit(bootstrap: str, topic: str, group: str) -> int:
    conf = _client(bootstrap, **{"group.id": group, "auto.offset.reset": "earliest",
                                 "enable.auto.commit": False})  # fmt: skip
    consumer = Consumer(conf)
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < sum(RECORDS.values()):
            assert time.monotonic() < deadline, f"consumed {got} records"
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got += 1
        consumer.commit(asynchronous=False)
        return got
    finally:
        consumer.close()


def snapshot(c: AuthzCluster) -> dict[str, Any] | None:
    """What a super user sees (None while the restarted broker still settles)."""
    with c.raw() as client:
        return cluster_view([client])


def settled_snapshot(c: AuthzCluster) -> dict[str, Any]:
    return wait_for(lambda: snapshot(c), 60, "a super user's view of the cluster", c.procs.logs)


# -- as super user ---------------------------------------------------------------------------


def test_a_super_user_can_do_everything(cluster: AuthzCluster) -> None:
    cluster.become(super_user=True)
    before = settled_snapshot(cluster)
    assert before["groups"]["g"] == ("Empty", [], {("t", 0): 5, ("t", 1): 3})
    admin = AdminClient(_client(cluster.bootstrap))
    admin.create_topics([NewTopic("scratch", 2, 1)])["scratch"].result(30)
    _produce(cluster.bootstrap, "scratch")
    assert _consume_and_commit(cluster.bootstrap, "scratch", "scratch-g") == 8
    admin.create_partitions([NewPartitions("scratch", 3)])["scratch"].result(30)
    admin.delete_consumer_groups(["scratch-g"])["scratch-g"].result(30)
    admin.delete_topics(["scratch"])["scratch"].result(30)
    with cluster.raw() as c:  # every operation shows in the authorized-operations fields
        flags = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": True,
                 "include_cluster_authorized_operations": True}  # fmt: skip
        md = call(c, 3, 10, {"topics": [{"name": "t", "topic_id": None}], **flags})
        assert [(t.name, t.topic_authorized_operations) for t in md.topics] == [
            ("t", ALL_TOPIC_OPS)
        ]
        assert md.cluster_authorized_operations == ALL_CLUSTER_OPS
        resp = call(c, 15, 5, {"groups": ["g"], "include_authorized_operations": True})
        assert resp.groups[0].authorized_operations == ALL_GROUP_OPS


# -- with no ACLs ----------------------------------------------------------------------------


def test_no_acls_every_api_refuses_and_nothing_changes(cluster: AuthzCluster) -> None:
    cluster.become(super_user=True)
    before = settled_snapshot(cluster)
    target = cluster.target()
    cluster.become(super_user=False)
    with cluster.raw() as c:
        resp = call(c, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
        assert resp.error_code == 0  # ApiVersions needs no authorization
        advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        check_refused(c, advertised, target)
    _real_clients_are_refused(cluster.bootstrap, target)
    cluster.become(super_user=True)
    assert settled_snapshot(cluster) == before


def _real_clients_are_refused(bootstrap: str, t: Target) -> None:
    """Real clients see the same errors: produce, join group, offset commit, create and
    delete topics. (A topic the principal may not describe has no leader for a client
    to fetch from: the raw Fetch of `check_refused` is what shows that refusal.)"""
    errors: list[KafkaError] = []
    producer = Producer(_client(bootstrap, **{"message.timeout.ms": 15000}))
    producer.produce(t.topic, b"no", partition=0, on_delivery=lambda e, _m: errors.append(e))
    producer.flush(30)
    assert [e.code() for e in errors] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]

    # kafka-python commits where librdkafka waits for a coordinator it is refused.
    committer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=t.group,
                              enable_auto_commit=False, request_timeout_ms=15000)  # fmt: skip
    try:
        tp = KTopicPartition(t.topic, 0)
        committer.assign([tp])
        with pytest.raises(GroupAuthorizationFailedError):
            committer.commit({tp: OffsetAndMetadata(1, "", -1)})
    finally:
        committer.close()
    conf = _client(bootstrap, **{"group.id": t.group, "enable.auto.commit": False})
    consumer = Consumer(conf)
    try:
        consumer.subscribe([t.topic])
        assert _sees_error(consumer, KafkaError.GROUP_AUTHORIZATION_FAILED)  # join
    finally:
        consumer.close()

    admin = AdminClient(_client(bootstrap))
    for future in (
        admin.create_topics([NewTopic("never-created", 1, 1)])["never-created"],
        admin.delete_topics([t.doomed])[t.doomed],
    ):
        with pytest.raises(KafkaException) as exc:
            future.result(30)
        assert exc.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def _sees_error(consumer: Consumer, wanted: int) -> bool:
    """Poll until the consumer reports `wanted`; no record may arrive meanwhile, and
    the only other errors allowed are authorization errors (librdkafka reports the
    group's and the topic's, in its own order)."""
    refusals = {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is None:
            continue
        assert m.error() is not None, "a record was delivered"
        code = int(m.error().code())
        if code == wanted:
            return True
        assert code in refusals, m.error()
    return False


# -- configuration ---------------------------------------------------------------------------


def test_an_unknown_authorizer_stops_start_up(tmp_path: Path) -> None:
    props = tmp_path / "broker.properties"
    props.write_text(
        "process.roles=broker\nnode.id=1\nlisteners=PLAINTEXT://127.0.0.1:0\n"
        f"log.dirs={tmp_path / 'logs'}\ncontroller.quorum.http.endpoints=1@127.0.0.1:1\n"
        "authorizer.class.name=com.example.NotAnAuthorizer\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "broker.main", "--config", str(props)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2, run.stderr
    assert "authorizer.class.name" in run.stderr and STANDARD_AUTHORIZER in run.stderr
