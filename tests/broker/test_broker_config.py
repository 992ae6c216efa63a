"""Broker configuration: Kafka's property names and defaults, errors that name the property."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import ConfigError, describe_topic_configs, from_properties, load_config
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
        ({"listeners": "SSL://127.0.0.1:9092"}, "listeners"),
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
    cfg = from_properties({**BASE, "log.retention.hours": "1"})
    described = describe_topic_configs(cfg.log_config, {"segment.bytes": "2048"}, 2)
    assert described["retention.ms"] == ("3600000", True)
    assert described["segment.bytes"] == ("2048", False)
    assert described["min.insync.replicas"] == ("2", True)
