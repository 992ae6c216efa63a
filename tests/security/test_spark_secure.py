"""Spark reads and writes a SASL_SSL topic (SCRAM-SHA-512) with `format("kraft")`, given
the options of Spark's Kafka source: kafka.security.protocol, kafka.sasl.mechanism,
kafka.sasl.jaas.config and kafka.ssl.truststore.location. A real cluster (processes);
the SCRAM user is created with AlterUserScramCredentials."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.security.secure_cluster import (
    BROKER_PASSWORD,
    BROKER_USER,
    SCRAM_MODULE,
    SecureCluster,
    librdkafka_config,
    plain_jaas,
    tls_server_props,
)

USER, PASSWORD = "spark-user", "spark-secret"
N = 2000


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, certs: Any) -> Iterator[SecureCluster]:
    with SecureCluster(
        tmp_path_factory.mktemp("spark-sasl-ssl"),
        client_protocol="SASL_SSL",
        internal_protocol="SASL_PLAINTEXT",
        n_brokers=1,
        broker_props={
            **tls_server_props(certs),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "sasl.jaas.config": plain_jaas(),
            "offsets.topic.replication.factor": "1",
        },
    ) as c:
        c.start()
        _create_scram_user(c, certs)
        yield c


def _create_scram_user(c: SecureCluster, certs: Any) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    admin_conf = librdkafka_config(
        "SASL_SSL", certs, mechanism="PLAIN", username=BROKER_USER, password=BROKER_PASSWORD
    )
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **admin_conf})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    up = UserScramCredentialUpsertion(USER, info, PASSWORD.encode())
    for f in admin.alter_user_scram_credentials([up]).values():
        f.result(30)
    deadline = time.monotonic() + 30
    while True:  # the broker applies the credential from the metadata log
        described = admin.describe_user_scram_credentials([USER])[USER]
        try:
            if described.result(10).scram_credential_infos:
                return
        except Exception:  # noqa: BLE001 - RESOURCE_NOT_FOUND until it arrives
            if time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def jaas(password: str) -> str:
    return f'{SCRAM_MODULE} required username="{USER}" password="{password}";'


def options(c: SecureCluster, certs: Any, password: str = PASSWORD) -> dict[str, str]:
    return {
        "kafka.bootstrap.servers": c.bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": jaas(password),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": str(certs.ca),
    }


def _produce(c: SecureCluster, certs: Any, topic: str) -> None:
    from confluent_kafka import Producer

    conf = librdkafka_config(
        "SASL_SSL", certs, mechanism="SCRAM-SHA-512", username=USER, password=PASSWORD
    )
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", **conf})
    for i in range(N):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0


def test_spark_reads_a_sasl_ssl_topic(cluster: SecureCluster, certs: Any, spark: Any) -> None:
    topic = "spark-secure-read"
    _create_topic(cluster, certs, topic)
    _produce(cluster, certs, topic)
    reader = spark.read.format("kraft").option("subscribe", topic)
    for k, v in options(cluster, certs).items():
        reader = reader.option(k, v)
    rows = reader.load().select("partition", "offset", "value").collect()
    assert len(rows) == N
    assert sorted(bytes(r.value) for r in rows) == sorted(b"v%d" % i for i in range(N))


def test_a_wrong_password_fails_the_read(cluster: SecureCluster, certs: Any, spark: Any) -> None:
    reader = spark.read.format("kraft").option("subscribe", "spark-secure-read")
    for k, v in options(cluster, certs, password="not-it").items():
        reader = reader.option(k, v)
    with pytest.raises(Exception, match="SASL_AUTHENTICATION_FAILED") as e:
        reader.load().count()
    assert "not-it" not in str(e.value)


def _create_topic(c: SecureCluster, certs: Any, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    conf = librdkafka_config(
        "SASL_SSL", certs, mechanism="SCRAM-SHA-512", username=USER, password=PASSWORD
    )
    admin = AdminClient({"bootstrap.servers": c.bootstrap, **conf})
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(30)


def test_spark_writes_a_sasl_ssl_topic(cluster: SecureCluster, certs: Any, spark: Any) -> None:
    """The sink takes the same Java options (turned into librdkafka's settings)."""
    topic = "spark-secure-write"
    _create_topic(cluster, certs, topic)
    df = spark.createDataFrame(
        [(b"k%d" % i, b"w%d" % i) for i in range(500)], "key binary, value binary"
    )
    writer = df.write.format("kraft").option("topic", topic)
    for k, v in options(cluster, certs).items():
        writer = writer.option(k, v)
    writer.mode("append").save()
    reader = spark.read.format("kraft").option("subscribe", topic)
    for k, v in options(cluster, certs).items():
        reader = reader.option(k, v)
    got = sorted(bytes(r.value) for r in reader.load().select("value").collect())
    assert got == sorted(b"w%d" % i for i in range(500))
