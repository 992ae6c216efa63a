"""confluent-kafka, kafka-python, aiokafka and kcat produce and consume on a real cluster
over SASL_PLAINTEXT with PLAIN and over mutual TLS (SSL with ssl.client.auth=required),
and a wrong password or a missing or foreign client certificate is refused. Every
cluster has 3 brokers whose inter-broker listener is secured the same way, and
`min.insync.replicas=3`: an acks=all produce completes only if both followers fetch
over it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.harness.cluster_procs import wait_for
from tests.security.secure_cluster import (
    ALICE,
    ALICE_PASSWORD,
    ROUNDTRIPS,
    SecureCluster,
    aiokafka_config,
    kafka_python_config,
    librdkafka_config,
    plain_jaas,
    tls_server_props,
    values,
)

N = 200


@pytest.fixture(scope="module")
def sasl_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    with SecureCluster(
        tmp_path_factory.mktemp("sasl-plain"),
        client_protocol="SASL_PLAINTEXT",
        internal_protocol="SASL_PLAINTEXT",
        broker_props={
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.jaas.config": plain_jaas(**{ALICE: ALICE_PASSWORD}),
            "min.insync.replicas": "3",
        },
    ) as c:
        c.start()
        yield c


@pytest.fixture(scope="module")
def mutual_tls(tmp_path_factory: pytest.TempPathFactory, certs: Any) -> Iterator[SecureCluster]:
    with SecureCluster(
        tmp_path_factory.mktemp("mutual-tls"),
        client_protocol="SSL",
        internal_protocol="SSL",
        broker_props={**tls_server_props(certs, "required"), "min.insync.replicas": "3"},
    ) as c:
        c.start()
        yield c


def check_replicated(cluster: SecureCluster, topic: str) -> None:
    """Every partition of `topic` has its 3 replicas in the ISR (followers fetched)."""

    def probe() -> bool:
        parts = cluster.partitions(topic)
        return bool(parts) and all(
            len(p["replicas"]) == 3 and sorted(p["isr"]) == sorted(p["replicas"])
            for p in parts.values()  # type: ignore[union-attr]
        )

    wait_for(probe, 20, f"{topic} fully replicated", cluster.logs)


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_produce_and_consume_over_sasl_plain(sasl_plain: SecureCluster, client: str) -> None:
    roundtrip, config, prefix = ROUNDTRIPS[client]
    conf = config("SASL_PLAINTEXT", mechanism="PLAIN", username=ALICE, password=ALICE_PASSWORD)
    topic = f"sasl-plain-{prefix}"
    assert roundtrip(sasl_plain.bootstrap, conf, topic, N) == values(prefix, N)
    check_replicated(sasl_plain, topic)


@pytest.mark.parametrize("client", list(ROUNDTRIPS))
def test_produce_and_consume_over_mutual_tls(
    mutual_tls: SecureCluster, client: str, certs: Any
) -> None:
    roundtrip, config, prefix = ROUNDTRIPS[client]
    topic = f"mtls-{prefix}"
    assert roundtrip(mutual_tls.bootstrap, config("SSL", certs), topic, N) == values(prefix, N)
    check_replicated(mutual_tls, topic)


# -- refusals --------------------------------------------------------------------------------------


def confluent_error(bootstrap: str, conf: dict[str, str]) -> Any:
    """The first error confluent-kafka reports when it tries to reach the cluster."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer({"bootstrap.servers": bootstrap, **conf, "error_cb": errors.append})
    deadline = time.monotonic() + 20
    while not errors and time.monotonic() < deadline:
        producer.poll(0.1)
    assert errors, "no error reported"
    return errors[0]


def test_a_wrong_password_or_unknown_user_fails_with_an_authentication_error(
    sasl_plain: SecureCluster,
) -> None:
    from confluent_kafka import KafkaError

    for user, password in [(ALICE, "guess"), ("mallory", ALICE_PASSWORD)]:
        conf = librdkafka_config("SASL_PLAINTEXT", mechanism="PLAIN", username=user,
                                 password=password)  # fmt: skip
        error = confluent_error(sasl_plain.bootstrap, conf)
        assert error.code() == KafkaError._AUTHENTICATION, error
        assert "Invalid username or password" in error.str()


def test_kafka_python_and_aiokafka_see_the_authentication_failure(
    sasl_plain: SecureCluster, caplog: pytest.LogCaptureFixture
) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer
    from kafka import KafkaProducer
    from kafka.errors import KafkaError as KpError

    bad = {"mechanism": "PLAIN", "username": ALICE, "password": "guess"}
    with pytest.raises(KpError):
        KafkaProducer(bootstrap_servers=sasl_plain.bootstrap, max_block_ms=5000,
                      **kafka_python_config("SASL_PLAINTEXT", **bad))  # fmt: skip
    assert "SaslAuthenticationFailedError" in caplog.text
    assert "Invalid username or password" in caplog.text
    caplog.clear()

    async def aiokafka_start() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=sasl_plain.bootstrap, **aiokafka_config("SASL_PLAINTEXT", **bad)
        )
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(Exception):  # noqa: B017 - KafkaConnectionError: cannot bootstrap
        asyncio.run(aiokafka_start())
    assert "Invalid username or password" in caplog.text


def test_tls_without_or_with_a_foreign_client_certificate_is_refused(
    mutual_tls: SecureCluster, certs: Any
) -> None:
    from confluent_kafka import KafkaError

    no_cert = {"security.protocol": "ssl", "ssl.ca.location": str(certs.ca)}
    foreign = {**no_cert, "ssl.certificate.location": str(certs.other_client),
               "ssl.key.location": str(certs.other_client)}  # fmt: skip
    for conf in (no_cert, foreign):
        error = confluent_error(mutual_tls.bootstrap, conf)
        refused = (KafkaError._SSL, KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
        assert error.code() in refused, error


def test_describe_configs_does_not_show_the_jaas_config(sasl_plain: SecureCluster) -> None:
    from confluent_kafka.admin import AdminClient, ConfigResource

    conf = librdkafka_config("SASL_PLAINTEXT", mechanism="PLAIN", username=ALICE,
                             password=ALICE_PASSWORD)  # fmt: skip
    admin = AdminClient({"bootstrap.servers": sasl_plain.bootstrap, **conf})
    broker = str(sasl_plain.brokers[0].node_id)
    resource = ConfigResource(ConfigResource.Type.BROKER, broker)
    configs = admin.describe_configs([resource])[resource].result(20)
    jaas = configs["sasl.jaas.config"]
    assert jaas.value is None and jaas.is_sensitive
    assert configs["sasl.enabled.mechanisms"].value == "PLAIN"
    assert not configs["sasl.enabled.mechanisms"].is_sensitive
    assert all(ALICE_PASSWORD not in (c.value or "") for c in configs.values())
