"""A kraft cluster whose nodes each run in their own network namespace (tests/chaos/net.py),
started through the launcher every test and `kraft dev` use (kraft/tools/local_cluster.py):
the same properties files and the same `python -m kraft.controller_main` / `broker.main`
(sys.executable, PYTHONPATH honoured), only the interpreter is a two-line wrapper that
`ip netns exec`s into the node's namespace. `ip netns exec` execs without forking, so the
launcher's pid is the node's pid and SIGKILL / SIGSTOP reach the node itself.

The first broker's log dir sits on a small ext4 image, so the nemesis can fill its disk.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

from kraft.tools.launcher import NodeProcess, stop_nodes
from kraft.tools.local_cluster import Cluster, _cluster_id, start_cluster, write_configs
from tests.chaos.net import Net

# Every node has its own IP, so every node uses the same ports.
BROKER_PORT, HTTP_PORT, RAFT_PORT = 9092, 9093, 9094
SMALL_DISK_MB = 96
SESSION_MS = 6000  # broker.session.timeout.ms: the nemesis pauses around it
CONTROLLER_PROPS = {"broker.session.timeout.ms": str(SESSION_MS)}
BROKER_PROPS = {
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": "3000",
    "replica.fetch.backoff.ms": "200",
    "replica.fetch.wait.max.ms": "200",
    "min.insync.replicas": "2",
    "group.initial.rebalance.delay.ms": "0",
    # Small segments and indexes: the small disk holds many partitions' logs.
    "log.segment.bytes": str(4 << 20),
    "log.index.size.max.bytes": str(256 << 10),
}


class NsCluster:
    """C controllers (ids 1..C) and B brokers (ids C+1..C+B), one namespace each."""

    def __init__(self, run_dir: Path, n_controllers: int, n_brokers: int) -> None:
        self.run_dir = run_dir
        ids = list(range(1, n_controllers + n_brokers + 1))
        self.net = Net.create(ids)
        try:
            self.cluster = self._plan(n_controllers, n_brokers)
            self.disk_broker = self.cluster.brokers[0].node_id
            self.disk_mount = self.cluster.brokers[0].data_dir / "logs"
            self.net.small_disk(run_dir / "disk.img", self.disk_mount, SMALL_DISK_MB)
        except BaseException:
            self.net.destroy()
            raise

    def _plan(self, n_controllers: int, n_brokers: int) -> Cluster:
        nodes: list[NodeProcess] = []
        for node in range(1, n_controllers + n_brokers + 1):
            wrapper = self.run_dir / f"python-ns{node}"
            wrapper.write_text(
                f'#!/bin/sh\nexec ip netns exec {self.net.ns(node)} {sys.executable} "$@"\n',
                encoding="utf-8",
            )
            wrapper.chmod(0o755)
            role = "controller" if node <= n_controllers else "broker"
            port = HTTP_PORT if role == "controller" else BROKER_PORT
            nodes.append(
                NodeProcess(role, node, self.net.ip(node), port,
                            self.run_dir / f"{role}-{node}", RAFT_PORT, str(wrapper))
            )  # fmt: skip
        ctrls = [n for n in nodes if n.role == "controller"]
        brokers = [n for n in nodes if n.role == "broker"]
        return Cluster(self.run_dir, _cluster_id(), ctrls, brokers)

    @property
    def controllers(self) -> list[NodeProcess]:
        return self.cluster.controllers

    @property
    def brokers(self) -> list[NodeProcess]:
        return self.cluster.brokers

    @property
    def nodes(self) -> list[NodeProcess]:
        return self.cluster.nodes

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap_servers

    def node(self, node_id: int) -> NodeProcess:
        return next(n for n in self.nodes if n.node_id == node_id)

    def start(self, timeout_s: float = 60.0) -> None:
        write_configs(self.cluster, controller_props=CONTROLLER_PROPS, broker_props=BROKER_PROPS)
        start_cluster(self.cluster, timeout_s)

    def close(self) -> None:
        """Resume what is paused, kill everything, remove the namespaces and the disk."""
        for n in self.nodes:
            with contextlib.suppress(Exception):
                n.resume()
                n.kill()
        self.net.destroy()

    def stop_gracefully(self) -> None:
        stop_nodes(self.brokers, 20)
        stop_nodes(self.controllers)

    def logs(self, lines: int = 20) -> str:
        return "\n".join(
            f"--- {n.role} {n.node_id} ({n.log_path}) ---\n{n.log_tail(lines)}" for n in self.nodes
        )
