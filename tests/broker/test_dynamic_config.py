"""The broker's side of live configs, sans-I/O: dynamic broker configs layered over
server.properties (per broker over the cluster default over static over Kafka's
defaults), the log defaults and min.insync.replicas they give, and DescribeConfigs'
sources and synonyms in Kafka's order."""

from __future__ import annotations

from broker.config_describe import (
    DEFAULT_CONFIG,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    DYNAMIC_TOPIC_CONFIG,
    STATIC_BROKER_CONFIG,
    describe_broker,
    describe_topic,
)
from broker.dynamic_config import ConfigLayers, DynamicBrokerConfig
from metadata_log.image import MetadataImage
from storage.config import LogConfig

STATIC = {"node.id": "1", "log.retention.hours": "1", "ssl.key.password": "secret"}


def image(default: dict[str, str], broker: dict[str, str]) -> MetadataImage:
    configs = {(4, ""): default, (4, "1"): broker, (4, "2"): {"log.segment.bytes": "1"}}
    return MetadataImage(configs={k: v for k, v in configs.items() if v})


def test_layers_give_log_defaults_and_min_insync() -> None:
    dyn = DynamicBrokerConfig(1, STATIC, LogConfig.from_broker_properties(STATIC))
    assert dyn.log_config.retention_ms == 3_600_000
    assert dyn.update(image({"log.retention.ms": "5000", "min.insync.replicas": "2"}, {}))
    assert (dyn.log_config.retention_ms, dyn.min_insync_replicas) == (5000, 2)
    assert dyn.update(image({"log.retention.ms": "5000"}, {"log.retention.ms": "7000"}))
    assert (dyn.log_config.retention_ms, dyn.min_insync_replicas) == (7000, 1)
    assert dyn.log_config.segment_bytes == LogConfig().segment_bytes  # broker 2's is not ours
    assert not dyn.update(image({"log.retention.ms": "5000"}, {"log.retention.ms": "7000"}))
    topic = dyn.topic_log_config({"retention.ms": "9"})
    assert (topic.retention_ms, topic.cleanup_policy) == (9, "delete")
    assert dyn.update(MetadataImage())  # everything deleted: static again
    assert dyn.log_config.retention_ms == 3_600_000


def test_topic_sources_and_synonyms() -> None:
    layers = ConfigLayers(STATIC, {"log.cleanup.policy": "compact"}, {"min.insync.replicas": "2"})
    entries = {e.name: e for e in describe_topic({"segment.ms": "100"}, layers)}
    seg = entries["segment.ms"]
    assert (seg.value, seg.source) == ("100", DYNAMIC_TOPIC_CONFIG)
    # log.roll.hours has a default, but Kafka lists from the first log.roll.ms: none.
    assert [(s.name, s.source) for s in seg.synonyms] == [("segment.ms", DYNAMIC_TOPIC_CONFIG)]
    policy = entries["cleanup.policy"]
    assert (policy.value, policy.source) == ("compact", DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert [(s.name, s.value, s.source) for s in policy.synonyms] == [
        ("log.cleanup.policy", "compact", DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.cleanup.policy", "delete", DEFAULT_CONFIG),
    ]
    isr = entries["min.insync.replicas"]
    assert (isr.value, isr.source) == ("2", DYNAMIC_BROKER_CONFIG)
    retention = entries["retention.ms"]  # Kafka drops synonyms before log.retention.ms
    assert (retention.value, retention.source, retention.synonyms) == (
        "3600000",
        DEFAULT_CONFIG,
        (),
    )


def test_broker_entries() -> None:
    layers = ConfigLayers(STATIC, {"log.retention.ms": "5"}, {"log.retention.ms": "6"})
    entries = {e.name: e for e in describe_broker(layers, per_broker=True)}
    ret = entries["log.retention.ms"]
    assert (ret.value, ret.source, ret.read_only) == ("6", DYNAMIC_BROKER_CONFIG, False)
    assert [s.source for s in ret.synonyms] == [
        DYNAMIC_BROKER_CONFIG,
        DYNAMIC_DEFAULT_BROKER_CONFIG,
        STATIC_BROKER_CONFIG,  # log.retention.hours
        DEFAULT_CONFIG,
    ]
    secret = entries["ssl.key.password"]
    assert (secret.value, secret.sensitive, secret.config_type) == (None, True, 9)
    assert all(s.value is None for s in secret.synonyms)
    assert entries["node.id"].read_only
    default = describe_broker(layers, per_broker=False)
    assert [(e.name, e.value, e.source, [s.source for s in e.synonyms]) for e in default] == [
        ("log.retention.ms", "5", DYNAMIC_DEFAULT_BROKER_CONFIG, [DYNAMIC_DEFAULT_BROKER_CONFIG])
    ]
