"""Kafka's `.properties` files (the subset of java.util.Properties config files use) and
`--override key=value` arguments, shared by the controller's and the broker's configs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from storage.config import ConfigError


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


# -- typed values ---------------------------------------------------------------------------


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
