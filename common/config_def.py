"""Kafka's ConfigDef in small: a config key's type, default, validator and documentation,
and the parsing that refuses a bad value with Kafka's own message ("Invalid value abc for
configuration retention.ms: Not a number of type LONG").

Shared by the controller (which validates topic and broker config changes before they
become records) and the broker (which layers them into effective configs and describes
them). Values stay text everywhere, as in config records; parsing only checks them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
SHORT_MIN, SHORT_MAX = -(2**15), 2**15 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigType(IntEnum):
    """DescribeConfigs' config_type (KIP-569), with ConfigDef.Type's names."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class InvalidConfigValue(ValueError):
    """Kafka's ConfigException: a value its key refuses."""

    def __init__(self, name: str, value: object, why: str | None) -> None:
        super().__init__(
            f"Invalid value {value} for configuration {name}" + (f": {why}" if why else "")
        )


@dataclass(frozen=True, slots=True)
class ConfigKey:
    name: str
    type: ConfigType
    default: str | None  # as DescribeConfigs shows it; None: no default
    doc: str = ""
    at_least: float | None = None
    at_most: float | None = None
    valid: Sequence[str] | None = None  # ValidString / ValidList items
    case_insensitive: bool = False  # CaseInsensitiveValidString

    @property
    def sensitive(self) -> bool:
        return self.type == ConfigType.PASSWORD

    def check(self, value: str) -> None:
        """Raise InvalidConfigValue unless `value` parses and passes the validator."""
        parsed = parse_value(self.name, self.type, value)
        if isinstance(parsed, int | float) and not isinstance(parsed, bool):
            if self.at_least is not None and parsed < self.at_least:
                raise InvalidConfigValue(
                    self.name, value, f"Value must be at least {_num(self.at_least)}"
                )
            if self.at_most is not None and parsed > self.at_most:
                raise InvalidConfigValue(
                    self.name, value, f"Value must be no more than {_num(self.at_most)}"
                )
        if self.valid is not None:
            items = parsed if isinstance(parsed, list) else [parsed]
            for item in items:
                ok = (
                    str(item).lower() in {v.lower() for v in self.valid}
                    if self.case_insensitive
                    else item in self.valid
                )
                if not ok:
                    how = " (case insensitive)" if self.case_insensitive else ""
                    raise InvalidConfigValue(
                        self.name, item, f"String must be one of{how}: {', '.join(self.valid)}"
                    )


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def parse_value(name: str, ctype: ConfigType, value: str) -> object:
    """ConfigDef.parseType for a value given as text."""
    text = value.strip()
    if ctype == ConfigType.BOOLEAN:
        if text.lower() not in ("true", "false"):
            raise InvalidConfigValue(name, value, "Expected value to be either true or false")
        return text.lower() == "true"
    if ctype in (ConfigType.INT, ConfigType.SHORT, ConfigType.LONG):
        lo, hi = {
            ConfigType.INT: (INT_MIN, INT_MAX),
            ConfigType.SHORT: (SHORT_MIN, SHORT_MAX),
            ConfigType.LONG: (LONG_MIN, LONG_MAX),
        }[ctype]
        try:
            n = int(text, 10)
        except ValueError:
            n = None
        if n is None or not lo <= n <= hi or "_" in text:
            raise InvalidConfigValue(name, value, f"Not a number of type {ctype.name}")
        return n
    if ctype == ConfigType.DOUBLE:
        try:
            return float(text)
        except ValueError:
            raise InvalidConfigValue(name, value, "Not a number of type DOUBLE") from None
    if ctype == ConfigType.LIST:
        return split_list(text)
    return text


def split_list(value: str) -> list[str]:
    """ConfigDef's LIST: comma-separated, blanks around items dropped, "" is empty."""
    text = value.strip()
    return [] if not text else [item.strip() for item in text.split(",")]


_SENSITIVE_SUFFIXES = ("sasl.jaas.config", ".password", "ssl.keystore.key", ".token")


def is_sensitive_config(name: str) -> bool:
    """Whether a config holds a secret (Kafka's PASSWORD type, and JAAS configs): never
    shown by DescribeConfigs, logged or dumped."""
    return name.endswith(_SENSITIVE_SUFFIXES)
