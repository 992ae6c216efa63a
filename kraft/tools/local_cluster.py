"""A local cluster on one host: plan it, write its configuration, start and stop it,
each node its own process (kraft/tools/launcher.py). The one path `kraft dev`, the tests
(tests/cluster_procs.py) and the benchmarks start clusters by:

    cluster = plan_cluster(Path("data"), 3, 3)   # ids, ports, directories; starts nothing
    write_configs(cluster)                        # each node's .properties file
    start_cluster(cluster)                        # controllers, an active one, then brokers,
    ...                                           # until every broker is unfenced
    stop_cluster(cluster)                         # brokers first, then the controllers

Node ids: controllers 1..C, brokers C+1..C+B (KRaft wants node ids unique across roles).
Directories: `<data_dir>/controller-<id>/` and `broker-<id>/`. `cluster.json` (ids,
roles, ports, pids, dirs) describes the cluster, so `load_cluster` finds it again.

A secured cluster (`plan_cluster(..., secure=True)`; what it is: kraft/tools/
local_security.py) gives each broker a second, inter-broker listener port, gets its
certificates and secrets in `write_configs`, and in `start_cluster` also creates its SCRAM
user and writes `client.properties` and `admin.properties` to the data dir.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import socket
import sys
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.properties import Properties, read_properties
from kraft.tools.launcher import (
    DEFAULT_HOST,
    LauncherError,
    NodeProcess,
    cluster_state,
    free_ports,
    stop_nodes,
    unfenced_brokers,
    wait_for_active,
    wait_until,
)
from kraft.tools.local_security import (
    INTERNAL_LISTENER,
    SECRETS_FILE,
    SECURITY_DIR,
    Security,
    broker_properties,
    controller_properties,
    create_user,
    load_or_create,
    write_client_configs,
)

CLUSTER_JSON = "cluster.json"
# Ports from a base port N: brokers N.., controller HTTP N+100.., Raft N+200.., and a
# secured cluster's inter-broker listeners N+300...
_HTTP_OFFSET, _RAFT_OFFSET, _INTERNAL_OFFSET = 100, 200, 300


@dataclass
class Cluster:
    data_dir: Path
    cluster_id: str
    controllers: list[NodeProcess]
    brokers: list[NodeProcess]
    secure: bool = False
    internal_ports: dict[int, int] = field(default_factory=dict)  # broker id -> port
    # A secured cluster's material, from write_configs.
    security: Security | None = field(default=None, repr=False)

    @property
    def nodes(self) -> list[NodeProcess]:
        return [*self.controllers, *self.brokers]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def http_endpoints(self) -> str:
        return ",".join(f"{c.node_id}@{c.address}" for c in self.controllers)

    def describe(self) -> dict[str, Any]:
        """What cluster.json holds."""
        nodes: list[dict[str, Any]] = []
        for n in self.nodes:
            if n.role == "controller":
                ports = {"http_port": n.port, "raft_port": n.raft_port}
            else:
                ports = {"port": n.port}
                if n.node_id in self.internal_ports:
                    ports["internal_port"] = self.internal_ports[n.node_id]
            nodes.append(
                {
                    "id": n.node_id,
                    "role": n.role,
                    "host": n.host,
                    **ports,
                    "pid": n.proc.pid if n.running and n.proc else None,
                    "data_dir": str(n.data_dir),
                }
            )
        return {
            "cluster_id": self.cluster_id,
            "secure": self.secure,
            "bootstrap_servers": self.bootstrap_servers,
            "controller_http_endpoints": self.http_endpoints,
            "nodes": nodes,
        }

    def write_json(self) -> None:
        path = self.data_dir / CLUSTER_JSON
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.describe(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


def _cluster_id() -> str:
    """Kafka's form: a random UUID as URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def plan_cluster(
    data_dir: Path,
    n_controllers: int,
    n_brokers: int = 0,
    base_port: int = 0,
    *,
    host: str = DEFAULT_HOST,
    python: str = sys.executable,
    secure: bool = False,
) -> Cluster:
    """Ids, ports and directories; starts and writes nothing. Ports (base N): brokers N,
    N+1, ...; controller HTTP APIs N+100, ...; Raft N+200, ...; with `secure`, the
    brokers' inter-broker listeners N+300, ...; base 0 picks free ports."""
    if n_controllers < 1 or n_brokers < 0:
        raise LauncherError("need at least one controller")
    data_dir = Path(data_dir).resolve()
    n_internal = n_brokers if secure else 0
    if base_port:
        broker_ports = [base_port + i for i in range(n_brokers)]
        http_ports = [base_port + _HTTP_OFFSET + j for j in range(n_controllers)]
        raft_ports = [base_port + _RAFT_OFFSET + j for j in range(n_controllers)]
        internal_ports = [base_port + _INTERNAL_OFFSET + i for i in range(n_internal)]
        if max([*raft_ports, *internal_ports]) > 65535:
            raise LauncherError(
                f"--base-port {base_port} leaves no room for {n_controllers} controllers"
                + (f" and {n_brokers} brokers" if secure else "")
            )
    else:
        ports = free_ports(n_brokers + 2 * n_controllers + n_internal, host)
        broker_ports = ports[:n_brokers]
        http_ports = ports[n_brokers : n_brokers + n_controllers]
        raft_ports = ports[n_brokers + n_controllers : n_brokers + 2 * n_controllers]
        internal_ports = ports[n_brokers + 2 * n_controllers :]
    controllers = [
        NodeProcess(
            "controller", j + 1, host, http_ports[j], data_dir / f"controller-{j + 1}",
            raft_ports[j], python,
        )
        for j in range(n_controllers)
    ]  # fmt: skip
    brokers = [
        NodeProcess(
            "broker", n_controllers + i + 1, host, broker_ports[i],
            data_dir / f"broker-{n_controllers + i + 1}", python=python,
        )
        for i in range(n_brokers)
    ]  # fmt: skip
    internal = {b.node_id: port for b, port in zip(brokers, internal_ports, strict=False)}
    return Cluster(data_dir, _cluster_id(), controllers, brokers, secure, internal)


def load_cluster(data_dir: Path) -> Cluster | None:
    """The cluster already in `data_dir`: from cluster.json, else its properties files."""
    path = data_dir / CLUSTER_JSON
    if not path.exists():
        return _cluster_from_properties(data_dir)
    try:
        desc = json.loads(path.read_text(encoding="utf-8"))
        nodes = [
            NodeProcess(
                n["role"], n["id"], n["host"], n["port"] if n["role"] == "broker" else
                n["http_port"], Path(n["data_dir"]), n.get("raft_port", 0),
            )
            for n in desc["nodes"]
        ]  # fmt: skip
        internal = {n["id"]: n["internal_port"] for n in desc["nodes"] if "internal_port" in n}
        return Cluster(
            data_dir,
            desc["cluster_id"],
            [n for n in nodes if n.role == "controller"],
            [n for n in nodes if n.role == "broker"],
            bool(desc.get("secure", False)),
            internal,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LauncherError(f"{path} is not a kraft dev cluster file: {exc!r}") from None


def _cluster_from_properties(data_dir: Path) -> Cluster | None:
    controllers: list[NodeProcess] = []
    brokers: list[NodeProcess] = []
    cluster_id = None
    for path in sorted(data_dir.glob("controller-*/controller.properties")):
        props = Properties(read_properties(path))
        node = props.get_int("node.id", min=0)
        host, raft = props.get_node_addresses("controller.quorum.voters")[node]
        _, http = props.get_node_addresses("controller.quorum.http.endpoints")[node]
        controllers.append(NodeProcess("controller", node, host, http, path.parent, raft))
    internal: dict[int, int] = {}
    for path in sorted(data_dir.glob("broker-*/broker.properties")):
        props = Properties(read_properties(path))
        listeners = props.get_listeners("listeners")
        _, host, port = listeners[0]
        node = props.get_int("node.id", min=0)
        brokers.append(NodeProcess("broker", node, host, port, path.parent))
        for name, _, internal_port in listeners:
            if name == INTERNAL_LISTENER:
                internal[node] = internal_port
        cluster_id = cluster_id or props.get_string("cluster.id")
    if not controllers or not brokers:
        return None
    secure = (data_dir / SECURITY_DIR / SECRETS_FILE).exists()
    return Cluster(data_dir, cluster_id or _cluster_id(), controllers, brokers, secure, internal)


def write_configs(
    cluster: Cluster,
    *,
    password: str | None = None,
    controller_props: Mapping[str, str] | None = None,
    broker_props: Mapping[str, str] | None = None,
) -> None:
    """Every node's properties file; `controller_props` and `broker_props` are added to
    (or override) each file. A controller whose file exists keeps the properties in it
    that we do not set, and its password: its Raft peers must agree on it. A cluster with
    brokers creates 3 partitions with up to 3 replicas by default. A secured cluster gets
    its certificates and secrets here (new, or those already in the data dir)."""
    secured: dict[str, str] = {}
    if cluster.secure:
        cluster.security = load_or_create(cluster.data_dir)
        secured = controller_properties(cluster.security)
    existing: dict[int, dict[str, str]] = {
        c.node_id: read_properties(c.properties_path)
        for c in cluster.controllers
        if c.properties_path.exists()
    }
    password = password or next(
        (p["controller.quorum.password"] for p in existing.values()
         if p.get("controller.quorum.password")),
        None,
    ) or secrets.token_urlsafe(24)  # fmt: skip
    defaults: dict[str, str] = {}
    if cluster.brokers:
        rf = str(min(3, len(cluster.brokers)))
        defaults = {"num.partitions": "3", "default.replication.factor": rf}
    voters = ",".join(f"{c.node_id}@{c.host}:{c.raft_port}" for c in cluster.controllers)
    for c in cluster.controllers:
        c.write_properties({
            **existing.get(c.node_id, {}),
            "process.roles": "controller",
            "node.id": str(c.node_id),
            "controller.quorum.voters": voters,
            "controller.quorum.http.endpoints": cluster.http_endpoints,
            "listeners": f"CONTROLLER://{c.address}",
            "metadata.log.dir": str(c.data_dir / "metadata"),
            "controller.quorum.password": password,
            **defaults,
            **secured,
            **(controller_props or {}),
        })  # fmt: skip
    for b in cluster.brokers:
        if cluster.security is not None:
            port = cluster.internal_ports[b.node_id]
            secured = broker_properties(cluster.security, b.host, b.port, port)
        b.write_properties({
            "process.roles": "broker",
            "node.id": str(b.node_id),
            "controller.quorum.http.endpoints": cluster.http_endpoints,
            "listeners": f"PLAINTEXT://{b.address}",
            "log.dirs": str(b.data_dir / "logs"),
            "cluster.id": cluster.cluster_id,
            **defaults,
            "min.insync.replicas": "1",
            **secured,
            **(broker_props or {}),
        })  # fmt: skip


def check_ports_free(cluster: Cluster) -> None:
    taken = []
    ports = [(b.host, b.port) for b in cluster.brokers]
    ports += [
        (b.host, cluster.internal_ports[b.node_id])
        for b in cluster.brokers
        if b.node_id in cluster.internal_ports
    ]
    ports += [(c.host, p) for c in cluster.controllers for p in (c.port, c.raft_port)]
    for host, port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                taken.append(port)
    if taken:
        raise LauncherError(
            f"ports {taken} are in use; stop what holds them, or start a new "
            "cluster with another --base-port (0 picks free ports) and --data-dir"
        )


# -- start and stop -------------------------------------------------------------------------


def start_cluster(cluster: Cluster, timeout_s: float = 60.0) -> NodeProcess:
    """Start the controllers, wait for an active one and the cluster state, then start
    the brokers and wait until each has registered in this run and is unfenced; a
    secured cluster's SCRAM user is then made, and its client configs written. Returns
    the active controller. On failure the caller stops what was started (stop_cluster)."""
    for c in cluster.controllers:
        c.start()
    active = wait_for_active(cluster.controllers, timeout_s)
    if not cluster.brokers:
        return active
    state = wait_until(
        cluster.nodes, timeout_s, "the cluster state", lambda: cluster_state(cluster.controllers)
    )
    baseline = int(state["metadata_offset"])
    for b in cluster.brokers:
        b.start()
    wanted = {b.node_id for b in cluster.brokers}

    def unfenced() -> dict[str, Any] | None:
        state = cluster_state(cluster.controllers)
        return state if state and wanted <= unfenced_brokers(state, baseline) else None

    wait_until(cluster.nodes, timeout_s, "all brokers to be unfenced", unfenced)
    if cluster.security is not None:
        create_user(cluster.security, [b.address for b in cluster.brokers], timeout_s)
        write_client_configs(cluster.security, cluster.data_dir, cluster.bootstrap_servers)
    return active


def stop_cluster(cluster: Cluster, broker_timeout_s: float = 45.0) -> None:
    """Brokers first (controlled shutdown needs the controllers), then the controllers."""
    stop_nodes(cluster.brokers, broker_timeout_s)
    stop_nodes(cluster.controllers)


def start_controllers(
    n: int,
    base_dir: Path,
    *,
    host: str = DEFAULT_HOST,
    password: str | None = None,
    properties: Mapping[str, str] | None = None,
    timeout_s: float = 30.0,
    python: str = sys.executable,
) -> list[NodeProcess]:
    """A quorum of `n` controllers and no brokers, on free ports, with `properties` in
    every file; returns once they agree on an active controller. On failure every
    started process is stopped and LauncherError (with the logs' tails) is raised."""
    cluster = plan_cluster(base_dir, n, host=host, python=python)
    write_configs(cluster, password=password, controller_props=properties)
    try:
        start_cluster(cluster, timeout_s)
    except BaseException:
        stop_nodes(cluster.controllers)
        raise
    return cluster.controllers
