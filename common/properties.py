"""Kafka's `.properties` files (the subset of java.util.Properties config files use),
`--override key=value` arguments, and `Properties`: the typed getters every config
(broker, controller, log) reads its values through, so a bad value is refused the same
way everywhere, with a message naming the property and the value.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

INT_MAX = 2**31 - 1
_HOST_PORT = re.compile(r"^\[?(?P<host>[^\[\]@,\s]*?)\]?:(?P<port>[0-9]{1,5})$")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<rest>.*)$")


class ConfigError(ValueError):
    """A configuration value that cannot be used; the message names the property."""


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """The subset of java.util.Properties that config files use: `#`/`!` comments,
    `key=value`, `key: value` or `key value`, backslash line continuations, and the
    escapes \\t \\n \\\\ \\= \\: \\#. Later keys win, as in Java."""
    props: dict[str, str] = {}
    logical: list[str] = []
    for raw in text.splitlines():
        line = raw.lstrip()  # Java strips leading blanks of continuation lines too
        if not logical and (not line or line[0] in "#!"):
            continue
        # An odd number of trailing backslashes continues the line.
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            logical.append(line[:-1])
            continue
        logical.append(line)
        entry, logical = "".join(logical), []
        key, value = _split_entry(entry)
        if not key:
            raise ConfigError(f"{source}: a line has a value but no key: {entry[:60]!r}")
        props[key] = value
    if logical:
        key, value = _split_entry("".join(logical))
        if key:
            props[key] = value
    return props


def _split_entry(entry: str) -> tuple[str, str]:
    i, n = 0, len(entry)
    while i < n:
        c = entry[i]
        if c == "\\":
            i += 2
            continue
        if c in "=: \t":
            break
        i += 1
    key = entry[:i]
    rest = entry[i:].lstrip(" \t")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t")
    return _unescape(key), _unescape(rest)


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            nxt = s[i + 1]
            out.append({"t": "\t", "n": "\n", "r": "\r", "f": "\f"}.get(nxt, nxt))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def parse_overrides(pairs: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--override expects key=value, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def read_properties(
    path: str | Path | None = None, overrides: Mapping[str, str] | Iterable[str] = ()
) -> dict[str, str]:
    """Properties from `path` (optional) with `overrides` (a mapping or `key=value`
    strings) on top: what `--config FILE --override k=v ...` means for every process."""
    props: dict[str, str] = {}
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from None
        props.update(parse_properties(text, str(path)))
    props.update(overrides if isinstance(overrides, Mapping) else parse_overrides(overrides))
    return props


# -- typed values ---------------------------------------------------------------------------


class Properties:
    """A config's properties (after overrides) with typed getters.

    A property that is absent or blank is unset: the getters fall back to `defaults`
    (Kafka's default as text, the way DescribeConfigs shows it; validated like a given
    value), then to the getter's own `default`, else refuse it as required.
    """

    def __init__(
        self, values: Mapping[str, str], defaults: Mapping[str, str | None] | None = None
    ) -> None:
        self.values = dict(values)
        self._defaults = defaults or {}

    def get_string(self, name: str, default: str | None = None) -> str | None:
        """The value (blanks around it stripped), else its default, else `default`."""
        raw = self.values.get(name)
        if raw is None or raw.strip() == "":
            fallback = self._defaults.get(name)
            return default if fallback is None else fallback
        return raw.strip()

    def required(self, name: str) -> str:
        value = self.get_string(name)
        if value is None:
            raise ConfigError(f"{name} is required")
        return value

    def get_int(
        self, name: str, default: int | None = None, *, min: int, max: int = INT_MAX
    ) -> int:
        """An integer in [min, max]; `default` (when unset) is taken as it is."""
        text = self.get_string(name)
        if text is None:
            if default is None:
                raise ConfigError(f"{name} is required")
            return default
        try:
            value = int(text)
        except ValueError:
            shown = self._shown(name, text)
            raise ConfigError(f"{name} must be an integer, got {shown!r}") from None
        if not min <= value <= max:
            raise ConfigError(f"{name} must be in [{min}, {max}], got {value}")
        return value

    def get_bool(self, name: str, default: bool | None = None) -> bool:
        """`true` or `false`, in any case (Kafka's BOOLEAN type)."""
        text = self.get_string(name)
        if text is None:
            if default is None:
                raise ConfigError(f"{name} is required")
            return default
        value = text.lower()
        if value not in ("true", "false"):
            raise ConfigError(f"{name} must be true or false, got {self._shown(name, text)!r}")
        return value == "true"

    def get_list(self, name: str, default: str | None = None) -> list[str]:
        """A comma-separated list, items stripped, empty items dropped (unset: [])."""
        text = self.get_string(name, default)
        return [item.strip() for item in (text or "").split(",") if item.strip()]

    def get_listeners(self, name: str) -> list[tuple[str, str, int]]:
        """`NAME://host:port,...` as (name, host, port), names as written. Port 0 binds an
        ephemeral port (Kafka's meaning in `listeners`)."""
        out: list[tuple[str, str, int]] = []
        for item in self.required(name).split(","):
            m = _LISTENER.match(item.strip())
            if not m:
                raise ConfigError(f"{name}: expected NAME://host:port, got {item.strip()!r}")
            host, port = parse_host_port(name, m["rest"], ephemeral=True)
            out.append((m["name"], host, port))
        return out

    def get_node_addresses(self, name: str) -> dict[int, tuple[str, int]]:
        """`id@host:port,...` (controller.quorum.voters' format): node id -> (host, port).
        These are addresses other processes connect to, so port 0 is refused."""
        out: dict[int, tuple[str, int]] = {}
        for item in self.required(name).split(","):
            item = item.strip()
            node, sep, address = item.partition("@")
            if not sep or not node.strip().isdigit():
                raise ConfigError(f"{name}: expected id@host:port, got {item!r}")
            node_id = int(node)
            if node_id in out:
                raise ConfigError(f"{name}: node {node_id} appears twice")
            out[node_id] = parse_host_port(name, address, ephemeral=False)
        return out

    def _shown(self, name: str, text: str) -> str:
        """The bad value as the user wrote it (a default is shown as itself)."""
        return self.values.get(name, text)


def parse_host_port(name: str, text: str, *, ephemeral: bool) -> tuple[str, int]:
    """`host:port` or `[v6]:port` (host may be empty: all interfaces). Port 0 is
    accepted only where it means "bind an ephemeral port" (`ephemeral`)."""
    m = _HOST_PORT.match(text.strip())
    if not m:
        raise ConfigError(f"{name}: expected host:port, got {text!r}")
    port = int(m["port"])
    if not (0 if ephemeral else 1) <= port < 65536:
        raise ConfigError(f"{name}: port {port} is out of range in {text!r}")
    return m["host"], port


def join_host_port(host: str, port: int) -> str:
    """The inverse of parse_host_port (IPv6 hosts in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
