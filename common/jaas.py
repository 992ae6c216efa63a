"""`sasl.jaas.config` values, as Kafka parses them (org.apache.kafka.common.security.
JaasConfig): `<LoginModule class> <flag> key="value" ... ;`.

The broker reads PLAIN users (`user_<name>="<password>"`) and its own inter-broker
credentials (`username`, `password`) from a listener's JAAS config; clients (Spark,
the tools) read `username` and `password`. Values never appear in error messages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from common.properties import ConfigError

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM_LOGIN_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"

_HEAD = re.compile(
    r"\s*(?P<module>[A-Za-z_$][\w.$]*)\s+(?P<flag>required|requisite|sufficient|optional)\b"
)
_OPTION = re.compile(
    r'\s*(?P<key>[A-Za-z_][\w.\-]*)\s*=\s*(?:"(?P<q>(?:[^"\\]|\\.)*)"|(?P<bare>[^\s;"]+))'
)


@dataclass(frozen=True)
class JaasEntry:
    module: str
    flag: str
    options: dict[str, str] = field(repr=False)  # may hold passwords: never printed

    def __repr__(self) -> str:
        return f"JaasEntry({self.module} {self.flag}, options={sorted(self.options)})"


def parse_jaas_config(text: str, name: str = "sasl.jaas.config") -> JaasEntry:
    """One login module entry (Kafka allows exactly one in `sasl.jaas.config`)."""
    m = _HEAD.match(text)
    if m is None:
        raise ConfigError(f"{name}: expected '<LoginModule> required key=\"value\" ... ;'")
    pos = m.end()
    options: dict[str, str] = {}
    while True:
        rest = text[pos:].lstrip()
        if rest.startswith(";"):
            if rest[1:].strip():
                raise ConfigError(f"{name}: only one login module is allowed")
            break
        if not rest:
            raise ConfigError(f"{name}: the login module entry must end with ';'")
        o = _OPTION.match(text, pos)
        if o is None:
            raise ConfigError(f"{name}: cannot parse the options after {m['module']}")
        value = o["q"] if o["q"] is not None else o["bare"]
        options[o["key"]] = re.sub(r"\\(.)", r"\1", value)
        pos = o.end()
    return JaasEntry(m["module"], m["flag"], options)


def client_credentials(text: str, name: str = "sasl.jaas.config") -> tuple[str, str]:
    """(username, password) of a client's JAAS config."""
    entry = parse_jaas_config(text, name)
    user, password = entry.options.get("username"), entry.options.get("password")
    if user is None or password is None:
        raise ConfigError(f"{name}: username and password are required")
    return user, password


def plain_users(entry: JaasEntry) -> dict[str, str]:
    """The PLAIN users a broker accepts: `user_<name>="<password>"` options."""
    return {k[5:]: v for k, v in entry.options.items() if k.startswith("user_") and len(k) > 5}
