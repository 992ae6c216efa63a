"""Per-log configuration with Kafka's topic property names and defaults.

Topic-level names (`segment.bytes`) and the broker-level defaults (`log.segment.bytes`)
are both understood; bad values are refused with an error naming the property.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from common.properties import INT_MAX, ConfigError

LONG_MAX = 2**63 - 1


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1073741824  # segment.bytes
    segment_ms: int = 604800000  # segment.ms (7 days)
    segment_index_bytes: int = 10485760  # segment.index.bytes
    index_interval_bytes: int = 4096  # index.interval.bytes
    retention_ms: int = 604800000  # retention.ms; -1: no time limit
    retention_bytes: int = -1  # retention.bytes; -1: no size limit
    max_message_bytes: int = 1048588  # max.message.bytes (largest batch)
    message_timestamp_type: str = "CreateTime"  # message.timestamp.type
    flush_messages: int = LONG_MAX  # flush.messages
    flush_ms: int = LONG_MAX  # flush.ms
    # Log compaction (Kafka's LogCleaner). cleanup.policy is a list: "delete", "compact" or
    # both ("compact,delete"); kept as written (normalized) so it describes as Kafka's does.
    cleanup_policy: str = "delete"  # cleanup.policy
    delete_retention_ms: int = 86400000  # delete.retention.ms: how long tombstones survive
    min_compaction_lag_ms: int = 0  # min.compaction.lag.ms
    max_compaction_lag_ms: int = LONG_MAX  # max.compaction.lag.ms
    min_cleanable_dirty_ratio: float = 0.5  # min.cleanable.dirty.ratio

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @property
    def compact(self) -> bool:
        """The log cleaner keeps only the latest record of each key."""
        return "compact" in self.cleanup_policy.split(",")

    @property
    def delete(self) -> bool:
        """retention.ms and retention.bytes delete old segments (Kafka: only with "delete")."""
        return "delete" in self.cleanup_policy.split(",")

    @classmethod
    def from_properties(
        cls, props: Mapping[str, str | int], base: LogConfig | None = None
    ) -> LogConfig:
        """Topic-level properties (`segment.bytes`, ...) layered over `base`."""
        base = base or cls()
        changes: dict[str, object] = {}
        for name, value in props.items():
            spec = _TOPIC_PROPS.get(name)
            if spec is None:
                continue  # not a log property (e.g. min.insync.replicas is read elsewhere)
            field, parse = spec
            changes[field] = parse(name, value)
        return dataclasses.replace(base, **changes)

    @classmethod
    def from_broker_properties(cls, props: Mapping[str, str | int]) -> LogConfig:
        """Broker defaults (`log.segment.bytes`, `log.retention.hours`, ...)."""
        topic: dict[str, str | int] = {}
        # Kafka's precedence: log.retention.ms > .minutes > .hours; likewise for rolls.
        for unit, factor in (("hours", 3_600_000), ("minutes", 60_000), ("ms", 1)):
            key = f"log.retention.{unit}"
            if key in props:
                topic["retention.ms"] = _scaled(key, props[key], factor)
            key = f"log.roll.{unit}" if unit != "minutes" else ""
            if key in props:
                topic["segment.ms"] = _scaled(key, props[key], factor)
        for broker_name, topic_name in _BROKER_TO_TOPIC.items():
            if broker_name in props:
                # Checked under the name the operator wrote, so errors point at it.
                parse = _TOPIC_PROPS[topic_name][1]
                topic[topic_name] = parse(broker_name, props[broker_name])
        return cls.from_properties(topic)


def _int(name: str, value: str | int, minimum: int) -> int:
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None
    if n < minimum:
        raise ConfigError(f"{name} must be >= {minimum}, got {n}")
    return n


def _scaled(name: str, value: str | int, factor: int) -> int:
    n = _int(name, value, -1)
    return n if n < 0 else n * factor


def _timestamp_type(name: str, value: str | int) -> str:
    if value not in ("CreateTime", "LogAppendTime"):
        raise ConfigError(f"{name} must be CreateTime or LogAppendTime, got {value!r}")
    return str(value)


def _cleanup_policy(name: str, value: str | int) -> str:
    """Kafka's list type: comma-separated, blanks around items ignored; each item must be
    "compact" or "delete"."""
    items = [item.strip() for item in str(value).split(",")]
    if not value or not all(items) or not set(items) <= {"compact", "delete"}:
        raise ConfigError(f"{name} must be a list of compact and delete, got {value!r}")
    return ",".join(dict.fromkeys(items))  # duplicates mean nothing more


def _ratio(name: str, value: str | int) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name} must be a number, got {value!r}") from None
    if not 0.0 <= x <= 1.0:  # also refuses nan
        raise ConfigError(f"{name} must be between 0 and 1, got {value!r}")
    return x


def _bounded(minimum: int, maximum: int = LONG_MAX):
    def parse(name: str, value: str | int) -> int:
        n = _int(name, value, minimum)
        if n > maximum:
            raise ConfigError(f"{name} must be <= {maximum}, got {n}")
        return n

    return parse


_TOPIC_PROPS = {
    # Kafka's minimum segment size is one batch header (14 bytes in its config docs).
    "segment.bytes": ("segment_bytes", _bounded(14, INT_MAX)),
    "segment.ms": ("segment_ms", _bounded(1)),
    "segment.index.bytes": ("segment_index_bytes", _bounded(4, INT_MAX)),
    "index.interval.bytes": ("index_interval_bytes", _bounded(0, INT_MAX)),
    "retention.ms": ("retention_ms", _bounded(-1)),
    "retention.bytes": ("retention_bytes", _bounded(-1)),
    "max.message.bytes": ("max_message_bytes", _bounded(0, INT_MAX)),
    "message.timestamp.type": ("message_timestamp_type", _timestamp_type),
    "flush.messages": ("flush_messages", _bounded(1)),
    "flush.ms": ("flush_ms", _bounded(0)),
    "cleanup.policy": ("cleanup_policy", _cleanup_policy),
    "delete.retention.ms": ("delete_retention_ms", _bounded(0)),
    "min.compaction.lag.ms": ("min_compaction_lag_ms", _bounded(0)),
    "max.compaction.lag.ms": ("max_compaction_lag_ms", _bounded(1)),
    "min.cleanable.dirty.ratio": ("min_cleanable_dirty_ratio", _ratio),
}

_BROKER_TO_TOPIC = {
    "log.segment.bytes": "segment.bytes",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.bytes": "retention.bytes",
    "message.max.bytes": "max.message.bytes",
    "log.message.timestamp.type": "message.timestamp.type",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "log.cleanup.policy": "cleanup.policy",
    "log.cleaner.delete.retention.ms": "delete.retention.ms",
    "log.cleaner.min.compaction.lag.ms": "min.compaction.lag.ms",
    "log.cleaner.max.compaction.lag.ms": "max.compaction.lag.ms",
    "log.cleaner.min.cleanable.ratio": "min.cleanable.dirty.ratio",
}
