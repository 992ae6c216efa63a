"""Kafka's group configs (KIP-848's GroupConfig, ConfigResource.Type.GROUP = 32): the
per-group overrides of the group coordinator's settings, with Kafka 4.0's names, types,
defaults and checks (GroupConfig.validate, GroupConfigManager.validate).

A GROUP resource needs no group: Kafka stores configs for any non-empty name. Our groups
speak only the classic protocol (JoinGroup/SyncGroup/Heartbeat), whose session timeout
comes from each member's JoinGroup, so these configs are stored (ConfigRecords of
resource type 32), replayed and described, but nothing applies them: they would steer
KIP-848 consumer groups and KIP-932 share groups, which we do not run.
"""

from __future__ import annotations

from collections.abc import Mapping

from common.config_def import ConfigKey, ConfigType, InvalidConfigValue

T = ConfigType

GROUP_RESOURCE = 32  # ConfigResource.Type.GROUP

# The group coordinator's broker settings a group config defaults to or is bounded by,
# with Kafka's defaults (GroupCoordinatorConfig, ShareGroupConfig).
GROUP_COORDINATOR_DEFAULTS: dict[str, int] = {
    "group.consumer.session.timeout.ms": 45000,
    "group.consumer.min.session.timeout.ms": 45000,
    "group.consumer.max.session.timeout.ms": 60000,
    "group.consumer.heartbeat.interval.ms": 5000,
    "group.consumer.min.heartbeat.interval.ms": 5000,
    "group.consumer.max.heartbeat.interval.ms": 15000,
    "group.share.session.timeout.ms": 45000,
    "group.share.min.session.timeout.ms": 45000,
    "group.share.max.session.timeout.ms": 60000,
    "group.share.heartbeat.interval.ms": 5000,
    "group.share.min.heartbeat.interval.ms": 5000,
    "group.share.max.heartbeat.interval.ms": 15000,
    "group.share.record.lock.duration.ms": 30000,
    "group.share.min.record.lock.duration.ms": 15000,
    "group.share.max.record.lock.duration.ms": 60000,
}

GROUP_CONFIG_KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey("consumer.session.timeout.ms", T.INT, "45000",
                  "timeout to detect a consumer group member's failure", at_least=1),
        ConfigKey("consumer.heartbeat.interval.ms", T.INT, "5000",
                  "interval between a consumer group member's heartbeats", at_least=1),
        ConfigKey("share.session.timeout.ms", T.INT, "45000",
                  "timeout to detect a share group member's failure", at_least=1),
        ConfigKey("share.heartbeat.interval.ms", T.INT, "5000",
                  "interval between a share group member's heartbeats", at_least=1),
        ConfigKey("share.record.lock.duration.ms", T.INT, "30000",
                  "how long a share group member holds a record it was given",
                  at_least=1000),
        ConfigKey("share.auto.offset.reset", T.STRING, "latest",
                  "where a share-partition starts when it has no offset",
                  valid=("latest", "earliest")),
    )
}  # fmt: skip

# group config -> the coordinator setting it defaults to (extractGroupConfigMap).
_DEFAULTED_BY = {
    "consumer.session.timeout.ms": "group.consumer.session.timeout.ms",
    "consumer.heartbeat.interval.ms": "group.consumer.heartbeat.interval.ms",
    "share.session.timeout.ms": "group.share.session.timeout.ms",
    "share.heartbeat.interval.ms": "group.share.heartbeat.interval.ms",
    "share.record.lock.duration.ms": "group.share.record.lock.duration.ms",
}

# (group config, coordinator prefix of its min/max settings), in GroupConfig's order.
_BOUNDED = (
    ("consumer.heartbeat.interval.ms", "group.consumer.{}.heartbeat.interval.ms"),
    ("consumer.session.timeout.ms", "group.consumer.{}.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "group.share.{}.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.{}.session.timeout.ms"),
    ("share.record.lock.duration.ms", "group.share.{}.record.lock.duration.ms"),
)


def _coordinator(broker: Mapping[str, str], name: str) -> int:
    """A coordinator setting from the broker's config, else Kafka's default."""
    raw = broker.get(name)
    try:
        return int(raw.strip()) if raw is not None else GROUP_COORDINATOR_DEFAULTS[name]
    except ValueError:
        return GROUP_COORDINATOR_DEFAULTS[name]


def group_config_defaults(broker: Mapping[str, str] | None = None) -> dict[str, str]:
    """Every group config's value for a group with no overrides: the coordinator's
    settings (GroupCoordinatorConfig.extractGroupConfigMap), else GroupConfig's defaults."""
    broker = broker or {}
    out = {name: key.default or "" for name, key in GROUP_CONFIG_KEYS.items()}
    for name, setting in _DEFAULTED_BY.items():
        out[name] = str(_coordinator(broker, setting))
    return out


def invalid_group_config(
    configs: Mapping[str, str], broker: Mapping[str, str] | None = None
) -> str | None:
    """Why Kafka refuses a group's whole new config (INVALID_CONFIG), or None: an unknown
    name, a value its key refuses, then a value outside the coordinator's bounds or a
    session timeout not above its heartbeat interval (GroupConfig.validateValues).
    Kafka fills unset consumer configs from the coordinator's settings, the share ones
    from GroupConfig's defaults (GroupConfigManager.validate)."""
    broker = broker or {}
    for name in configs:
        if name not in GROUP_CONFIG_KEYS:
            return f"Unknown group config name: {name}"
    values = {name: key.default or "" for name, key in GROUP_CONFIG_KEYS.items()}
    for name in ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"):
        values[name] = str(_coordinator(broker, _DEFAULTED_BY[name]))
    values.update(configs)
    try:
        for name, value in values.items():
            GROUP_CONFIG_KEYS[name].check(value)
    except InvalidConfigValue as exc:
        return str(exc)
    n = {name: int(values[name].strip()) for name in _DEFAULTED_BY}
    for name, pattern in _BOUNDED:
        low, high = pattern.format("min"), pattern.format("max")
        if n[name] < _coordinator(broker, low):
            return f"{name} must be greater than or equal to {low}"
        if n[name] > _coordinator(broker, high):
            return f"{name} must be less than or equal to {high}"
    for kind in ("consumer", "share"):
        session, heartbeat = f"{kind}.session.timeout.ms", f"{kind}.heartbeat.interval.ms"
        if n[session] <= n[heartbeat]:
            return f"{session} must be greater than {heartbeat}"
    return None
