"""A broker process's configuration: a Kafka-style `.properties` file plus
`--override key=value` pairs, checked up front so that a bad value stops start-up with
a message naming the property.

Kafka's names and defaults wherever the concept exists (`node.id`, `listeners`,
`log.dirs`, `min.insync.replicas`, `replica.lag.time.max.ms`, ...). Ours, where it does
not: `controller.quorum.http.endpoints` (each controller's HTTP API, which brokers talk
to instead of Kafka's controller RPCs) and `controlled.shutdown.timeout.ms`.

Values are read through common/properties.py's typed getters (the controller's config
uses the same ones). Port 0 in `listeners` binds an ephemeral port, as in Kafka.

Listeners: `listeners` names any number of them (`SASL_SSL://127.0.0.1:9093,INTERNAL://
127.0.0.1:9094`), each with a security protocol from `listener.security.protocol.map`
(Kafka's default maps PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL to themselves). Their
TLS and SASL settings are checked here too (broker/security/listener_security.py), so a
missing key file or an unsupported mechanism stops start-up. The inter-broker listener
is `inter.broker.listener.name` or `security.inter.broker.protocol` (not both); without
either, PLAINTEXT if there is such a listener, else the first one (ours: Kafka insists
on PLAINTEXT). Ours: `ssl.handshake.timeout.ms`, how long a TLS handshake may take.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker.group.config import GroupConfig
from broker.security.authorizer import STANDARD_AUTHORIZER, parse_super_users
from broker.security.listener_security import (
    SECURITY_PROTOCOLS,
    InterBrokerClientSecurity,
    ListenerSecurity,
    inter_broker_client_security,
    listener_security,
)
from broker.txn.config import TxnConfig
from common.config_def import is_sensitive_config
from common.properties import ConfigError, Properties, read_properties
from storage.config import LogConfig
from storage.log_manager import LogManagerConfig

__all__ = ["BrokerConfig", "ConfigError", "Listener", "load_config"]

# Every broker property we read, with Kafka's default (as text, the way DescribeConfigs
# shows it). None: no default (required, or absent unless set).
DEFAULTS: dict[str, str | None] = {
    "node.id": None,
    "process.roles": None,
    "controller.quorum.http.endpoints": None,
    "listeners": "PLAINTEXT://:9092",
    "advertised.listeners": None,
    "inter.broker.listener.name": None,
    "security.inter.broker.protocol": None,  # Kafka: PLAINTEXT (see the module docstring)
    "listener.security.protocol.map": (
        "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"
    ),
    "ssl.client.auth": "none",
    "ssl.handshake.timeout.ms": "10000",
    "sasl.enabled.mechanisms": "GSSAPI",
    "sasl.mechanism.inter.broker.protocol": "GSSAPI",
    "connections.max.idle.ms": "600000",
    "connection.failed.authentication.delay.ms": "100",
    "sasl.server.max.receive.size": "524288",
    "log.dirs": None,
    "num.partitions": "1",
    "default.replication.factor": "1",
    "auto.create.topics.enable": "true",
    "message.max.bytes": "1048588",
    "socket.request.max.bytes": "104857600",
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
    "replica.lag.time.max.ms": "30000",
    "min.insync.replicas": "1",
    "eligible.leader.replicas.enable": "true",
    "broker.rack": None,
    "cluster.id": None,
    "replica.fetch.max.bytes": "1048576",
    "replica.fetch.response.max.bytes": "10485760",
    "replica.fetch.wait.max.ms": "500",
    "replica.fetch.min.bytes": "1",
    "replica.fetch.backoff.ms": "1000",
    "replica.socket.timeout.ms": "30000",
    # bytes/s for replicas a reassignment is adding (Long.MAX_VALUE: not throttled); a
    # dynamic broker config (cluster default or per broker) overrides it
    "follower.replication.throttled.rate": str(2**63 - 1),
    "replication.quota.window.num": "11",
    "replication.quota.window.size.seconds": "1",
    "replica.high.watermark.checkpoint.interval.ms": "5000",
    "request.timeout.ms": "30000",
    "controlled.shutdown.timeout.ms": "30000",
    "num.recovery.threads.per.data.dir": "2",
    "log.retention.check.interval.ms": "300000",
    "log.flush.offset.checkpoint.interval.ms": "60000",
    "log.cleaner.enable": "true",
    "log.cleaner.backoff.ms": "15000",
    # The group coordinator and __consumer_offsets.
    "offsets.topic.num.partitions": "50",
    "offsets.topic.replication.factor": "3",
    "offsets.topic.segment.bytes": "104857600",
    "offsets.commit.timeout.ms": "5000",
    "offsets.retention.minutes": "10080",
    "offsets.retention.check.interval.ms": "600000",
    "offset.metadata.max.bytes": "4096",
    "group.min.session.timeout.ms": "6000",
    "group.max.session.timeout.ms": "1800000",
    "group.initial.rebalance.delay.ms": "3000",
    "group.max.size": "2147483647",
    # The transaction coordinator and __transaction_state.
    "transaction.state.log.num.partitions": "50",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.segment.bytes": "104857600",
    "transaction.max.timeout.ms": "900000",
    "transactional.id.expiration.ms": "604800000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    # Authorization: off while authorizer.class.name is empty.
    "authorizer.class.name": "",
    "super.users": None,
    "allow.everyone.if.no.acl.found": "false",
}
# The authorizer class names that turn authorization on (ours has StandardAuthorizer's
# semantics; AclAuthorizer is the ZooKeeper-era name older configs carry).
AUTHORIZER_CLASS_NAMES = (STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer")


@dataclass(frozen=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int
    controller_endpoints: dict[int, tuple[str, int]]  # node id -> HTTP (host, port)
    listeners: tuple[Listener, ...]  # where we bind
    advertised_listeners: tuple[Listener, ...]  # what clients and other brokers are told
    inter_broker_listener_name: str  # followers fetch from leaders on this listener
    log_dirs: tuple[Path, ...]
    log_config: LogConfig  # broker defaults for every log (topic configs layer on top)
    log_manager_config: LogManagerConfig
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    heartbeat_interval_ms: int = 2000
    session_timeout_ms: int = 9000
    replica_lag_time_max_ms: int = 30000
    min_insync_replicas: int = 1
    # KIP-966 (Kafka ties it to metadata.version; this is the controller's property name):
    # a leader's HW stands still while its ISR is below min.insync.replicas, so replicas
    # leaving the ISR then hold every record below it and may lead (eligible leaders).
    eligible_leader_replicas_enable: bool = True
    rack: str | None = None
    cluster_id: str = "kraft-py"
    replica_fetch_max_bytes: int = 1048576
    replica_fetch_response_max_bytes: int = 10485760
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_min_bytes: int = 1
    replica_fetch_backoff_ms: int = 1000
    replica_socket_timeout_ms: int = 30000
    follower_replication_throttled_rate: int = 2**63 - 1
    replication_quota_window_num: int = 11
    replication_quota_window_size_s: int = 1
    hw_checkpoint_interval_ms: int = 5000
    request_timeout_ms: int = 30000
    controlled_shutdown_timeout_ms: int = 30000
    group_config: GroupConfig = field(default_factory=GroupConfig)
    offsets_topic_replication_factor: int = 3
    offsets_topic_segment_bytes: int = 104857600
    offsets_commit_timeout_ms: int = 5000
    txn_config: TxnConfig = field(default_factory=TxnConfig)
    txn_topic_replication_factor: int = 3
    txn_topic_min_isr: int = 2
    txn_topic_segment_bytes: int = 104857600
    # Security by listener name (every listener has one), and the inter-broker client's.
    listener_security: dict[str, ListenerSecurity] = field(default_factory=dict, repr=False)
    inter_broker_security: InterBrokerClientSecurity | None = field(default=None, repr=False)
    ssl_handshake_timeout_ms: int = 10000
    connections_max_idle_ms: int = 600000
    failed_authentication_delay_ms: int = 100
    sasl_server_max_receive_size: int = 524288  # frames before a SASL login completes
    authorizer_enabled: bool = False  # authorizer.class.name is set
    super_users: frozenset[str] = frozenset()  # super.users: "User:a;User:b"
    allow_everyone_if_no_acl_found: bool = False
    # The properties as given (after overrides), for DescribeConfigs.
    properties: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def listener(self) -> Listener:
        """The first listener (where a single-listener broker serves everyone)."""
        return self.listeners[0]

    def security(self, name: str) -> ListenerSecurity:
        """Listener `name`'s security (PLAINTEXT for a listener built without any)."""
        found = self.listener_security.get(name)
        return found if found is not None else ListenerSecurity(name, "PLAINTEXT")

    def advertised(self, name: str) -> Listener | None:
        return next((x for x in self.advertised_listeners if x.name == name), None)

    def described_configs(self) -> dict[str, tuple[str | None, bool]]:
        """name -> (value, is_default) for every known property and every one given;
        secrets (JAAS configs, keys, passwords) are None, as Kafka shows its
        PASSWORD-typed configs in DescribeConfigs."""
        out: dict[str, tuple[str | None, bool]] = {}
        for name, default in DEFAULTS.items():
            if name in self.properties:
                out[name] = (self.properties[name], False)
            elif default is not None:
                out[name] = (default, True)
        for name, value in self.properties.items():
            out.setdefault(name, (value, False))
        return {k: (None if is_sensitive(k) else v, d) for k, (v, d) in out.items()}


def is_sensitive(name: str) -> bool:
    """Whether a property holds a secret (never shown, logged or dumped)."""
    return is_sensitive_config(name)


# -- .properties ----------------------------------------------------------------------------


def _controller_endpoints(props: Properties) -> dict[int, tuple[str, int]]:
    name = "controller.quorum.http.endpoints"
    out = props.get_node_addresses(name)
    for node, (host, port) in out.items():
        if not host:
            raise ConfigError(f"{name}: node {node} ({host}:{port}) needs a host")
    return out


def _listeners(props: Properties, name: str) -> tuple[Listener, ...]:
    protocols = _protocol_map(props)
    out: list[Listener] = []
    for given_name, host, port in props.get_listeners(name):
        lname = given_name.upper()
        if any(x.name == lname for x in out):
            raise ConfigError(f"{name}: listener {lname} appears twice")
        if port and any((x.host, x.port) == (host, port) for x in out):
            raise ConfigError(f"{name}: listeners {lname} and another both use {host}:{port}")
        protocol = protocols.get(lname)
        if protocol is None:
            raise ConfigError(
                f"listener.security.protocol.map: no security protocol for listener {lname} "
                f"(in {name}); add {lname}:<{'|'.join(SECURITY_PROTOCOLS)}>"
            )
        out.append(Listener(lname, host, port, protocol))
    return tuple(out)


def _protocol_map(props: Properties) -> dict[str, str]:
    name = "listener.security.protocol.map"
    out: dict[str, str] = {}
    for item in props.get_list(name):
        lname, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep:
            raise ConfigError(f"{name}: expected NAME:PROTOCOL, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{name}: {protocol!r} is not a security protocol ({', '.join(SECURITY_PROTOCOLS)})"
            )
        out[lname.strip().upper()] = protocol
    return out


def _inter_broker_listener(props: Properties, listeners: tuple[Listener, ...]) -> str:
    by_name = props.get_string("inter.broker.listener.name")
    by_protocol = props.get_string("security.inter.broker.protocol")
    if by_name and by_protocol:
        raise ConfigError(
            "inter.broker.listener.name and security.inter.broker.protocol: set only one"
        )
    names = [x.name for x in listeners]
    if by_name:
        inter, prop = by_name.strip().upper(), "inter.broker.listener.name"
    elif by_protocol:
        inter, prop = by_protocol.strip().upper(), "security.inter.broker.protocol"
    else:
        return "PLAINTEXT" if "PLAINTEXT" in names else names[0]
    if inter not in names:
        raise ConfigError(f"{prop}: no listener named {inter} (listeners: {', '.join(names)})")
    return inter


def _security(
    values: Mapping[str, str], listeners: tuple[Listener, ...], inter: str
) -> tuple[dict[str, ListenerSecurity], InterBrokerClientSecurity]:
    by_name = {x.name: listener_security(values, x.name, x.security_protocol) for x in listeners}
    return by_name, inter_broker_client_security(values, by_name[inter])


def load_config(
    path: str | Path | None = None, overrides: Mapping[str, str] | Iterable[str] = ()
) -> BrokerConfig:
    """Read `path` (optional), apply overrides (a mapping or `key=value` strings)."""
    return from_properties(read_properties(path, overrides))


def from_properties(values: Mapping[str, str]) -> BrokerConfig:
    props = Properties(values, DEFAULTS)
    roles = [r.strip() for r in props.required("process.roles").split(",") if r.strip()]
    if roles != ["broker"]:
        raise ConfigError(
            f"process.roles must be broker for a broker process, got {','.join(roles)!r}"
            " (combined broker,controller mode is not supported)"
        )
    node_id = props.get_int("node.id", min=0)
    listeners = _listeners(props, "listeners")
    advertised_raw = props.get_string("advertised.listeners")
    if advertised_raw is None:
        advertised = listeners
    else:
        advertised = _listeners(props, "advertised.listeners")
        missing = {x.name for x in listeners} - {x.name for x in advertised}
        if missing:
            raise ConfigError(
                f"advertised.listeners must advertise every listener; missing {sorted(missing)}"
            )
    for x in advertised:
        if x.host in ("", "0.0.0.0", "::"):
            where = "advertised.listeners" if advertised_raw else "listeners"
            raise ConfigError(
                f"{where}: {x.name} has no routable host ({x.host or 'empty'}); "
                "set a host clients can reach (e.g. PLAINTEXT://127.0.0.1:9092)"
            )
    inter = _inter_broker_listener(props, listeners)
    security, inter_security = _security(props.values, listeners, inter)
    dirs_raw = props.get_string("log.dirs") or props.get_string("log.dir")
    if dirs_raw is None:
        raise ConfigError("log.dirs is required")
    log_dirs = tuple(Path(d.strip()) for d in dirs_raw.split(",") if d.strip())
    if not log_dirs:
        raise ConfigError("log.dirs must name at least one directory")
    heartbeat = props.get_int("broker.heartbeat.interval.ms", min=10)
    session = props.get_int("broker.session.timeout.ms", min=100)
    if heartbeat >= session:
        raise ConfigError(
            f"broker.heartbeat.interval.ms ({heartbeat}) must be less than "
            f"broker.session.timeout.ms ({session})"
        )
    return BrokerConfig(
        node_id=node_id,
        controller_endpoints=_controller_endpoints(props),
        listeners=listeners,
        advertised_listeners=advertised,
        inter_broker_listener_name=inter,
        log_dirs=log_dirs,
        log_config=LogConfig.from_broker_properties(props.values),
        log_manager_config=LogManagerConfig(
            num_recovery_threads_per_data_dir=props.get_int(
                "num.recovery.threads.per.data.dir", min=1
            ),
            retention_check_interval_ms=props.get_int("log.retention.check.interval.ms", min=1),
            checkpoint_interval_ms=props.get_int("log.flush.offset.checkpoint.interval.ms", min=1),
            cleaner_enable=props.get_bool("log.cleaner.enable"),
            cleaner_backoff_ms=props.get_int("log.cleaner.backoff.ms", min=1),
        ),
        num_partitions=props.get_int("num.partitions", min=1, max=100_000),
        default_replication_factor=props.get_int("default.replication.factor", min=1, max=32_767),
        auto_create_topics_enable=props.get_bool("auto.create.topics.enable"),
        message_max_bytes=props.get_int("message.max.bytes", min=0),
        socket_request_max_bytes=props.get_int("socket.request.max.bytes", min=1024),
        heartbeat_interval_ms=heartbeat,
        session_timeout_ms=session,
        replica_lag_time_max_ms=props.get_int("replica.lag.time.max.ms", min=1),
        min_insync_replicas=props.get_int("min.insync.replicas", min=1, max=32_767),
        eligible_leader_replicas_enable=props.get_bool("eligible.leader.replicas.enable"),
        rack=props.get_string("broker.rack"),
        cluster_id=props.get_string("cluster.id") or "kraft-py",
        replica_fetch_max_bytes=props.get_int("replica.fetch.max.bytes", min=0),
        replica_fetch_response_max_bytes=props.get_int("replica.fetch.response.max.bytes", min=0),
        replica_fetch_wait_max_ms=props.get_int("replica.fetch.wait.max.ms", min=0),
        replica_fetch_min_bytes=props.get_int("replica.fetch.min.bytes", min=1),
        replica_fetch_backoff_ms=props.get_int("replica.fetch.backoff.ms", min=0),
        replica_socket_timeout_ms=props.get_int("replica.socket.timeout.ms", min=1),
        follower_replication_throttled_rate=props.get_int(
            "follower.replication.throttled.rate", min=0, max=2**63 - 1
        ),
        replication_quota_window_num=props.get_int("replication.quota.window.num", min=1),
        replication_quota_window_size_s=props.get_int(
            "replication.quota.window.size.seconds", min=1
        ),
        hw_checkpoint_interval_ms=props.get_int(
            "replica.high.watermark.checkpoint.interval.ms", min=1
        ),
        request_timeout_ms=props.get_int("request.timeout.ms", min=1),
        controlled_shutdown_timeout_ms=props.get_int("controlled.shutdown.timeout.ms", min=0),
        group_config=_group_config(props),
        offsets_topic_replication_factor=props.get_int(
            "offsets.topic.replication.factor", min=1, max=32_767
        ),
        offsets_topic_segment_bytes=props.get_int("offsets.topic.segment.bytes", min=1),
        offsets_commit_timeout_ms=props.get_int("offsets.commit.timeout.ms", min=1),
        txn_config=_txn_config(props),
        txn_topic_replication_factor=props.get_int(
            "transaction.state.log.replication.factor", min=1, max=32_767
        ),
        txn_topic_min_isr=props.get_int("transaction.state.log.min.isr", min=1),
        txn_topic_segment_bytes=props.get_int("transaction.state.log.segment.bytes", min=1),
        listener_security=security,
        inter_broker_security=inter_security,
        ssl_handshake_timeout_ms=props.get_int("ssl.handshake.timeout.ms", min=1),
        connections_max_idle_ms=props.get_int("connections.max.idle.ms", min=1),
        failed_authentication_delay_ms=props.get_int(
            "connection.failed.authentication.delay.ms", min=0
        ),
        sasl_server_max_receive_size=props.get_int("sasl.server.max.receive.size", min=64),
        authorizer_enabled=_authorizer_enabled(props),
        super_users=_super_users(props),
        allow_everyone_if_no_acl_found=props.get_bool("allow.everyone.if.no.acl.found"),
        properties=props.values,
    )


def _authorizer_enabled(props: Properties) -> bool:
    name = props.get_string("authorizer.class.name") or ""
    if name and name not in AUTHORIZER_CLASS_NAMES:
        raise ConfigError(
            f"authorizer.class.name: {name!r} is not supported; use "
            f"{AUTHORIZER_CLASS_NAMES[0]} (or leave it empty for no authorization)"
        )
    return bool(name)


def _super_users(props: Properties) -> frozenset[str]:
    """`super.users`: principals separated by semicolons, each `Type:name`."""
    users = parse_super_users(props.get_string("super.users"))
    for user in users:
        if ":" not in user:
            raise ConfigError(
                f"super.users: expected principals as Type:name (e.g. User:admin), got {user!r}"
            )
    return users


def _group_config(props: Properties) -> GroupConfig:
    low = props.get_int("group.min.session.timeout.ms", min=1)
    high = props.get_int("group.max.session.timeout.ms", min=1)
    if low > high:
        raise ConfigError(
            f"group.min.session.timeout.ms ({low}) must not exceed "
            f"group.max.session.timeout.ms ({high})"
        )
    return GroupConfig(
        num_partitions=props.get_int("offsets.topic.num.partitions", min=1, max=100_000),
        min_session_timeout_ms=low,
        max_session_timeout_ms=high,
        initial_rebalance_delay_ms=props.get_int("group.initial.rebalance.delay.ms", min=0),
        max_size=props.get_int("group.max.size", min=1),
        offsets_retention_ms=props.get_int("offsets.retention.minutes", min=1) * 60_000,
        retention_check_interval_ms=props.get_int("offsets.retention.check.interval.ms", min=1),
        offset_metadata_max_bytes=props.get_int("offset.metadata.max.bytes", min=0),
    )


def _txn_config(props: Properties) -> TxnConfig:
    return TxnConfig(
        num_partitions=props.get_int("transaction.state.log.num.partitions", min=1, max=100_000),
        max_timeout_ms=props.get_int("transaction.max.timeout.ms", min=1),
        id_expiration_ms=props.get_int("transactional.id.expiration.ms", min=1),
        abort_check_interval_ms=props.get_int(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms", min=1
        ),
        remove_check_interval_ms=props.get_int(
            "transaction.remove.expired.transaction.cleanup.interval.ms", min=1
        ),
    )
