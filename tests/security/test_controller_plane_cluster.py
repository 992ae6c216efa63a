"""Whole clusters (one controller, one broker, each its own process) whose controller
plane is secured, and brokers the plane refuses:
- https + token: the broker with the token registers and the cluster serves a
  confluent-kafka produce and consume; a broker with a wrong token never registers;
- mutual TLS only (`ssl.client.auth=required`, `super.users=User:CN=broker`): the broker
  authenticates with its certificate; one with a valid certificate of another principal
  never registers.
Every wait is a condition under a deadline; failures carry the nodes' logs.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from common.errors import Errors
from common.properties import read_properties
from kraft.tools.launcher import NodeProcess, free_ports
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.security.conftest import Certs

TOKEN = "cluster-plane-token-0123456789"
TOPIC = "plane-topic"
REFUSED = "refused this broker"  # broker/controller_channel.py's warning


def start(tmp_path: Path, controller: Mapping[str, str], broker: Mapping[str, str]) -> ProcCluster:
    c = ProcCluster(
        tmp_path / "data",
        n_controllers=1,
        n_brokers=1,
        controller_props=controller,
        broker_props={"offsets.topic.replication.factor": "1", **broker},
    )
    try:
        c.start(timeout_s=90)
    except BaseException:
        c.close()
        raise
    return c


def start_intruder(c: ProcCluster, overrides: Mapping[str, str]) -> NodeProcess:
    """Another broker (id 3) with the first broker's properties but `overrides`."""
    (port,) = free_ports(1)
    node = NodeProcess("broker", 3, "127.0.0.1", port, c.cluster.data_dir / "broker-3")
    props = read_properties(c.brokers[0].properties_path)
    props.update(
        {
            "node.id": "3",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(node.data_dir / "logs"),
            **overrides,
        }
    )
    node.write_properties(props)
    node.start()
    return node


def assert_never_registers(c: ProcCluster, intruder: NodeProcess, error_code: int) -> None:
    """Its registration is refused with `error_code` (broker/lifecycle.py logs each
    failed attempt), and the controllers never list it."""
    refused = "heartbeat failed broker=3: "

    def registration_refused() -> bool:
        assert intruder.running, intruder.log_tail()
        lines = intruder.log_path.read_text(errors="replace").splitlines()
        return any(refused in line and f"(error {error_code})" in line for line in lines)

    try:
        wait_for(
            registration_refused,
            60,
            "the intruder's registration to be refused",
            lambda: intruder.log_tail(30),
        )
        assert REFUSED in intruder.log_path.read_text(errors="replace")
        state = c.cluster_state()
        assert state is not None
        assert 3 not in {b["broker_id"] for b in state["brokers"]}, state["brokers"]
    finally:
        intruder.kill()


@pytest.fixture
def token_cluster(tmp_path: Path, certs: Certs) -> Iterator[ProcCluster]:
    c = start(
        tmp_path,
        {
            "listener.security.protocol.map": "CONTROLLER:SSL",
            "ssl.keystore.location": str(certs.server),
            "ssl.truststore.location": str(certs.ca),
            "controller.quorum.http.token": TOKEN,
        },
        {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "listener.name.controller.ssl.truststore.location": str(certs.ca),
            "controller.quorum.http.token": TOKEN,
        },
    )
    try:
        yield c
    finally:
        c.close()


def test_https_and_token_cluster_serves_and_refuses_a_wrong_token(
    token_cluster: ProcCluster,
) -> None:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    c = token_cluster
    assert c.controllers[0].url("/").startswith("https://")
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for i in range(20):
        producer.produce(TOPIC, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": c.bootstrap, "group.id": "plane", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(TOPIC, 0, OFFSET_BEGINNING)])
        values: list[bytes] = []

        def read() -> bool:
            for m in consumer.consume(num_messages=100, timeout=0.5):
                assert m.error() is None, m.error()
                values.append(m.value())
            return len(values) >= 20

        wait_for(read, 30, "the records back", c.logs)
        assert values == [f"v{i}".encode() for i in range(20)]
    finally:
        consumer.close()

    intruder = start_intruder(c, {"controller.quorum.http.token": "a-wrong-token-0123456789"})
    assert_never_registers(c, intruder, Errors.SASL_AUTHENTICATION_FAILED)
    log = intruder.log_path.read_text(errors="replace")
    assert "HTTP 401" in log and TOKEN not in log and "a-wrong-token" not in log


def test_mutual_tls_cluster_admits_only_its_super_users(tmp_path: Path, certs: Certs) -> None:
    c = start(
        tmp_path,
        {
            "listener.security.protocol.map": "CONTROLLER:SSL",
            "ssl.keystore.location": str(certs.server),
            "ssl.truststore.location": str(certs.ca),
            "ssl.client.auth": "required",
            "super.users": "User:CN=broker",
        },
        {
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            "listener.name.controller.ssl.truststore.location": str(certs.ca),
            "listener.name.controller.ssl.keystore.location": str(certs.server),  # CN=broker
        },
    )
    try:
        state = c.cluster_state()
        assert state is not None and [b["broker_id"] for b in state["brokers"]] == [2]
        intruder = start_intruder(
            c, {"listener.name.controller.ssl.keystore.location": str(certs.client)}
        )
        assert_never_registers(c, intruder, Errors.CLUSTER_AUTHORIZATION_FAILED)
        assert "HTTP 403" in intruder.log_path.read_text(errors="replace")
    finally:
        c.close()
