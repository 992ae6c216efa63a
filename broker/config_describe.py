"""What DescribeConfigs says of a topic, a broker or a group, as Kafka's ConfigHelper: every config
with its value, source, read-only and sensitive flags, its synonyms (in Kafka's order:
dynamic broker, dynamic default, static, default; each over the names Kafka treats as
one config, e.g. `log.retention.ms`, `.minutes`, `.hours`), its type and documentation.

Sans-I/O: the broker's config layers and a topic's overrides in, plain entries out (the
handler in broker/apis_configs.py encodes them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker.config import DEFAULTS, is_sensitive
from broker.dynamic_config import ConfigLayers
from common.broker_config_defs import DYNAMIC_BROKER_CONFIG_KEYS
from common.config_def import INT_MAX, LONG_MAX, ConfigType
from common.group_config_defs import GROUP_CONFIG_KEYS, group_config_defaults
from common.topic_config_defs import SERVER_SYNONYMS, TOPIC_CONFIG_KEYS, effective_topic_value

# DescribeConfigs config_source values (Kafka's ConfigSource).
DYNAMIC_TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
DYNAMIC_GROUP_CONFIG = 8  # ConfigSource.GROUP_CONFIG

# Kafka's defaults of broker configs (its staticDefaultConfigs): ours, the dynamic ones,
# and the synonyms whose defaults decide a topic default (log.retention.hours=168).
KAFKA_BROKER_DEFAULTS: dict[str, str] = {
    **{k: v for k, v in DEFAULTS.items() if v is not None},
    **{k: key.default for k, key in DYNAMIC_BROKER_CONFIG_KEYS.items() if key.default is not None},
    "log.retention.hours": "168",
    "log.roll.hours": "168",
    "log.roll.jitter.hours": "0",
    "log.flush.scheduler.interval.ms": str(LONG_MAX),
}

_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def broker_synonyms(name: str) -> list[str]:
    """DynamicBrokerConfig.brokerConfigSynonyms: the names of one broker config."""
    for group in _GROUPS:
        if name in group and name != "log.flush.scheduler.interval.ms":
            return list(group)
    return [name]


@dataclass(frozen=True, slots=True)
class Synonym:
    name: str
    value: str | None
    source: int


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    name: str
    value: str | None  # None: sensitive
    source: int
    read_only: bool
    sensitive: bool
    synonyms: tuple[Synonym, ...]
    config_type: int
    documentation: str | None

    def as_response(self, synonyms: bool, documentation: bool) -> dict[str, object]:
        return {
            "name": self.name,
            "value": self.value,
            "read_only": self.read_only,
            "config_source": self.source,
            "is_default": self.source == DEFAULT_CONFIG,
            "is_sensitive": self.sensitive,
            "synonyms": [
                {"name": s.name, "value": s.value, "source": s.source}
                for s in (self.synonyms if synonyms else ())
            ],
            "config_type": self.config_type,
            "documentation": self.documentation if documentation else None,
        }


def _config_synonyms(name: str, names: list[str], layers: ConfigLayers) -> list[Synonym]:
    """ConfigHelper.configSynonyms, dropWhile included: entries before the first one
    named `name` are left out (so an unset `log.retention.ms` lists none)."""
    sensitive = is_sensitive(name)
    out = [
        Synonym(n, None if sensitive else values[n], source)
        for values, source in (
            (layers.dynamic_broker, DYNAMIC_BROKER_CONFIG),
            (layers.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
            (layers.static, STATIC_BROKER_CONFIG),
            (KAFKA_BROKER_DEFAULTS, DEFAULT_CONFIG),
        )
        for n in names
        if n in values
    ]
    while out and out[0].name != name:
        out.pop(0)
    return out


def describe_topic(overrides: Mapping[str, str], layers: ConfigLayers) -> list[ConfigEntry]:
    """Every topic config: its override (DYNAMIC_TOPIC_CONFIG) or what the broker gives."""
    merged = layers.merged()
    out = []
    for name, key in sorted(TOPIC_CONFIG_KEYS.items()):
        value = effective_topic_value(name, overrides, merged)
        server = SERVER_SYNONYMS.get(name)
        synonyms = (
            _config_synonyms(server[0][0], broker_synonyms(server[0][0]), layers) if server else []
        )
        if name in overrides:
            synonyms.insert(0, Synonym(name, value, DYNAMIC_TOPIC_CONFIG))
        out.append(
            ConfigEntry(
                name,
                value,
                synonyms[0].source if synonyms else DEFAULT_CONFIG,
                False,
                False,
                tuple(synonyms),
                int(key.type),
                key.doc,
            )
        )
    return out


def describe_broker(layers: ConfigLayers, per_broker: bool) -> list[ConfigEntry]:
    """A broker's configs (per_broker: every one, effective), or the cluster default's
    dynamic configs (only those set, with their DYNAMIC_DEFAULT_BROKER_CONFIG synonyms)."""
    merged = {**KAFKA_BROKER_DEFAULTS, **layers.merged()}
    names: Iterable[str] = sorted(merged) if per_broker else sorted(layers.dynamic_default)
    out = []
    for name in names:
        synonyms = _config_synonyms(name, broker_synonyms(name), layers)
        if not per_broker:
            synonyms = [s for s in synonyms if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
        value = merged[name] if per_broker else layers.dynamic_default[name]
        sensitive = is_sensitive(name)
        key = DYNAMIC_BROKER_CONFIG_KEYS.get(name)
        out.append(
            ConfigEntry(
                name,
                None if sensitive else value,
                synonyms[0].source if synonyms else DEFAULT_CONFIG,
                key is None,  # read-only: Kafka cannot change it live
                sensitive,
                tuple(synonyms),
                int(key.type if key is not None else _guess_type(name, value, sensitive)),
                key.doc if key is not None else None,
            )
        )
    return out


def _guess_type(name: str, value: str, sensitive: bool) -> ConfigType:
    """The type of a broker config we keep no key for, from its value."""
    if sensitive:
        return ConfigType.PASSWORD
    if value in ("true", "false"):
        return ConfigType.BOOLEAN
    if value.lstrip("-").isdigit():
        return (
            ConfigType.INT
            if abs(int(value)) <= INT_MAX and not name.endswith(".ms")
            else ConfigType.LONG
        )
    if "," in value:
        return ConfigType.LIST
    return ConfigType.STRING


def describe_group(overrides: Mapping[str, str], broker: Mapping[str, str]) -> list[ConfigEntry]:
    """Every group config (ConfigHelper.createGroupConfigEntry): the group's override
    (DYNAMIC_GROUP_CONFIG) or the coordinator's default (DEFAULT_CONFIG), its only synonym
    itself. Stored and shown, not applied: our groups are classic-protocol only."""
    defaults = group_config_defaults(broker)
    out = []
    for name, key in sorted(GROUP_CONFIG_KEYS.items()):
        source = DYNAMIC_GROUP_CONFIG if name in overrides else DEFAULT_CONFIG
        value = overrides.get(name, defaults[name])
        out.append(
            ConfigEntry(
                name,
                value,
                source,
                False,
                False,
                (Synonym(name, value, source),),
                int(key.type),
                key.doc,
            )
        )
    return out
