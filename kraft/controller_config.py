"""A controller process's configuration: a Kafka-style `.properties` file plus
`--override key=value` pairs, checked up front so a bad value stops start-up with a
message naming the property (never a traceback from deep inside pysyncobj or aiohttp).

Kafka's names and defaults where the concept exists (`node.id`, `process.roles`,
`controller.quorum.voters`, `listeners`, `metadata.log.dir`, ...). Ours, where it does
not: `controller.quorum.http.endpoints` (each voter's HTTP API, for redirects) and
`controller.quorum.password` (pysyncobj encrypts and authenticates Raft traffic with it;
its wire format is pickle, so an open Raft port without one is code execution).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kraft.controller import ControllerConfig
from storage.config import ConfigError
from storage.properties import read_properties

__all__ = ["ConfigError", "ControllerNodeConfig", "load_config"]

DEFAULT_LISTENER_NAME = "CONTROLLER"
_HOST_PORT = re.compile(r"^\[?(?P<host>[^\[\]@,\s]*?)\]?:(?P<port>[0-9]{1,5})$")
_LISTENER = re.compile(r"^(?P<name>[A-Za-z0-9_]+)://(?P<rest>.*)$")


@dataclass(frozen=True)
class ControllerNodeConfig:
    node_id: int
    voters: dict[int, tuple[str, int]]  # node id -> Raft (host, port)
    http_endpoints: dict[int, tuple[str, int]]  # node id -> HTTP API (host, port)
    listener: tuple[str, int]  # where this node's HTTP API binds
    metadata_log_dir: Path
    quorum_password: str = field(repr=False)
    session_timeout_ms: int = 9000
    num_partitions: int = 1
    default_replication_factor: int = 1
    max_retained_records: int = 50_000
    max_body_bytes: int = 1 << 20
    unclean_leader_election: bool = False

    def controller_config(self) -> ControllerConfig:
        """What the sans-I/O decisions need (kraft.controller)."""
        return ControllerConfig(
            node_id=self.node_id,
            session_timeout_ms=self.session_timeout_ms,
            num_partitions=self.num_partitions,
            default_replication_factor=self.default_replication_factor,
            unclean_leader_election=self.unclean_leader_election,
        )

    def http_address(self, node_id: int) -> str | None:
        """The "host:port" of a voter's HTTP API, for redirects."""
        ep = self.http_endpoints.get(node_id)
        return None if ep is None else _join_host_port(*ep)


def _required(props: Mapping[str, str], name: str) -> str:
    value = props.get(name, "").strip()
    if not value:
        raise ConfigError(f"{name} is required")
    return value


def _int(props: Mapping[str, str], name: str, default: int, lo: int, hi: int = 2**31 - 1) -> int:
    raw = props.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {raw!r}") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name} must be in [{lo}, {hi}], got {value}")
    return value


def _bool(props: Mapping[str, str], name: str, default: bool) -> bool:
    raw = props.get(name)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise ConfigError(f"{name} must be true or false, got {raw!r}")
    return value == "true"


def _host_port(name: str, text: str) -> tuple[str, int]:
    m = _HOST_PORT.match(text.strip())
    if not m:
        raise ConfigError(f"{name}: expected host:port, got {text!r}")
    port = int(m["port"])
    if not 0 < port < 65536:
        raise ConfigError(f"{name}: port {port} is out of range in {text!r}")
    return m["host"], port


def _join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _id_map(props: Mapping[str, str], name: str) -> dict[int, tuple[str, int]]:
    """`1@host:port,2@host:port,...` (controller.quorum.voters' format)."""
    out: dict[int, tuple[str, int]] = {}
    for item in _required(props, name).split(","):
        item = item.strip()
        node, sep, address = item.partition("@")
        if not sep or not node.strip().isdigit():
            raise ConfigError(f"{name}: expected id@host:port, got {item!r}")
        node_id = int(node)
        if node_id in out:
            raise ConfigError(f"{name}: node {node_id} appears twice")
        out[node_id] = _host_port(name, address)
    return out


def _listener(
    props: Mapping[str, str], node_id: int, http: dict[int, tuple[str, int]]
) -> tuple[str, int]:
    """The HTTP listener: the entry of `listeners` named by controller.listener.names
    (default CONTROLLER), or the only one; defaults to this node's http endpoint."""
    raw = props.get("listeners", "").strip()
    if not raw:
        return http[node_id]
    names = [
        n.strip()
        for n in props.get("controller.listener.names", DEFAULT_LISTENER_NAME).split(",")
        if n.strip()
    ]
    parsed: list[tuple[str, tuple[str, int]]] = []
    for item in raw.split(","):
        m = _LISTENER.match(item.strip())
        if not m:
            raise ConfigError(f"listeners: expected NAME://host:port, got {item.strip()!r}")
        parsed.append((m["name"], _host_port("listeners", m["rest"])))
    chosen = [hp for n, hp in parsed if n in names]
    if not chosen and len(parsed) == 1:
        chosen = [parsed[0][1]]
    if len(chosen) != 1:
        raise ConfigError(
            f"listeners: need exactly one listener named {' or '.join(names)} for the "
            f"controller's HTTP API, got {raw!r}"
        )
    host, port = chosen[0]
    if port != http[node_id][1]:
        raise ConfigError(
            f"listeners: port {port} differs from this node's entry in "
            f"controller.quorum.http.endpoints ({_join_host_port(*http[node_id])}); "
            "the other controllers redirect writes there"
        )
    return host, port


def load_config(
    path: str | Path | None = None, overrides: Mapping[str, str] | Iterable[str] = ()
) -> ControllerNodeConfig:
    """Read `path` (optional), apply overrides (a mapping or `key=value` strings)."""
    return from_properties(read_properties(path, overrides))


def from_properties(props: Mapping[str, str]) -> ControllerNodeConfig:
    roles = [r.strip() for r in _required(props, "process.roles").split(",") if r.strip()]
    if roles != ["controller"]:
        raise ConfigError(
            f"process.roles must be controller for a controller process, got {','.join(roles)!r}"
            " (combined broker,controller mode is not supported)"
        )
    node_id = _int(props, "node.id", -1, 0)
    if node_id < 0:
        raise ConfigError("node.id is required")
    voters = _id_map(props, "controller.quorum.voters")
    if node_id not in voters:
        raise ConfigError(
            f"controller.quorum.voters must include this node (node.id={node_id}), "
            f"has {sorted(voters)}"
        )
    http = _id_map(props, "controller.quorum.http.endpoints")
    if set(http) != set(voters):
        raise ConfigError(
            "controller.quorum.http.endpoints must name the same nodes as "
            f"controller.quorum.voters: {sorted(http)} vs {sorted(voters)}"
        )
    return ControllerNodeConfig(
        node_id=node_id,
        voters=voters,
        http_endpoints=http,
        listener=_listener(props, node_id, http),
        metadata_log_dir=Path(_required(props, "metadata.log.dir")),
        quorum_password=_required(props, "controller.quorum.password"),
        session_timeout_ms=_int(props, "broker.session.timeout.ms", 9000, 100),
        num_partitions=_int(props, "num.partitions", 1, 1, 100_000),
        default_replication_factor=_int(props, "default.replication.factor", 1, 1, 32_767),
        max_retained_records=_int(props, "metadata.max.retained.records", 50_000, 100),
        # Kafka's name for the largest request; its 100 MiB default is for the binary
        # protocol, a JSON admin API needs far less.
        max_body_bytes=_int(props, "socket.request.max.bytes", 1 << 20, 1024),
        unclean_leader_election=_bool(props, "unclean.leader.election.enable", False),
    )
