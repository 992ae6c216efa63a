"""`kraft dev`: a local cluster of 3 controllers and 3 brokers, each its own process.

    kraft dev [--data-dir ./data] [--controllers 3] [--brokers 3] [--base-port 9092] [--secure]

Ports (base N): brokers N, N+1, ...; controller HTTP APIs N+100, ...; Raft N+200, ...
`--base-port 0` picks free ports. Node ids: controllers 1..C, brokers C+1..C+B (KRaft
wants node ids unique across roles). Everything lives under the data dir:
`controller-<id>/` and `broker-<id>/` (properties, a `.log` of the process output, the
data), and `cluster.json` (ids, roles, ports, pids, dirs). Run it again on the same
data dir and the same cluster comes back: ids and ports from `cluster.json` (or, if it
is gone, from the properties files). The planning and starting is
kraft/tools/local_cluster.py's, shared with the tests.

`--secure` starts a secured cluster (kraft/tools/local_security.py): clients on SASL_SSL
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), replication on an inter-broker SASL_SSL listener,
the authorizer on with the super user `User:admin`, the controllers' HTTP API over TLS
with a token; certificates and secrets under `<data dir>/security/`, and a SCRAM user
`alice` whose client config is `<data dir>/client.properties` (the super user's:
`admin.properties`). Inter-broker listeners take ports N+300, .... A data dir keeps the
security it was made with.

Ctrl-C or SIGTERM stops the brokers first (each hands its leaderships over in a
controlled shutdown while the controllers are still up), then the controllers.
"""

from __future__ import annotations

import argparse
import fcntl
import signal
import sys
import time
from pathlib import Path

from kraft.tools.launcher import LauncherError
from kraft.tools.local_cluster import (
    Cluster,
    check_ports_free,
    load_cluster,
    plan_cluster,
    start_cluster,
    stop_cluster,
    write_configs,
)
from kraft.tools.local_security import ADMIN_CONFIG, CLIENT_CONFIG, SUPER_USER


class _Stop(BaseException):
    """Raised by the signal handlers: unwinds to the clean shutdown."""


class _DataDirLock:
    def __init__(self, data_dir: Path) -> None:
        self._file = open(data_dir / ".kraft-dev.lock", "w")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            raise LauncherError(f"another `kraft dev` is running on {data_dir}") from None

    def release(self) -> None:
        self._file.close()


def run(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    lock = _DataDirLock(data_dir)
    cluster = load_cluster(data_dir)
    if cluster is None:
        if args.controllers < 1 or args.brokers < 1:
            raise LauncherError("need at least one controller and one broker")
        cluster = plan_cluster(
            data_dir, args.controllers, args.brokers, args.base_port, secure=args.secure
        )
        what = "new secured cluster" if args.secure else "new cluster"
    elif args.secure and not cluster.secure:
        raise LauncherError(
            f"{data_dir} holds a cluster made without --secure; start a secured one in "
            "another --data-dir"
        )
    else:
        what = "existing secured cluster" if cluster.secure else "existing cluster"
    check_ports_free(cluster)
    write_configs(cluster)
    t0 = time.monotonic()
    print(
        f"kraft dev: starting {what} in {data_dir}: {len(cluster.controllers)} controllers, "
        f"{len(cluster.brokers)} brokers",
        flush=True,
    )
    try:
        active = start_cluster(cluster, args.timeout)
        cluster.write_json()
        print(
            f"kraft dev: all brokers unfenced in {time.monotonic() - t0:.1f}s "
            f"(active controller {active.node_id})\n"
            f"  bootstrap servers: {cluster.bootstrap_servers}\n"
            f"  controllers (HTTP): {cluster.http_endpoints}\n"
            f"  cluster id: {cluster.cluster_id}\n"
            f"  data and logs: {data_dir} (cluster.json, */controller.log, */broker.log)\n"
            + _security_lines(cluster)
            + "Press Ctrl-C to stop.",
            flush=True,
        )
        reported: set[int] = set()
        while True:
            for node in cluster.nodes:
                exited = node.proc is not None and node.proc.poll() is not None
                if exited and node.node_id not in reported:
                    reported.add(node.node_id)
                    print(
                        f"kraft dev: {node.role} {node.node_id} exited with code "
                        f"{node.proc.returncode}; see {node.log_path}",
                        file=sys.stderr,
                        flush=True,
                    )
            time.sleep(0.5)
    except _Stop:
        print("kraft dev: stopping (brokers first, then controllers)...", flush=True)
        return 0
    except LauncherError as exc:
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


def _security_lines(cluster: Cluster) -> str:
    """What a secured cluster's users need: the client configs and a first command."""
    sec = cluster.security
    if sec is None:
        return ""
    client = cluster.data_dir / CLIENT_CONFIG
    admin = cluster.data_dir / ADMIN_CONFIG
    return (
        f"  security: SASL_SSL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), CA {sec.ca}, "
        "authorizer on\n"
        f"  client config: {client} (SCRAM-SHA-512 user {sec.user}, no ACLs yet)\n"
        f"  admin config: {admin} (super user User:{SUPER_USER})\n"
        f"  grant: kraft acls --add --allow-principal User:{sec.user} --operation All "
        f"--topic '*' --group '*' --bootstrap-server {cluster.bootstrap_servers} "
        f"--command-config {admin}\n"
        f"  ready: kraft topics list --bootstrap-server {cluster.bootstrap_servers} "
        f"--command-config {client}\n"
    )


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
    parser.add_argument(
        "--secure",
        action="store_true",
        help="SASL_SSL for clients, TLS + a token for the controllers, ACLs on; prints a "
        "ready client config (see kraft/tools/local_security.py)",
    )
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for ready")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, _raise_stop)
    signal.signal(signal.SIGTERM, _raise_stop)
    try:
        return run(args)
    except LauncherError as exc:
        print(f"kraft dev: {exc}", file=sys.stderr)
        return 1
    except _Stop:  # a signal before anything was started
        return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
