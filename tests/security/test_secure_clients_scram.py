"""SCRAM-SHA-512 over SASL_SSL on a real cluster, end to end: a credential is created
with AlterUserScramCredentials (KIP-554) through the admin client, as a user would, and
confluent-kafka, kafka-python, aiokafka and kcat log in with it, produce and consume.
The brokers replicate over an inter-broker SASL_SSL listener (PLAIN, the brokers' own
JAAS login), with `min.insync.replicas=3`. A wrong password fails with the SCRAM error.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster_procs import wait_for
from tests.security.secure_cluster import (
    BROKER_PASSWORD,
    BROKER_USER,
    ROUNDTRIPS,
    SecureCluster,
    confluent_roundtrip,
    librdkafka_config,
    plain_jaas,
    tls_server_props,
    values,
)

USER, PASSWORD = "erin", "erin-scram-secret"
MECHANISM = "SCRAM-SHA-512"
N = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Any) -> Iterator[SecureCluster]:
    with SecureCluster(
        tmp_path_factory.mktemp("scram"),
        client_protocol="SASL_SSL",
        internal_protocol="SASL_SSL",
        broker_props={
            **tls_server_props(certs),
            "listener.name.client.sasl.enabled.mechanisms": MECHANISM,
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "listener.name.internal.plain.sasl.jaas.config": plain_jaas(),
            "min.insync.replicas": "3",
        },
    ) as c:
        c.start()
        yield c


def internal_bootstrap(cluster: SecureCluster) -> str:
    return ",".join(
        f"{b.host}:{port}" for b, port in zip(cluster.brokers, cluster.internal_ports, strict=True)
    )


def internal_config(certs: Any) -> dict[str, str]:
    return librdkafka_config("SASL_SSL", certs, mechanism="PLAIN", username=BROKER_USER,
                             password=BROKER_PASSWORD)  # fmt: skip


def test_plain_over_the_sasl_ssl_inter_broker_listener(cluster: SecureCluster, certs: Any) -> None:
    bootstrap, conf = internal_bootstrap(cluster), internal_config(certs)
    assert confluent_roundtrip(bootstrap, conf, "internal-plain", N) == values("ck", N)
    parts = cluster.partitions("internal-plain")
    assert parts and all(sorted(p["isr"]) == sorted(p["replicas"]) for p in parts.values())


@pytest.fixture(scope="module")
def scram_user(cluster: SecureCluster, certs: Any) -> str:
    """AlterUserScramCredentials on the INTERNAL listener (as the broker user), then wait
    until every broker accepts the new login."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient(
        {"bootstrap.servers": internal_bootstrap(cluster), **internal_config(certs)}
    )
    upsert = UserScramCredentialUpsertion(
        USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), PASSWORD.encode()
    )
    for future in admin.alter_user_scram_credentials([upsert]).values():
        future.result(30)

    def every_broker_accepts() -> bool:
        from confluent_kafka.admin import AdminClient

        for b in cluster.brokers:
            conf = librdkafka_config("SASL_SSL", certs, mechanism=MECHANISM, username=USER,
                                     password=PASSWORD)  # fmt: skip
            AdminClient({"bootstrap.servers": b.address, **conf}).list_topics(timeout=3)
        return True

    wait_for(every_broker_accepts, 30, f"{USER}'s SCRAM login on every broker", cluster.logs)
    return USER


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_produce_and_consume_with_scram_sha_512_over_sasl_ssl(
    cluster: SecureCluster, certs: Any, scram_user: str, client: str
) -> None:
    roundtrip, config, prefix = ROUNDTRIPS[client]
    conf = config("SASL_SSL", certs, mechanism=MECHANISM, username=USER, password=PASSWORD)
    topic = f"scram-{prefix}"
    assert roundtrip(cluster.bootstrap, conf, topic, N) == values(prefix, N)
    parts = cluster.partitions(topic)
    assert parts and all(sorted(p["isr"]) == sorted(p["replicas"]) for p in parts.values())


def test_a_wrong_scram_password_fails(cluster: SecureCluster, certs: Any, scram_user: str) -> None:
    from confluent_kafka import KafkaError, Producer

    errors: list[Any] = []
    conf = librdkafka_config("SASL_SSL", certs, mechanism=MECHANISM, username=USER,
                             password="guess")  # fmt: skip
    producer = Producer({"bootstrap.servers": cluster.bootstrap, **conf, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in errors[0].str()
