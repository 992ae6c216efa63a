"""`kraft dev`: a local cluster of 3 controllers and 3 brokers, each its own process.

    kraft dev [--data-dir ./data] [--controllers 3] [--brokers 3] [--base-port 9092]

Ports (base N): brokers N, N+1, ...; controller HTTP APIs N+100, ...; Raft N+200, ...
`--base-port 0` picks free ports. Node ids: controllers 1..C, brokers C+1..C+B (KRaft
wants node ids unique across roles). Everything lives under the data dir:
`controller-<id>/` and `broker-<id>/` (properties, a `.log` of the process output, the
data), and `cluster.json` (ids, roles, ports, pids, dirs). Run it again on the same
data dir and the same cluster comes back: ids and ports from `cluster.json` (or, if it
is gone, from the properties files).

Ctrl-C or SIGTERM stops the brokers first (each hands its leaderships over in a
controlled shutdown while the controllers are still up), then the controllers.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from kraft.launcher import (
    ControllerProcess,
    LauncherError,
    free_ports,
    stop_controllers,
    wait_for_active,
)
from storage.properties import parse_properties

T = TypeVar("T")
HOST = "127.0.0.1"
POLL_S = 0.05
CLUSTER_JSON = "cluster.json"
_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


class DevError(Exception):
    """Something the user must fix (a port in use, a data dir in use, a crash)."""


class _Stop(BaseException):
    """Raised by the signal handlers: unwinds to the clean shutdown."""


@dataclass
class BrokerProcess:
    node_id: int
    host: str
    port: int
    data_dir: Path
    python: str = sys.executable
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def properties_path(self) -> Path:
        return self.data_dir / "broker.properties"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "broker.log"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def write_properties(self, props: Mapping[str, str]) -> None:
        text = "".join(f"{k}={v}\n" for k, v in props.items())
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(text, encoding="utf-8")

    def start(self) -> None:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(_PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.log_path, "ab") as out:
            out.write(f"--- kraft dev: starting broker {self.node_id} ---\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [self.python, "-m", "broker.main", "--config", str(self.properties_path)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,  # Ctrl-C reaches only us; we stop them in order
            )

    def terminate(self) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)  # type: ignore[union-attr]

    def wait_stopped(self, deadline: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def log_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass
class DevCluster:
    data_dir: Path
    cluster_id: str
    controllers: list[ControllerProcess]
    brokers: list[BrokerProcess]

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.address for b in self.brokers)

    @property
    def http_endpoints(self) -> str:
        return ",".join(f"{c.node_id}@{c.http_address}" for c in self.controllers)

    def describe(self) -> dict[str, Any]:
        nodes: list[dict[str, Any]] = [
            {
                "id": c.node_id,
                "role": "controller",
                "host": c.host,
                "http_port": c.http_port,
                "raft_port": c.raft_port,
                "pid": c.proc.pid if c.running and c.proc else None,
                "data_dir": str(c.data_dir),
            }
            for c in self.controllers
        ]
        nodes += [
            {
                "id": b.node_id,
                "role": "broker",
                "host": b.host,
                "port": b.port,
                "pid": b.proc.pid if b.running and b.proc else None,
                "data_dir": str(b.data_dir),
            }
            for b in self.brokers
        ]
        return {
            "cluster_id": self.cluster_id,
            "bootstrap_servers": self.bootstrap_servers,
            "controller_http_endpoints": self.http_endpoints,
            "nodes": nodes,
        }

    def write_json(self) -> None:
        path = self.data_dir / CLUSTER_JSON
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.describe(), indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)


# -- planning: a new cluster, or the one already in the data dir ------------------------------


def _cluster_id() -> str:
    """Kafka's form: a random UUID as URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def plan_cluster(data_dir: Path, n_controllers: int, n_brokers: int, base_port: int) -> DevCluster:
    if n_controllers < 1 or n_brokers < 1:
        raise DevError("need at least one controller and one broker")
    if base_port:
        broker_ports = [base_port + i for i in range(n_brokers)]
        http_ports = [base_port + 100 + j for j in range(n_controllers)]
        raft_ports = [base_port + 200 + j for j in range(n_controllers)]
        if max(raft_ports) > 65535:
            raise DevError(
                f"--base-port {base_port} leaves no room for {n_controllers} controllers"
            )
    else:
        ports = free_ports(n_brokers + 2 * n_controllers, HOST)
        broker_ports = ports[:n_brokers]
        http_ports = ports[n_brokers : n_brokers + n_controllers]
        raft_ports = ports[n_brokers + n_controllers :]
    controllers = [
        ControllerProcess(
            j + 1, HOST, raft_ports[j], http_ports[j], data_dir / f"controller-{j + 1}"
        )
        for j in range(n_controllers)
    ]
    brokers = [
        BrokerProcess(
            n_controllers + i + 1,
            HOST,
            broker_ports[i],
            data_dir / f"broker-{n_controllers + i + 1}",
        )
        for i in range(n_brokers)
    ]
    return DevCluster(data_dir, _cluster_id(), controllers, brokers)


def load_cluster(data_dir: Path) -> DevCluster | None:
    """The cluster already in `data_dir`: from cluster.json, else its properties files."""
    path = data_dir / CLUSTER_JSON
    if path.exists():
        try:
            desc = json.loads(path.read_text(encoding="utf-8"))
            controllers = [
                ControllerProcess(
                    n["id"], n["host"], n["raft_port"], n["http_port"], Path(n["data_dir"])
                )
                for n in desc["nodes"]
                if n["role"] == "controller"
            ]
            brokers = [
                BrokerProcess(n["id"], n["host"], n["port"], Path(n["data_dir"]))
                for n in desc["nodes"]
                if n["role"] == "broker"
            ]
            return DevCluster(data_dir, desc["cluster_id"], controllers, brokers)
        except (ValueError, KeyError, TypeError) as exc:
            raise DevError(f"{path} is not a kraft dev cluster file: {exc!r}") from None
    return _cluster_from_properties(data_dir)


def _cluster_from_properties(data_dir: Path) -> DevCluster | None:
    controllers: list[ControllerProcess] = []
    brokers: list[BrokerProcess] = []
    cluster_id = None
    for props_path in sorted(data_dir.glob("controller-*/controller.properties")):
        p = parse_properties(props_path.read_text(encoding="utf-8"), str(props_path))
        node = int(p["node.id"])
        voters = dict(v.split("@") for v in p["controller.quorum.voters"].split(","))
        http = dict(v.split("@") for v in p["controller.quorum.http.endpoints"].split(","))
        host, raft = voters[str(node)].rsplit(":", 1)
        controllers.append(
            ControllerProcess(
                node, host, int(raft), int(http[str(node)].rsplit(":", 1)[1]), props_path.parent
            )
        )
    for props_path in sorted(data_dir.glob("broker-*/broker.properties")):
        p = parse_properties(props_path.read_text(encoding="utf-8"), str(props_path))
        host, port = p["listeners"].split("://", 1)[1].rsplit(":", 1)
        brokers.append(BrokerProcess(int(p["node.id"]), host, int(port), props_path.parent))
        cluster_id = cluster_id or p.get("cluster.id")
    if not controllers or not brokers:
        return None
    return DevCluster(data_dir, cluster_id or _cluster_id(), controllers, brokers)


def write_configs(cluster: DevCluster) -> None:
    """Properties files for every node. A controller keeps its file (and password) when
    it has one: its Raft peers must agree on the password."""
    n_brokers = len(cluster.brokers)
    rf = str(min(3, n_brokers))
    defaults = {"num.partitions": "3", "default.replication.factor": rf}
    voters = ",".join(f"{c.node_id}@{c.host}:{c.raft_port}" for c in cluster.controllers)
    password = None
    for c in cluster.controllers:
        if c.properties_path.exists():
            p = parse_properties(c.properties_path.read_text(encoding="utf-8"))
            password = password or p.get("controller.quorum.password")
    password = password or base64.urlsafe_b64encode(os.urandom(18)).decode()
    for c in cluster.controllers:
        if not c.properties_path.exists():
            c.write_properties(voters, cluster.http_endpoints, password, defaults)
    for b in cluster.brokers:
        b.write_properties(
            {
                "process.roles": "broker",
                "node.id": str(b.node_id),
                "controller.quorum.http.endpoints": cluster.http_endpoints,
                "listeners": f"PLAINTEXT://{b.host}:{b.port}",
                "log.dirs": str(b.data_dir / "logs"),
                "cluster.id": cluster.cluster_id,
                **defaults,
                "min.insync.replicas": "1",
            }
        )


def check_ports_free(cluster: DevCluster) -> None:
    taken = []
    ports = [(b.host, b.port) for b in cluster.brokers]
    ports += [(c.host, p) for c in cluster.controllers for p in (c.http_port, c.raft_port)]
    for host, port in ports:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                taken.append(port)
    if taken:
        raise DevError(
            f"ports {taken} are in use on {HOST}; stop what holds them, or start a new "
            "cluster with another --base-port (0 picks free ports) and --data-dir"
        )


# -- waiting --------------------------------------------------------------------------------


def _get_json(url: str, timeout_s: float = 1.0) -> Any:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read())
    except (OSError, urllib.error.URLError, ValueError):
        return None


def cluster_state(cluster: DevCluster) -> dict[str, Any] | None:
    """GET /v1/cluster from the first controller that answers."""
    for c in cluster.controllers:
        if c.running:
            state = _get_json(c.url("/v1/cluster"))
            if isinstance(state, dict):
                return state
    return None


def _wait(cluster: DevCluster, timeout_s: float, what: str, probe: Callable[[], T | None]) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        for node in [*cluster.controllers, *cluster.brokers]:
            if node.proc is not None and node.proc.poll() is not None:
                raise DevError(
                    f"{type(node).__name__} {node.node_id} exited with code "
                    f"{node.proc.returncode} while waiting for {what}; its log "
                    f"({node.log_path}) ends with:\n{node.log_tail()}"
                )
        value = probe()
        if value is not None:
            return value
        if time.monotonic() > deadline:
            tails = "\n".join(
                f"--- broker {b.node_id} ({b.log_path}) ---\n{b.log_tail(8)}"
                for b in cluster.brokers
            )
            raise DevError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{tails}")
        time.sleep(POLL_S)


def wait_brokers_unfenced(
    cluster: DevCluster, after_offset: int, timeout_s: float
) -> dict[str, Any]:
    """Every broker registered after `after_offset` (so: this run's incarnation) and
    unfenced; returns the cluster state."""
    want = {b.node_id for b in cluster.brokers}

    def probe() -> dict[str, Any] | None:
        state = cluster_state(cluster)
        if state is None:
            return None
        ready = {
            b["broker_id"]
            for b in state.get("brokers", [])
            if not b["fenced"] and b["broker_epoch"] > after_offset
        }
        return state if want <= ready else None

    return _wait(cluster, timeout_s, "all brokers to be unfenced", probe)


# -- running --------------------------------------------------------------------------------


def stop_cluster(cluster: DevCluster, broker_timeout_s: float = 45.0) -> None:
    """Brokers first (controlled shutdown needs the controllers), then the controllers."""
    for b in cluster.brokers:
        b.terminate()
    deadline = time.monotonic() + broker_timeout_s
    for b in cluster.brokers:
        b.wait_stopped(deadline)
    stop_controllers(cluster.controllers)


class _DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self._file = open(data_dir / ".kraft-dev.lock", "w")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            raise DevError(f"another `kraft dev` is running on {data_dir}") from None

    def release(self) -> None:
        self._file.close()


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _DataDirLock(data_dir)
    cluster = load_cluster(data_dir)
    if cluster is None:
        cluster = plan_cluster(data_dir, args.controllers, args.brokers, args.base_port)
        what = "new cluster"
    else:
        what = "existing cluster"
    check_ports_free(cluster)
    write_configs(cluster)
    t0 = time.monotonic()
    print(
        f"kraft dev: starting {what} in {data_dir}: {len(cluster.controllers)} controllers, "
        f"{len(cluster.brokers)} brokers",
        flush=True,
    )
    try:
        for c in cluster.controllers:
            c.start()
        active = wait_for_active(cluster.controllers, args.timeout)
        state = _wait(cluster, args.timeout, "the cluster state", lambda: cluster_state(cluster))
        baseline = int(state["metadata_offset"])
        for b in cluster.brokers:
            b.start()
        wait_brokers_unfenced(cluster, baseline, args.timeout)
        cluster.write_json()
        print(
            f"kraft dev: all brokers unfenced in {time.monotonic() - t0:.1f}s "
            f"(active controller {active.node_id})\n"
            f"  bootstrap servers: {cluster.bootstrap_servers}\n"
            f"  controllers (HTTP): {cluster.http_endpoints}\n"
            f"  cluster id: {cluster.cluster_id}\n"
            f"  data and logs: {data_dir} (cluster.json, */controller.log, */broker.log)\n"
            "Press Ctrl-C to stop.",
            flush=True,
        )
        reported: set[int] = set()
        while True:
            for node in [*cluster.controllers, *cluster.brokers]:
                exited = node.proc is not None and node.proc.poll() is not None
                if exited and node.node_id not in reported:
                    reported.add(node.node_id)
                    print(
                        f"kraft dev: {type(node).__name__} {node.node_id} exited with code "
                        f"{node.proc.returncode}; see {node.log_path}",
                        file=sys.stderr,
                        flush=True,
                    )
            time.sleep(0.5)
    except _Stop:
        print("kraft dev: stopping (brokers first, then controllers)...", flush=True)
        return 0
    except (DevError, LauncherError) as exc:
        print(f"kraft dev: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        # A second signal while stopping must not interrupt the stop itself.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        stop_cluster(cluster)
        cluster.write_json()
        lock.release()
        print("kraft dev: stopped", flush=True)


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kraft dev", description="run a local cluster: controllers and brokers"
    )
    parser.add_argument("--data-dir", default="./data")
    parser.add_argument("--controllers", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument(
        "--base-port",
        type=int,
        default=9092,
        help="brokers listen on N, N+1, ...; controllers on N+100.. (HTTP) and N+200.. "
        "(Raft); 0 picks free ports. A restarted cluster keeps its ports.",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for ready")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        return run(args)
    except DevError as exc:
        print(f"kraft dev: {exc}", file=sys.stderr)
        return 1
    except _Stop:  # a signal before anything was started
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
