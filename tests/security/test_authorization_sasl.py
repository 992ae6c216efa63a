"""Authorization of SASL principals on a real cluster (issue 13): one controller and two
brokers as processes, clients on a SASL_PLAINTEXT listener with PLAIN users, the
inter-broker listener as User:broker (a super user, as Kafka's brokers usually are).

- carol has no ACLs: every API the brokers advertise refuses her, and what the super
  user `admin` sees of topics, logs, groups and offsets stays as it was;
- after `kraft acls --add` for the prefix `alice-`, alice produces and consumes those
  topics only, on every broker within 1 s, and sees only them (Metadata, ListGroups);
- a DENY beats her prefixed ALLOW; removing the ALLOW refuses her again within 1 s;
- dave's narrow grants answer request by request as Kafka's handlers do (a refused topic
  beside an allowed one, WRITE without READ, auto-creation needing CREATE, offsets
  hidden from a principal that may not describe their topic, authorized operations);
- the super user does everything.

The tests share the cluster and run in file order; every wait is a condition under a
deadline.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from broker.security.authorizer import STANDARD_AUTHORIZER
from common.api_keys import ApiKey
from common.errors import Errors
from tests.harness.cli import kraft, ok
from tests.harness.cluster_procs import wait_for
from tests.harness.raw_protocol import RawClient, batch, request
from tests.harness.raw_protocol import produce as raw_produce
from tests.security.authz_refusals import ALL_TOPICS, Target, call, check_refused, cluster_view
from tests.security.secure_cluster import PLAIN_MODULE, SecureCluster, plain_jaas

USERS = {"admin": "admin-secret", "alice": "alice-secret", "carol": "carol-secret",
         "dave": "dave-secret"}  # fmt: skip
BROKER_PROPS = {
    "sasl.enabled.mechanisms": "PLAIN",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "sasl.jaas.config": plain_jaas(**USERS),
    "authorizer.class.name": STANDARD_AUTHORIZER,
    "super.users": "User:broker;User:admin",
    "num.partitions": "2",
    "default.replication.factor": "2",
    "min.insync.replicas": "1",
    "offsets.topic.replication.factor": "2",
    "offsets.topic.num.partitions": "2",
    "group.initial.rebalance.delay.ms": "0",
}
WITHIN_S = 1.0  # ACL changes reach every broker within this
RECORDS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    with SecureCluster(
        tmp_path_factory.mktemp("authz-sasl"),
        client_protocol="SASL_PLAINTEXT",
        internal_protocol="SASL_PLAINTEXT",
        broker_props=BROKER_PROPS,
        n_brokers=2,
    ) as c:
        c.start()
        _set_up(c.bootstrap)
        yield c


def conf(bootstrap: str, user: str, **more: Any) -> dict[str, Any]:
    """confluent-kafka settings for `user` over SASL_PLAINTEXT with PLAIN."""
    return {"bootstrap.servers": bootstrap, "security.protocol": "sasl_plaintext",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": USERS[user],
            "socket.timeout.ms": 10000, **more}  # fmt: skip


@contextlib.contextmanager
def logged_in(address: str, user: str) -> Iterator[RawClient]:
    """A raw connection, logged in as `user` (SaslHandshake v1, SaslAuthenticate v2)."""
    host, port = address.rsplit(":", 1)
    client = RawClient(host, int(port), timeout=15)
    try:
        hs = client.call(17, 1, request(17, 1, {"mechanism": "PLAIN"}))
        assert hs.error_code == 0, hs
        token = b"\0%s\0%s" % (user.encode(), USERS[user].encode())
        auth = client.call(36, 2, request(36, 2, {"auth_bytes": token}))
        assert auth.error_code == 0, auth
        yield client
    finally:
        client.close()


def produce(bootstrap: str, user: str, topic: str, n: int = RECORDS) -> list[KafkaError]:
    """Idempotent produce (InitProducerId too); the delivery errors."""
    errors: list[KafkaError] = []
    producer = Producer(
        conf(
            bootstrap, user, acks="all", **{"enable.idempotence": True, "message.timeout.ms": 15000}
        )
    )
    for i in range(n):
        producer.produce(topic, b"v%d" % i, on_delivery=lambda e, _m: e and errors.append(e))
    assert producer.flush(30) == 0
    return errors


def consume(bootstrap: str, user: str, topic: str, group: str, n: int = RECORDS) -> int:
    """Subscribe in `group`, read `n` records, commit; raises on a consumer error."""
    consumer = Consumer(
        conf(
            bootstrap,
            user,
            **{"group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest"},
        )
    )
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < n:
            assert time.monotonic() < deadline, f"read {got} of {n}"
            m = consumer.poll(0.5)
            if m is not None:
                if m.error():
                    raise RuntimeError(m.error())
                got += 1
        consumer.commit(asynchronous=False)
        return got
    finally:
        consumer.close()


def _set_up(bootstrap: str) -> None:
    """As admin: topics `t` (with records) and `doomed`; group `g`, Empty with offsets."""
    admin = AdminClient(conf(bootstrap, "admin"))
    for f in admin.create_topics([NewTopic("t", 2, 2), NewTopic("doomed", 1, 2)]).values():
        f.result(30)
    assert produce(bootstrap, "admin", "t") == []
    assert consume(bootstrap, "admin", "t", "g") == RECORDS


def view(c: SecureCluster) -> dict[str, Any]:
    """What admin sees, through every broker."""

    def probe() -> dict[str, Any] | None:
        with contextlib.ExitStack() as stack:
            clients = [stack.enter_context(logged_in(b.address, "admin")) for b in c.brokers]
            return cluster_view(clients)

    return wait_for(probe, 60, "admin's view of the cluster", c.logs)


def took_effect_everywhere(
    c: SecureCluster, user: str, probe: Callable[[RawClient], bool]
) -> float:
    """Seconds until `probe` (on a connection as `user`) is true on every broker."""
    started = time.monotonic()
    pending = list(c.brokers)
    while pending:
        assert time.monotonic() - started < 10, "no broker took the change in 10 s"
        for b in list(pending):
            with logged_in(b.address, user) as client:
                if probe(client):
                    pending.remove(b)
    return time.monotonic() - started


def describes_group(client: RawClient, group: str) -> bool:
    """DescribeGroups: refused (no DESCRIBE) or answered (NONE, or NOT_COORDINATOR from
    a broker that does not coordinate the group). It changes nothing."""
    resp = call(client, 15, 5, {"groups": [group], "include_authorized_operations": False})
    return resp.groups[0].error_code != Errors.GROUP_AUTHORIZATION_FAILED


def describes_alice_group(client: RawClient) -> bool:
    return describes_group(client, "alice-probe")


# -- no ACLs ---------------------------------------------------------------------------------


def test_a_principal_with_no_acls_is_refused_everything_and_changes_nothing(
    cluster: SecureCluster,
) -> None:
    before = view(cluster)
    assert before["groups"]["g"][0] == "Empty"
    with logged_in(cluster.brokers[0].address, "admin") as admin:
        md = call(admin, 3, 12, ALL_TOPICS)
    ids = {t.name: t.topic_id for t in md.topics}
    for b in cluster.brokers:
        target = Target("t", ids["t"], "doomed", "g", b.node_id)
        with logged_in(b.address, "carol") as carol:
            resp = call(carol, 18, 3, {"client_software_name": "t", "client_software_version": "1"})
            advertised = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            assert ApiKey.SASL_AUTHENTICATE in advertised
            check_refused(carol, advertised, target)
    assert view(cluster) == before


# -- prefixed ACLs ---------------------------------------------------------------------------


def test_a_prefixed_acl_lets_alice_use_her_topics_only(
    cluster: SecureCluster, tmp_path: Path
) -> None:
    for b in cluster.brokers:
        with logged_in(b.address, "alice") as client:
            assert not describes_alice_group(client)
    command_config = tmp_path / "admin.properties"
    command_config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f'sasl.jaas.config={PLAIN_MODULE} required username="admin" '
        f'password="{USERS["admin"]}";\n'
    )
    ok(kraft("acls", "--bootstrap-server", cluster.bootstrap, "--command-config",
             str(command_config), "--add", "--allow-principal", "User:alice",
             "--operation", "All", "--topic", "alice-", "--group", "alice-",
             "--resource-pattern-type", "prefixed"))  # fmt: skip
    took = took_effect_everywhere(cluster, "alice", describes_alice_group)
    assert took <= WITHIN_S, f"the ACL reached every broker after {took:.2f} s"

    # Her topics: created, written (idempotently: WRITE on some topic is enough, KIP-679),
    # read in her group.
    admin = AdminClient(conf(cluster.bootstrap, "alice"))
    admin.create_topics([NewTopic("alice-orders", 2, 2)])["alice-orders"].result(30)
    assert produce(cluster.bootstrap, "alice", "alice-orders") == []
    assert consume(cluster.bootstrap, "alice", "alice-orders", "alice-g") == RECORDS
    # Anyone else's: refused.
    assert [e.code() for e in produce(cluster.bootstrap, "alice", "t", 1)] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]
    with pytest.raises(RuntimeError, match="TOPIC_AUTHORIZATION_FAILED|GROUP_AUTHORIZATION"):
        consume(cluster.bootstrap, "alice", "t", "g")
    with pytest.raises(RuntimeError, match="TOPIC_AUTHORIZATION_FAILED"):
        consume(cluster.bootstrap, "alice", "t", "alice-t")


def test_alice_sees_only_what_she_may_describe(cluster: SecureCluster) -> None:
    topics_seen: dict[str, set[str]] = {}
    groups_seen: dict[str, set[str]] = {}
    for user in ("alice", "admin"):
        groups_seen[user] = set()
        for b in cluster.brokers:
            with logged_in(b.address, user) as client:
                md = call(client, 3, 12, ALL_TOPICS)
                topics_seen[user] = {t.name for t in md.topics}
                listed = call(client, 16, 5, {"states_filter": [], "types_filter": []})
                groups_seen[user] |= {g.group_id for g in listed.groups}
    assert topics_seen["alice"] == {"alice-orders"}
    assert {"alice-orders", "t", "doomed", "__consumer_offsets"} <= topics_seen["admin"]
    assert groups_seen["alice"] == {"alice-g"}
    assert {"alice-g", "g"} <= groups_seen["admin"]


def test_a_deny_beats_her_allow(cluster: SecureCluster) -> None:
    admin = AdminClient(conf(cluster.bootstrap, "admin"))
    admin.create_topics([NewTopic("alice-locked", 1, 2)])["alice-locked"].result(30)
    deny = AclBinding(ResourceType.TOPIC, "alice-locked", ResourcePatternType.LITERAL,
                      "User:alice", "*", AclOperation.WRITE, AclPermissionType.DENY)  # fmt: skip
    admin.create_acls([deny])[deny].result(30)

    def write_refused(client: RawClient) -> bool:
        return _produce_code(client, "alice-locked") == Errors.TOPIC_AUTHORIZATION_FAILED

    assert took_effect_everywhere(cluster, "alice", write_refused) <= WITHIN_S
    # READ on it is still hers, and so is writing her other topics.
    assert produce(cluster.bootstrap, "alice", "alice-orders", 1) == []
    with logged_in(cluster.brokers[0].address, "alice") as client:
        md = call(
            client, 3, 12, {**ALL_TOPICS, "topics": [{"name": "alice-locked", "topic_id": None}]}
        )
        assert md.topics[0].error_code == 0


def _produce_code(client: RawClient, topic: str) -> int:
    resp = client.call(0, 9, raw_produce(topic, 0, batch(1)))
    return resp.responses[0].partition_responses[0].error_code


def test_removing_her_acl_refuses_her_again(cluster: SecureCluster) -> None:
    admin = AdminClient(conf(cluster.bootstrap, "admin"))
    everything_of_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY,
                                           "User:alice", None, AclOperation.ANY,
                                           AclPermissionType.ALLOW)  # fmt: skip
    deleted = admin.delete_acls([everything_of_alice])[everything_of_alice].result(30)
    assert len(deleted) == 2  # the prefixed topic and group ALLOWs
    took = took_effect_everywhere(cluster, "alice", lambda c: not describes_alice_group(c))
    assert took <= WITHIN_S, f"the removal reached every broker after {took:.2f} s"
    assert [e.code() for e in produce(cluster.bootstrap, "alice", "alice-orders", 1)] == [
        KafkaError.TOPIC_AUTHORIZATION_FAILED
    ]


# -- super user ------------------------------------------------------------------------------


def test_the_super_user_does_everything(cluster: SecureCluster) -> None:
    admin = AdminClient(conf(cluster.bootstrap, "admin"))
    admin.create_topics([NewTopic("admin-scratch", 2, 2)])["admin-scratch"].result(30)
    assert produce(cluster.bootstrap, "admin", "admin-scratch") == []
    assert consume(cluster.bootstrap, "admin", "admin-scratch", "admin-g") == RECORDS
    # Another principal's topics, the ACLs and the cluster are all his too.
    assert consume(cluster.bootstrap, "admin", "alice-orders", "admin-reads") == RECORDS
    binding = AclBinding(ResourceType.GROUP, "x", ResourcePatternType.LITERAL, "User:carol",
                         "*", AclOperation.READ, AclPermissionType.ALLOW)  # fmt: skip
    admin.create_acls([binding])[binding].result(30)
    flt = AclBindingFilter(ResourceType.GROUP, "x", ResourcePatternType.LITERAL, None, None,
                           AclOperation.ANY, AclPermissionType.ANY)  # fmt: skip
    assert len(admin.delete_acls([flt])[flt].result(30)) == 1
    for future in admin.delete_consumer_groups(["admin-g", "alice-g"]).values():
        future.result(30)
    for future in admin.delete_topics(["admin-scratch", "doomed"]).values():
        future.result(30)


# -- narrow grants, request by request -------------------------------------------------------

DAVE = "User:dave"


def _acl(rtype: ResourceType, name: str, op: AclOperation) -> AclBinding:
    return AclBinding(rtype, name, ResourcePatternType.LITERAL, DAVE, "*", op,
                      AclPermissionType.ALLOW)  # fmt: skip


def _leader(c: SecureCluster, topic: str) -> str:
    """The address of the broker leading partition 0 of `topic` (once there is one)."""

    def probe() -> int | None:
        with logged_in(c.brokers[0].address, "admin") as a:
            md = call(a, 3, 12, {**ALL_TOPICS, "topics": [{"name": topic, "topic_id": None}]})
        parts = [p for p in md.topics[0].partitions if p.partition_index == 0]
        return parts[0].leader_id if parts and parts[0].leader_id >= 0 else None

    leader = wait_for(probe, 30, f"a leader for {topic}-0", c.logs)
    return next(b.address for b in c.brokers if b.node_id == leader)


def _coordinator(c: SecureCluster, group: str) -> str:
    def probe() -> int | None:
        with logged_in(c.brokers[0].address, "admin") as a:
            found = call(a, 10, 4, {"key_type": 0, "coordinator_keys": [group]}).coordinators[0]
        return found.node_id if found.error_code == 0 else None

    node = wait_for(probe, 30, f"the coordinator of {group}", c.logs)
    return next(b.address for b in c.brokers if b.node_id == node)


def _bits(*ops: int) -> int:
    return sum(1 << op for op in ops)


def test_narrow_grants_answer_as_kafkas_handlers(cluster: SecureCluster) -> None:
    admin = AdminClient(conf(cluster.bootstrap, "admin"))
    for f in admin.create_topics([NewTopic("dave-w", 1, 2), NewTopic("dave-r", 1, 2)]).values():
        f.result(30)
    grants = [
        _acl(ResourceType.TOPIC, "dave-w", AclOperation.WRITE),  # WRITE implies DESCRIBE
        _acl(ResourceType.TOPIC, "dave-r", AclOperation.READ),  # so does READ
        _acl(ResourceType.TOPIC, "dave-auto", AclOperation.DESCRIBE),
        _acl(ResourceType.TOPIC, "dave-auto", AclOperation.CREATE),
        _acl(ResourceType.TOPIC, "dave-nocreate", AclOperation.DESCRIBE),
        _acl(ResourceType.GROUP, "dave-g", AclOperation.READ),
    ]
    for f in admin.create_acls(grants).values():
        f.result(30)
    # admin commits an offset of `t` (which dave may not describe) in dave's group.
    with logged_in(_coordinator(cluster, "dave-g"), "admin") as a:
        assert _commit(a, [("t", 0)]) == {("t", 0): 0}
    took = took_effect_everywhere(cluster, "dave", lambda d: describes_group(d, "dave-g"))
    assert took <= WITHIN_S, f"the grants reached every broker after {took:.2f} s"

    with logged_in(_leader(cluster, "dave-w"), "dave") as d:
        # One produce, two topics: the refused one does not stop the allowed one.
        resp = d.call(0, 9, _two_topic_produce("dave-w", "t"))
        assert {(t.name, t.partition_responses[0].error_code) for t in resp.responses} == {
            ("dave-w", 0),
            ("t", Errors.TOPIC_AUTHORIZATION_FAILED),
        }
        # WRITE is not READ.
        assert _fetch_code(d, "dave-w") == Errors.TOPIC_AUTHORIZATION_FAILED
        # An idempotent producer needs WRITE on some topic (KIP-679): he has one.
        ids = {"transaction_timeout": 60000, "producer_id": -1, "producer_epoch": -1}
        resp = call(d, 22, 4, {"transactional_id": None, **ids})
        assert resp.error_code == 0 and resp.producer_id >= 0
        flags = {"allow_auto_topic_creation": False, "include_topic_authorized_operations": True}
        md = call(d, 3, 12, {"topics": [{"name": "dave-w", "topic_id": None}], **flags})
        assert md.topics[0].topic_authorized_operations == _bits(
            AclOperation.WRITE.value, AclOperation.DESCRIBE.value
        )
    with logged_in(_leader(cluster, "dave-r"), "dave") as d:
        assert _fetch_code(d, "dave-r") == 0
        parts = [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]
        topics = [{"topic": n, "partitions": parts} for n in ("dave-r", "t")]
        resp = call(d, 23, 4, {"replica_id": -1, "topics": topics})
        assert {t.topic: t.partitions[0].error_code for t in resp.topics} == {
            "dave-r": 0, "t": Errors.TOPIC_AUTHORIZATION_FAILED}  # fmt: skip

    with logged_in(cluster.brokers[0].address, "dave") as d:
        md = call(d, 3, 12, ALL_TOPICS)
        assert {t.name for t in md.topics} == {"dave-w", "dave-r"}
        named = [{"name": n, "topic_id": None} for n in ("dave-auto", "dave-nocreate")]
        md = call(d, 3, 12, {"topics": named, "allow_auto_topic_creation": True,
                             "include_topic_authorized_operations": False})  # fmt: skip
        assert {(t.name, t.error_code) for t in md.topics} == {
            ("dave-auto", Errors.LEADER_NOT_AVAILABLE),  # created: DESCRIBE and CREATE
            ("dave-nocreate", Errors.TOPIC_AUTHORIZATION_FAILED),  # DESCRIBE only
        }
        # DeleteTopics by id: refused, and the name shown only where he may describe it.
        ids = {t.name: t.topic_id for t in call(d, 3, 12, ALL_TOPICS).topics}
        resp = call(d, 20, 6, {"topics": [{"name": None, "topic_id": ids["dave-r"]}],
                               "timeout": 5000})  # fmt: skip
        assert [(r.name, r.error_code) for r in resp.responses] == [
            ("dave-r", Errors.TOPIC_AUTHORIZATION_FAILED)
        ]
    wait_for(lambda: "dave-auto" in view(cluster)["topics"], 30, "dave-auto", cluster.logs)

    with logged_in(_coordinator(cluster, "dave-g"), "dave") as d:
        assert _commit(d, [("dave-r", 0), ("dave-w", 0)]) == {
            ("dave-r", 0): 0,
            ("dave-w", 0): Errors.TOPIC_AUTHORIZATION_FAILED,  # WRITE is not READ
        }
        # All topics: `t`'s offset is hidden; asked by name: refused.
        assert _fetched(d, None) == {("dave-r", 0): (0, 0)}
        assert _fetched(d, ["t", "dave-r"]) == {
            ("t", 0): (-1, Errors.TOPIC_AUTHORIZATION_FAILED),
            ("dave-r", 0): (0, 0),
        }
        resp = call(d, 15, 5, {"groups": ["dave-g"], "include_authorized_operations": True})
        assert resp.groups[0].authorized_operations == _bits(
            AclOperation.READ.value, AclOperation.DESCRIBE.value
        )
        listed = call(d, 16, 5, {"states_filter": [], "types_filter": []})
        assert [g.group_id for g in listed.groups] == ["dave-g"]


def _two_topic_produce(*topics: str) -> Any:
    data = [{"name": t, "partition_data": [{"index": 0, "records": batch(1)}]} for t in topics]
    return request(0, 9, {"transactional_id": None, "acks": -1, "timeout": 5000,
                          "topic_data": data})  # fmt: skip


def _fetch_code(client: RawClient, topic: str) -> int:
    part = {
        "partition": 0,
        "fetch_offset": 0,
        "partition_max_bytes": 1 << 20,
        "current_leader_epoch": -1,
        "last_fetched_epoch": -1,
        "log_start_offset": -1,
    }
    data = {"replica_id": -1, "max_wait": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic, "partitions": [part]}], "forgotten_topics_data": [],
            "rack_id": ""}  # fmt: skip
    return call(client, 1, 12, data).responses[0].partitions[0].error_code


def _commit(client: RawClient, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """A commit outside any generation (as a standalone consumer does) in dave-g."""
    topics: dict[str, list[dict[str, Any]]] = {}
    for t, p in tps:
        topics.setdefault(t, []).append(
            {
                "partition_index": p,
                "committed_offset": 0,
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    data = {"group_id": "dave-g", "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}  # fmt: skip
    resp = call(client, 8, 9, data)
    return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}


def _fetched(client: RawClient, topics: list[str] | None) -> dict[tuple[str, int], Any]:
    wanted = None if topics is None else [{"name": t, "partition_indexes": [0]} for t in topics]
    group = {"group_id": "dave-g", "member_id": None, "member_epoch": -1, "topics": wanted}
    g = call(client, 9, 9, {"groups": [group], "require_stable": False}).groups[0]
    assert g.error_code == 0
    return {(t.name, p.partition_index): (p.committed_offset, p.error_code)
            for t in g.topics for p in t.partitions}  # fmt: skip
