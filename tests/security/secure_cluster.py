"""A local cluster (real processes, tests/harness/cluster_procs.py) whose brokers each
have two listeners: CLIENT on the broker's planned port (so `bootstrap` reaches it) and
INTERNAL, the inter-broker listener, on a port of its own; each with the security
protocol asked for. Shared `broker_props` carry the TLS and SASL settings.

And the client configurations the tests use, in each client's own vocabulary.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from common.properties import read_properties
from kraft.tools.launcher import free_ports
from kraft.tools.local_cluster import start_cluster, write_configs
from tests.harness.cluster_procs import ProcCluster

PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

BROKER_USER, BROKER_PASSWORD = "broker", "broker-secret"
ALICE, ALICE_PASSWORD = "alice", "alice-secret"


def plain_jaas(**users: str) -> str:
    """A broker's PLAIN JAAS config: its own login and the users it accepts."""
    accepted = " ".join(f'user_{u}="{p}"' for u, p in users.items())
    return (
        f'{PLAIN_MODULE} required username="{BROKER_USER}" password="{BROKER_PASSWORD}" '
        f'user_{BROKER_USER}="{BROKER_PASSWORD}" {accepted};'
    )


def tls_server_props(certs: Any, client_auth: str = "none") -> dict[str, str]:
    return {
        "ssl.keystore.location": str(certs.server),
        "ssl.truststore.location": str(certs.ca),
        "ssl.client.auth": client_auth,
    }


class SecureCluster(ProcCluster):
    def __init__(
        self,
        data_dir: Path,
        *,
        client_protocol: str,
        internal_protocol: str,
        broker_props: Mapping[str, str],
        n_brokers: int = 3,
        n_controllers: int = 1,
    ) -> None:
        super().__init__(
            data_dir, n_controllers=n_controllers, n_brokers=n_brokers, broker_props=broker_props
        )
        self.client_protocol = client_protocol
        self.internal_protocol = internal_protocol
        self.internal_ports = free_ports(n_brokers)

    def start(self, timeout_s: float = 60.0) -> None:
        write_configs(
            self.cluster, controller_props=self.controller_props, broker_props=self.broker_props
        )
        for b, port in zip(self.brokers, self.internal_ports, strict=True):
            props = read_properties(b.properties_path)
            props.update(
                {
                    "listeners": f"CLIENT://{b.address},INTERNAL://{b.host}:{port}",
                    "listener.security.protocol.map": (
                        f"CLIENT:{self.client_protocol},INTERNAL:{self.internal_protocol}"
                    ),
                    "inter.broker.listener.name": "INTERNAL",
                }
            )
            b.write_properties(props)
        start_cluster(self.cluster, timeout_s)


# -- client configurations ----------------------------------------------------------------------


def librdkafka_config(protocol: str, certs: Any = None, **sasl: str) -> dict[str, str]:
    """confluent-kafka / kcat properties: `sasl` = mechanism, username, password."""
    out = {"security.protocol": protocol.lower()}
    if "SSL" in protocol:
        out["ssl.ca.location"] = str(certs.ca)
        if "SASL" not in protocol:
            out["ssl.certificate.location"] = str(certs.client)
            out["ssl.key.location"] = str(certs.client)
    if sasl:
        out["sasl.mechanism"] = sasl["mechanism"]
        out["sasl.username"] = sasl["username"]
        out["sasl.password"] = sasl["password"]
    return out


def kafka_python_config(protocol: str, certs: Any = None, **sasl: str) -> dict[str, Any]:
    out: dict[str, Any] = {"security_protocol": protocol}
    if "SSL" in protocol:
        out["ssl_cafile"] = str(certs.ca)
        if "SASL" not in protocol:
            out["ssl_certfile"] = str(certs.client)
            out["ssl_keyfile"] = str(certs.client)
    if sasl:
        out["sasl_mechanism"] = sasl["mechanism"]
        out["sasl_plain_username"] = sasl["username"]
        out["sasl_plain_password"] = sasl["password"]
    return out


def aiokafka_config(protocol: str, certs: Any = None, **sasl: str) -> dict[str, Any]:
    out: dict[str, Any] = {"security_protocol": protocol}
    if "SSL" in protocol:
        context = ssl.create_default_context(cafile=str(certs.ca))
        if "SASL" not in protocol:
            context.load_cert_chain(str(certs.client))
        out["ssl_context"] = context
    if sasl:
        out["sasl_mechanism"] = sasl["mechanism"]
        out["sasl_plain_username"] = sasl["username"]
        out["sasl_plain_password"] = sasl["password"]
    return out


# -- produce and read back with each client -------------------------------------------------------
# Each produces `n` values with acks=all to `topic` (auto-created), reads every partition
# from the beginning by assign(), and returns the values it read (sorted).

TIMEOUT_S = 30.0


def values(prefix: str, n: int) -> list[bytes]:
    return sorted(b"%s-%d" % (prefix.encode(), i) for i in range(n))


def confluent_roundtrip(bootstrap: str, conf: dict[str, str], topic: str, n: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", **conf})
    errors: list[Any] = []
    for v in values("ck", n):
        producer.produce(topic, value=v, on_delivery=lambda err, _m: err and errors.append(err))
    assert producer.flush(TIMEOUT_S) == 0 and errors == []
    del producer  # destroyed now, not whenever: no reconnects after the test
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-ck", **conf,
         "enable.auto.commit": False}
    )  # fmt: skip
    got: list[bytes] = []
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    return sorted(got)


def kafka_python_roundtrip(bootstrap: str, conf: dict[str, Any], topic: str, n: int) -> list[bytes]:
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf)
    try:
        futures = [producer.send(topic, value=v) for v in values("kp", n)]
        producer.flush(TIMEOUT_S)
        assert all(f.get(timeout=TIMEOUT_S).offset >= 0 for f in futures)
    finally:
        producer.close(10)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **conf)
    got: list[bytes] = []
    try:
        tps = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + TIMEOUT_S
        while len(got) < n and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                got += [r.value for r in records]
    finally:
        consumer.close()
    return sorted(got)


def aiokafka_roundtrip(bootstrap: str, conf: dict[str, Any], topic: str, n: int) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    async def run() -> list[bytes]:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **conf)
        await producer.start()
        try:
            futures = [await producer.send(topic, value=v) for v in values("aio", n)]
            await asyncio.wait_for(asyncio.gather(*futures), TIMEOUT_S)
            partitions = await producer.partitions_for(topic)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, **conf)
        await consumer.start()
        got: list[bytes] = []
        try:
            tps = [TopicPartition(topic, p) for p in partitions]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            deadline = time.monotonic() + TIMEOUT_S
            while len(got) < n and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
        finally:
            await consumer.stop()
        return sorted(got)

    return asyncio.run(run())


def kcat_roundtrip(bootstrap: str, conf: dict[str, str], topic: str, n: int) -> list[bytes]:
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed: `make test` installs it with apt-get"
    options = [x for k, v in conf.items() for x in ("-X", f"{k}={v}")]
    base = [kcat, "-b", bootstrap, *options, "-t", topic]
    produced = b"\n".join(values("kcat", n)) + b"\n"
    run = subprocess.run([*base, "-P", "-X", "acks=all"], input=produced, capture_output=True,
                         timeout=TIMEOUT_S)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    run = subprocess.run([*base, "-C", "-o", "beginning", "-e", "-q", "-c", str(n)],
                         capture_output=True, timeout=TIMEOUT_S)  # fmt: skip
    assert run.returncode == 0, run.stderr.decode(errors="replace")[-2000:]
    return sorted(line for line in run.stdout.split(b"\n") if line)


def sasl_test_cluster(data_dir: Path, certs: Any, **extra: str) -> SecureCluster:
    """One broker: CLIENT is SASL_PLAINTEXT (PLAIN for alice, SCRAM-SHA-256), INTERNAL is
    SSL (a TLS port for the bad-input tests) with a 1 s handshake bound."""
    return SecureCluster(
        data_dir,
        client_protocol="SASL_PLAINTEXT",
        internal_protocol="SSL",
        n_brokers=1,
        broker_props={
            **tls_server_props(certs),
            "listener.name.client.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.client.plain.sasl.jaas.config": plain_jaas(**{ALICE: ALICE_PASSWORD}),
            "ssl.handshake.timeout.ms": "1000",
            "offsets.topic.replication.factor": "1",
            **extra,
        },
    )


# Each client's roundtrip, its configuration builder, and its topic/value prefix.
ROUNDTRIPS: dict[str, tuple[Callable[..., list[bytes]], Callable[..., Any], str]] = {
    "confluent-kafka": (confluent_roundtrip, librdkafka_config, "ck"),
    "kafka-python": (kafka_python_roundtrip, kafka_python_config, "kp"),
    "aiokafka": (aiokafka_roundtrip, aiokafka_config, "aio"),
    "kcat": (kcat_roundtrip, librdkafka_config, "kcat"),
}
