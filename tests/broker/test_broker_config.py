"""Broker configuration: Kafka's property names and defaults, errors that name the property."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, from_properties, load_config
from broker.config_describe import DEFAULT_CONFIG, describe_topic
from broker.dynamic_config import ConfigLayers
from broker.main import main as broker_main

BASE = {
    "process.roles": "broker",
    "node.id": "4",
    "controller.quorum.http.endpoints": "1@127.0.0.1:19191,2@127.0.0.1:19192",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
    "log.dirs": "/tmp/a,/tmp/b",
}


def test_a_properties_file_with_overrides_and_kafkas_defaults(tmp_path: Path) -> None:
    path = tmp_path / "broker.properties"
    path.write_text(
        "# a comment\n"
        + "".join(f"{k}={v}\n" for k, v in BASE.items())
        + "log.segment.bytes=1024\n"
    )
    cfg = load_config(path, ["min.insync.replicas=2", "broker.rack=r1"])
    assert cfg.node_id == 4
    assert cfg.controller_endpoints == {1: ("127.0.0.1", 19191), 2: ("127.0.0.1", 19192)}
    assert cfg.listener.port == 9092 and cfg.advertised_listeners == cfg.listeners
    assert [str(d) for d in cfg.log_dirs] == ["/tmp/a", "/tmp/b"]
    assert cfg.log_config.segment_bytes == 1024
    assert (cfg.min_insync_replicas, cfg.rack) == (2, "r1")
    assert (cfg.message_max_bytes, cfg.socket_request_max_bytes) == (1048588, 104857600)
    assert (cfg.heartbeat_interval_ms, cfg.session_timeout_ms) == (2000, 9000)
    assert (cfg.replica_lag_time_max_ms, cfg.auto_create_topics_enable) == (30000, True)
    described = cfg.described_configs()
    assert described["min.insync.replicas"] == ("2", False)
    assert described["num.partitions"] == ("1", True)


def test_advertised_listeners_and_the_inter_broker_listener() -> None:
    cfg = from_properties(
        {
            **BASE,
            "listeners": "PLAINTEXT://0.0.0.0:9092",
            "advertised.listeners": "PLAINTEXT://kafka-1.example:19092",
        }
    )
    assert cfg.advertised("PLAINTEXT").host == "kafka-1.example"  # type: ignore[union-attr]
    assert cfg.inter_broker_listener_name == "PLAINTEXT"


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"node.id": ""}, "node.id"),
        ({"node.id": "x"}, "node.id"),
        ({"process.roles": "controller"}, "process.roles"),
        ({"process.roles": "broker,controller"}, "process.roles"),
        ({"controller.quorum.http.endpoints": "127.0.0.1:1"}, "controller.quorum.http.endpoints"),
        ({"listeners": "127.0.0.1:9092"}, "listeners"),
        ({"listeners": "SSL://127.0.0.1:9092"}, "ssl.keystore.location"),
        ({"listeners": "INTERNAL://127.0.0.1:9092"}, "listener.security.protocol.map"),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "listener.security.protocol.map"),
        ({"listener.security.protocol.map": "PLAINTEXT"}, "listener.security.protocol.map"),
        (
            {"listeners": "PLAINTEXT://127.0.0.1:9092,SASL_PLAINTEXT://127.0.0.1:9092"},
            "listeners",
        ),
        ({"listeners": "PLAINTEXT://127.0.0.1:1,plaintext://127.0.0.1:2"}, "listeners"),
        ({"security.inter.broker.protocol": "SSL"}, "security.inter.broker.protocol"),
        (
            {"security.inter.broker.protocol": "PLAINTEXT", "inter.broker.listener.name": "X"},
            "security.inter.broker.protocol",
        ),
        ({"connections.max.idle.ms": "0"}, "connections.max.idle.ms"),
        ({"ssl.handshake.timeout.ms": "0"}, "ssl.handshake.timeout.ms"),
        ({"listeners": "PLAINTEXT://0.0.0.0:9092"}, "listeners"),
        ({"listeners": "PLAINTEXT://127.0.0.1:99999"}, "listeners"),
        ({"log.dirs": ""}, "log.dirs"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"auto.create.topics.enable": "yes"}, "auto.create.topics.enable"),
        ({"broker.heartbeat.interval.ms": "9000"}, "broker.heartbeat.interval.ms"),
        ({"log.segment.bytes": "1"}, "log.segment.bytes"),
        ({"inter.broker.listener.name": "INTERNAL"}, "inter.broker.listener.name"),
    ],
)
def test_bad_values_name_the_property(change: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        from_properties({**BASE, **change})


def test_the_broker_command_reports_config_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broker.properties"
    path.write_text("process.roles=broker\n")
    assert broker_main(["--config", str(path)]) == 2
    assert "node.id is required" in capsys.readouterr().err
    assert broker_main(["--config", str(tmp_path / "missing")]) == 2


def test_topic_configs_show_defaults_and_overrides() -> None:
    cfg = from_properties({**BASE, "log.retention.hours": "1", "min.insync.replicas": "2"})
    entries = describe_topic({"segment.bytes": "2048"}, ConfigLayers(cfg.properties))
    described = {e.name: (e.value, e.source == DEFAULT_CONFIG) for e in entries}
    # Kafka lists synonyms from the first one named log.retention.ms: none here, so the
    # source stays DEFAULT_CONFIG though the value comes from log.retention.hours.
    assert described["retention.ms"] == ("3600000", True)
    assert described["segment.bytes"] == ("2048", False)
    assert described["min.insync.replicas"] == ("2", False)
    assert described["flush.ms"] == (str(2**63 - 1), True)


# -- listeners and their security --------------------------------------------------------------

PLAIN_JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'username="broker" password="broker-secret" user_broker="broker-secret" user_alice="a";'
)
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="scram-secret";'
)
SASL = {
    **BASE,
    "listeners": "SASL_PLAINTEXT://127.0.0.1:9093,INTERNAL://127.0.0.1:9094",
    "listener.security.protocol.map": "SASL_PLAINTEXT:SASL_PLAINTEXT,INTERNAL:SASL_PLAINTEXT",
    "inter.broker.listener.name": "INTERNAL",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
    "sasl.mechanism.inter.broker.protocol": "PLAIN",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
    "listener.name.internal.plain.sasl.jaas.config": PLAIN_JAAS,
}


def test_several_named_listeners_each_with_its_protocol_and_security() -> None:
    cfg = from_properties(
        {
            **SASL,
            "listener.name.internal.sasl.enabled.mechanisms": "PLAIN",
            "advertised.listeners": "SASL_PLAINTEXT://kafka.example:9093,INTERNAL://10.0.0.4:9094",
        }
    )
    assert [(x.name, x.port, x.security_protocol) for x in cfg.listeners] == [
        ("SASL_PLAINTEXT", 9093, "SASL_PLAINTEXT"),
        ("INTERNAL", 9094, "SASL_PLAINTEXT"),
    ]
    assert cfg.listener.name == "SASL_PLAINTEXT"  # the first one
    assert cfg.advertised("INTERNAL").host == "10.0.0.4"  # type: ignore[union-attr]
    assert cfg.inter_broker_listener_name == "INTERNAL"
    outer, inner = cfg.security("SASL_PLAINTEXT"), cfg.security("INTERNAL")
    assert outer.sasl_mechanisms == ("PLAIN", "SCRAM-SHA-512")
    assert inner.sasl_mechanisms == ("PLAIN",)  # the listener.name.internal. override
    assert dict(outer.plain_users) == {"broker": "broker-secret", "alice": "a"}
    inter = cfg.inter_broker_security
    assert inter is not None and inter.listener == "INTERNAL"
    assert (inter.sasl_mechanism, inter.username, inter.password) == (
        "PLAIN",
        "broker",
        "broker-secret",
    )
    assert inter.ssl_context is None and outer.ssl_context is None


def test_kafkas_default_protocol_map_and_inter_broker_listener() -> None:
    cfg = from_properties(
        {**BASE, "listeners": "SASL_PLAINTEXT://127.0.0.1:9093,PLAINTEXT://127.0.0.1:9092",
         "sasl.enabled.mechanisms": "SCRAM-SHA-256"}
    )  # fmt: skip
    assert cfg.security("SASL_PLAINTEXT").security_protocol == "SASL_PLAINTEXT"
    assert cfg.inter_broker_listener_name == "PLAINTEXT"  # Kafka's default protocol
    assert cfg.inter_broker_security is not None
    assert cfg.inter_broker_security.sasl_mechanism is None
    by_protocol = from_properties({**SASL, "inter.broker.listener.name": "",
                                   "security.inter.broker.protocol": "SASL_PLAINTEXT"})  # fmt: skip
    assert by_protocol.inter_broker_listener_name == "SASL_PLAINTEXT"


def test_the_jaas_fallback_and_scram_inter_broker_credentials() -> None:
    cfg = from_properties(
        {
            **BASE,
            "listeners": "SASL_PLAINTEXT://127.0.0.1:9093",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,PLAIN",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "sasl.jaas.config": PLAIN_JAAS,
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        }
    )
    assert dict(cfg.security("SASL_PLAINTEXT").plain_users)["alice"] == "a"
    inter = cfg.inter_broker_security
    assert inter is not None
    assert (inter.sasl_mechanism, inter.username, inter.password) == (
        "SCRAM-SHA-512",
        "broker",
        "scram-secret",
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"sasl.enabled.mechanisms": ""}, "sasl.enabled.mechanisms"),  # Kafka's GSSAPI default
        ({"sasl.enabled.mechanisms": "PLAIN,GSSAPI"}, "sasl.enabled.mechanisms"),
        ({"sasl.enabled.mechanisms": "OAUTHBEARER"}, "sasl.enabled.mechanisms"),
        ({"listener.name.internal.sasl.enabled.mechanisms": "GSSAPI"}, "sasl.enabled.mechanisms"),
        ({"listener.name.sasl_plaintext.plain.sasl.jaas.config": ""}, "sasl.jaas.config"),
        ({"listener.name.internal.plain.sasl.jaas.config": "nonsense"}, "sasl.jaas.config"),
        ({"listener.name.internal.plain.sasl.jaas.config": SCRAM_JAAS}, "PlainLoginModule"),
        ({"sasl.mechanism.inter.broker.protocol": ""}, "sasl.mechanism.inter.broker.protocol"),
        (
            {"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256"},
            "sasl.mechanism.inter.broker.protocol",
        ),
        (
            {
                "listener.name.internal.plain.sasl.jaas.config": (
                    "org.apache.kafka.common.security.plain.PlainLoginModule required "
                    'user_broker="broker-secret";'
                )
            },
            "listener.name.internal.plain.sasl.jaas.config",
        ),
    ],
)
def test_bad_security_settings_name_the_property(change: dict[str, str], named: str) -> None:
    values = {k: v for k, v in {**SASL, **change}.items() if v}
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")) as info:
        from_properties(values)
    assert "broker-secret" not in str(info.value)


def test_secrets_are_not_described_and_not_in_reprs() -> None:
    cfg = from_properties({**SASL, "ssl.key.password": "hunter2"})
    described = cfg.described_configs()
    assert described["listener.name.internal.plain.sasl.jaas.config"] == (None, False)
    assert described["ssl.key.password"] == (None, False)
    assert described["sasl.enabled.mechanisms"] == ("PLAIN,SCRAM-SHA-512", False)
    shown = repr(cfg) + repr(cfg.listener_security) + repr(cfg.inter_broker_security)
    assert "broker-secret" not in shown and "hunter2" not in shown
