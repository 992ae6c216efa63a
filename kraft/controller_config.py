"""A controller process's configuration: a Kafka-style `.properties` file plus
`--override key=value` pairs, checked up front so a bad value stops start-up with a
message naming the property (never a traceback from deep inside pysyncobj or aiohttp).

Kafka's names and defaults where the concept exists (`node.id`, `process.roles`,
`controller.quorum.voters`, `listeners`, `metadata.log.dir`, ...). Ours, where it does
not: `controller.quorum.http.endpoints` (each voter's HTTP API, for redirects) and
`controller.quorum.password` (pysyncobj encrypts and authenticates Raft traffic with it;
its wire format is pickle, so an open Raft port without one is code execution).

Security of the HTTP API (common/controller_plane.py reads the shared rules): TLS when
`listener.security.protocol.map` maps the controller listener to SSL, with the `ssl.*`
properties (and `listener.name.<listener>.ssl.*`) of common/tls.py, `ssl.client.auth`
for client certificates; `controller.quorum.http.token` (ours) for the bearer token;
`super.users` to restrict which certificate principals are admitted (kraft/http_auth.py).

Values are read through common/properties.py's typed getters (the broker's config uses
the same ones). Every address here is one the other controllers connect to, so none may
have port 0 (in `listeners` port 0 parses, as in Kafka, but must still match this node's
HTTP endpoint).
"""

from __future__ import annotations

import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from common.controller_plane import SSL, http_token, plane_protocol
from common.properties import ConfigError, Properties, join_host_port, read_properties
from common.tls import listener_properties, server_context
from kraft.decision import ControllerConfig
from kraft.http_auth import ApiAuth

__all__ = ["ConfigError", "ControllerNodeConfig", "load_config"]

DEFAULT_LISTENER_NAME = "CONTROLLER"


@dataclass(frozen=True)
class ControllerNodeConfig:
    node_id: int
    voters: dict[int, tuple[str, int]]  # node id -> Raft (host, port)
    http_endpoints: dict[int, tuple[str, int]]  # node id -> HTTP API (host, port)
    listener: tuple[str, int]  # where this node's HTTP API binds
    metadata_log_dir: Path
    quorum_password: str = field(repr=False)
    session_timeout_ms: int = 9000
    disconnect_grace_ms: int = 3000
    num_partitions: int = 1
    default_replication_factor: int = 1
    max_retained_records: int = 50_000
    # controller.max.inflight.entries (ours): Raft entries the active controller keeps in
    # flight, each decided on the projection of those before it (kraft/pipeline.py);
    # 1 waits for each entry to commit before deciding the next. Default 1: with three
    # controllers on one 2-core host (commit ~1 ms, CPU-bound) 4 in flight measured no
    # faster (AlterPartition 0.77x-0.86x: more, smaller entries and the projections cost
    # CPU); it pays where a commit waits on the network or a disk, not on the CPU.
    max_inflight_entries: int = 1
    max_body_bytes: int = 1 << 20
    # controller.quorum.fsync.enable (ours): fsync the Raft journal and term/vote at Raft's
    # durable points (kraft/raft_durability.py). Off is a debug switch: a majority of
    # controllers losing power can then lose committed metadata.
    quorum_fsync: bool = True
    unclean_leader_election: bool = False
    eligible_leader_replicas_enable: bool = True
    min_insync_replicas: int = 1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_per_broker_percentage: int = 10
    leader_imbalance_check_interval_ms: int = 300_000
    # The HTTP API's TLS (None: plain http) and who may call it.
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    auth: ApiAuth = field(default_factory=ApiAuth)

    def controller_config(self) -> ControllerConfig:
        """What the sans-I/O decisions need (kraft.controller)."""
        return ControllerConfig(
            node_id=self.node_id,
            session_timeout_ms=self.session_timeout_ms,
            disconnect_grace_ms=self.disconnect_grace_ms,
            num_partitions=self.num_partitions,
            default_replication_factor=self.default_replication_factor,
            unclean_leader_election=self.unclean_leader_election,
            eligible_leader_replicas_enable=self.eligible_leader_replicas_enable,
            min_insync_replicas=self.min_insync_replicas,
            auto_leader_rebalance_enable=self.auto_leader_rebalance_enable,
            leader_imbalance_per_broker_percentage=self.leader_imbalance_per_broker_percentage,
            leader_imbalance_check_interval_ms=self.leader_imbalance_check_interval_ms,
        )

    def http_address(self, node_id: int) -> str | None:
        """The "host:port" of a voter's HTTP API, for redirects."""
        ep = self.http_endpoints.get(node_id)
        return None if ep is None else join_host_port(*ep)


def _listener(
    props: Properties, node_id: int, http: dict[int, tuple[str, int]]
) -> tuple[str, str, int]:
    """The HTTP listener (name, host, port): the entry of `listeners` named by
    controller.listener.names (default CONTROLLER), or the only one; defaults to this
    node's http endpoint."""
    names = props.get_list("controller.listener.names", DEFAULT_LISTENER_NAME)
    if props.get_string("listeners") is None:
        return (names[0].upper(), *http[node_id])
    parsed = props.get_listeners("listeners")
    chosen = [(n.upper(), host, port) for n, host, port in parsed if n in names]
    if not chosen and len(parsed) == 1:
        chosen = [(parsed[0][0].upper(), *parsed[0][1:])]
    if len(chosen) != 1:
        raise ConfigError(
            f"listeners: need exactly one listener named {' or '.join(names)} for the "
            f"controller's HTTP API, got {props.get_string('listeners')!r}"
        )
    name, host, port = chosen[0]
    if port != http[node_id][1]:
        raise ConfigError(
            f"listeners: port {port} differs from this node's entry in "
            f"controller.quorum.http.endpoints ({join_host_port(*http[node_id])}); "
            "the other controllers redirect writes there"
        )
    return name, host, port


def _security(values: Mapping[str, str], listener: str) -> tuple[ssl.SSLContext | None, ApiAuth]:
    """The listener's TLS context (built now, so a bad file stops start-up) and the API's
    authentication policy."""
    props = Properties(values)
    context = None
    client_certificates = False
    if plane_protocol(values, listener) == SSL:
        tls = listener_properties(values, listener)
        context = server_context(tls)
        client_certificates = (tls.get("ssl.client.auth") or "none").strip().lower() != "none"
    super_users = frozenset(
        u.strip() for u in (props.get_string("super.users") or "").split(";") if u.strip()
    )
    for user in super_users:
        if not user.startswith("User:"):
            raise ConfigError(
                f"super.users: expected User:<name> entries separated by ';', got {user!r}"
            )
    return context, ApiAuth(http_token(values), client_certificates, super_users)


def load_config(
    path: str | Path | None = None, overrides: Mapping[str, str] | Iterable[str] = ()
) -> ControllerNodeConfig:
    """Read `path` (optional), apply overrides (a mapping or `key=value` strings)."""
    return from_properties(read_properties(path, overrides))


def from_properties(values: Mapping[str, str]) -> ControllerNodeConfig:
    props = Properties(values)
    roles = [r.strip() for r in props.required("process.roles").split(",") if r.strip()]
    if roles != ["controller"]:
        raise ConfigError(
            f"process.roles must be controller for a controller process, got {','.join(roles)!r}"
            " (combined broker,controller mode is not supported)"
        )
    node_id = props.get_int("node.id", min=0)
    voters = props.get_node_addresses("controller.quorum.voters")
    if node_id not in voters:
        raise ConfigError(
            f"controller.quorum.voters must include this node (node.id={node_id}), "
            f"has {sorted(voters)}"
        )
    http = props.get_node_addresses("controller.quorum.http.endpoints")
    if set(http) != set(voters):
        raise ConfigError(
            "controller.quorum.http.endpoints must name the same nodes as "
            f"controller.quorum.voters: {sorted(http)} vs {sorted(voters)}"
        )
    listener_name, host, port = _listener(props, node_id, http)
    ssl_context, auth = _security(values, listener_name)
    return ControllerNodeConfig(
        node_id=node_id,
        voters=voters,
        http_endpoints=http,
        listener=(host, port),
        metadata_log_dir=Path(props.required("metadata.log.dir")),
        quorum_password=props.required("controller.quorum.password"),
        session_timeout_ms=props.get_int("broker.session.timeout.ms", 9000, min=100),
        # Ours (Kafka waits out the session): 1.5 broker heartbeat intervals by default.
        disconnect_grace_ms=props.get_int("broker.disconnect.fence.grace.ms", 3000, min=0),
        num_partitions=props.get_int("num.partitions", 1, min=1, max=100_000),
        default_replication_factor=props.get_int(
            "default.replication.factor", 1, min=1, max=32_767
        ),
        max_retained_records=props.get_int("metadata.max.retained.records", 50_000, min=100),
        max_inflight_entries=props.get_int("controller.max.inflight.entries", 1, min=1, max=64),
        # Kafka's name for the largest request; its 100 MiB default is for the binary
        # protocol, a JSON admin API needs far less.
        max_body_bytes=props.get_int("socket.request.max.bytes", 1 << 20, min=1024),
        quorum_fsync=props.get_bool("controller.quorum.fsync.enable", True),
        unclean_leader_election=props.get_bool("unclean.leader.election.enable", False),
        # KIP-966 (Kafka 3.7-3.9's name; there a metadata.version feature): on by default here.
        eligible_leader_replicas_enable=props.get_bool("eligible.leader.replicas.enable", True),
        min_insync_replicas=props.get_int("min.insync.replicas", 1, min=1, max=32_767),
        auto_leader_rebalance_enable=props.get_bool("auto.leader.rebalance.enable", True),
        leader_imbalance_per_broker_percentage=props.get_int(
            "leader.imbalance.per.broker.percentage", 10, min=0, max=100
        ),
        # Seconds in Kafka; at least 1 s so a typo cannot turn the check into a busy loop.
        leader_imbalance_check_interval_ms=1000
        * props.get_int("leader.imbalance.check.interval.seconds", 300, min=1, max=86_400 * 7),
        ssl_context=ssl_context,
        auth=auth,
    )
