"""Kafka's topic configs (LogConfig's ConfigDef) with their defaults, types, validators and
the broker configs that stand in for them when a topic has no override (Kafka's
ServerTopicConfigSynonyms: `retention.ms` <- `log.retention.ms`, `log.retention.minutes`,
`log.retention.hours`, in that order of precedence).

The controller checks topic config changes against these (unknown name or bad value:
INVALID_CONFIG with Kafka's message); the broker layers them into each log's effective
config and describes them with their sources and synonyms.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.config_def import ConfigKey, ConfigType, InvalidConfigValue

T = ConfigType
HOURS, MINUTES = 3_600_000, 60_000

COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")

TOPIC_CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey("cleanup.policy", T.LIST, "delete",
                  "delete: old segments go by retention; compact: the latest record of "
                  "each key is kept", valid=("compact", "delete")),
        ConfigKey("compression.type", T.STRING, "producer",
                  "how batches are stored: producer keeps the producer's codec",
                  valid=COMPRESSION_TYPES),
        ConfigKey("delete.retention.ms", T.LONG, "86400000",
                  "how long tombstones stay in a compacted topic", at_least=0),
        ConfigKey("file.delete.delay.ms", T.LONG, "60000",
                  "wait before a deleted segment's files are removed", at_least=0),
        ConfigKey("flush.messages", T.LONG, "9223372036854775807",
                  "fsync after this many messages", at_least=1),
        ConfigKey("flush.ms", T.LONG, "9223372036854775807",
                  "fsync after this much time", at_least=0),
        ConfigKey("index.interval.bytes", T.INT, "4096",
                  "bytes between offset index entries", at_least=0),
        ConfigKey("max.compaction.lag.ms", T.LONG, "9223372036854775807",
                  "longest a record stays uncompacted", at_least=1),
        ConfigKey("max.message.bytes", T.INT, "1048588",
                  "largest record batch the topic accepts", at_least=0),
        ConfigKey("message.timestamp.type", T.STRING, "CreateTime",
                  "CreateTime keeps the producer's timestamp; LogAppendTime stamps the "
                  "broker's", valid=("CreateTime", "LogAppendTime")),
        ConfigKey("min.cleanable.dirty.ratio", T.DOUBLE, "0.5",
                  "dirty share of a log before it is compacted", at_least=0, at_most=1),
        ConfigKey("min.compaction.lag.ms", T.LONG, "0",
                  "shortest a record stays uncompacted", at_least=0),
        ConfigKey("min.insync.replicas", T.INT, "1",
                  "replicas that must have a write for acks=all to succeed", at_least=1),
        ConfigKey("preallocate", T.BOOLEAN, "false", "preallocate segment files"),
        ConfigKey("retention.bytes", T.LONG, "-1",
                  "largest a partition grows before old segments go (-1: no limit)"),
        ConfigKey("retention.ms", T.LONG, "604800000",
                  "longest a segment is kept (-1: no time limit)", at_least=-1),
        ConfigKey("segment.bytes", T.INT, "1073741824",
                  "size at which a segment is rolled", at_least=14),
        ConfigKey("segment.index.bytes", T.INT, "10485760",
                  "size of a segment's offset index", at_least=4),
        ConfigKey("segment.jitter.ms", T.LONG, "0",
                  "random jitter subtracted from segment.ms", at_least=0),
        ConfigKey("segment.ms", T.LONG, "604800000",
                  "time after which a segment is rolled", at_least=1),
        ConfigKey("unclean.leader.election.enable", T.BOOLEAN, "false",
                  "let a replica outside the ISR lead when no ISR member can (data loss)"),
    )
}  # fmt: skip

# topic config -> (broker config, factor to milliseconds or 1), in Kafka's precedence.
SERVER_SYNONYMS: dict[str, tuple[tuple[str, int], ...]] = {
    "segment.bytes": (("log.segment.bytes", 1),),
    "segment.ms": (("log.roll.ms", 1), ("log.roll.hours", HOURS)),
    "segment.jitter.ms": (("log.roll.jitter.ms", 1), ("log.roll.jitter.hours", HOURS)),
    "segment.index.bytes": (("log.index.size.max.bytes", 1),),
    "flush.messages": (("log.flush.interval.messages", 1),),
    "flush.ms": (("log.flush.interval.ms", 1), ("log.flush.scheduler.interval.ms", 1)),
    "retention.bytes": (("log.retention.bytes", 1),),
    "retention.ms": (
        ("log.retention.ms", 1),
        ("log.retention.minutes", MINUTES),
        ("log.retention.hours", HOURS),
    ),
    "max.message.bytes": (("message.max.bytes", 1),),
    "index.interval.bytes": (("log.index.interval.bytes", 1),),
    "delete.retention.ms": (("log.cleaner.delete.retention.ms", 1),),
    "min.compaction.lag.ms": (("log.cleaner.min.compaction.lag.ms", 1),),
    "max.compaction.lag.ms": (("log.cleaner.max.compaction.lag.ms", 1),),
    "file.delete.delay.ms": (("log.segment.delete.delay.ms", 1),),
    "min.cleanable.dirty.ratio": (("log.cleaner.min.cleanable.ratio", 1),),
    "cleanup.policy": (("log.cleanup.policy", 1),),
    "unclean.leader.election.enable": (("unclean.leader.election.enable", 1),),
    "min.insync.replicas": (("min.insync.replicas", 1),),
    "compression.type": (("compression.type", 1),),
    "preallocate": (("log.preallocate", 1),),
    "message.timestamp.type": (("log.message.timestamp.type", 1),),
}


def invalid_topic_config(configs: Mapping[str, str]) -> str | None:
    """Why Kafka refuses these topic configs (INVALID_CONFIG), or None: an unknown name
    first (LogConfig.validateNames), then each value by its key."""
    for name in configs:
        if name not in TOPIC_CONFIG_KEYS:
            return f"Unknown topic config name: {name}"
    for name, value in configs.items():
        try:
            TOPIC_CONFIG_KEYS[name].check(value)
        except InvalidConfigValue as exc:
            return str(exc)
    return None


def effective_topic_value(
    name: str, overrides: Mapping[str, str], broker: Mapping[str, str]
) -> str:
    """A topic config's value as LogConfig computes it: the topic's override, else its
    first broker synonym that is set (scaled to ms), else Kafka's default."""
    if name in overrides:
        return overrides[name]
    for synonym, factor in SERVER_SYNONYMS.get(name, ()):
        raw = broker.get(synonym)
        if raw is None:
            continue
        if factor == 1:
            return raw
        try:
            n = int(raw.strip())
        except ValueError:
            continue
        return str(n if n < 0 else n * factor)
    return TOPIC_CONFIG_KEYS[name].default or ""
