"""What every client command (`topics`, `produce`, `consume`, `groups`, `acls`, `configs`)
shares: the connection options (`--bootstrap-server`, `--command-config`, `--timeout-ms`),
the librdkafka settings they make, and errors as one line on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, TypeVar

from common.client_config import load_command_config
from common.properties import ConfigError

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_MS = 15_000
T = TypeVar("T")


class CliError(Exception):
    """A failure reported as one line on stderr, exit status 1."""


def bootstrap_parser() -> argparse.ArgumentParser:
    """The connection options every client command shares (a parent parser):
    `--bootstrap-server` and `--command-config`."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--bootstrap-server",
        metavar="HOST:PORT[,...]",
        help=f"brokers to connect to (default: bootstrap.servers of --command-config, "
        f"else {DEFAULT_BOOTSTRAP})",
    )
    common.add_argument(
        "--command-config",
        metavar="FILE",
        help="a Java client's properties (security.protocol, sasl.mechanism, "
        "sasl.jaas.config, ssl.truststore.*, ssl.keystore.*, ...), as Kafka's tools take",
    )
    return common


def resolve_connection(args: argparse.Namespace) -> None:
    """Read `--command-config` into `args.client_settings` (librdkafka settings) and settle
    `args.bootstrap_server`: the option, else the file's bootstrap.servers, else the
    default. Call it first in a command (a bad file is a CliError)."""
    settings: dict[str, str] = {}
    if args.command_config:
        try:
            settings = load_command_config(args.command_config)
        except ConfigError as exc:
            raise CliError(str(exc)) from None
    from_file = settings.pop("bootstrap.servers", None)
    args.bootstrap_server = args.bootstrap_server or from_file or DEFAULT_BOOTSTRAP
    args.client_settings = settings


def timeout_parser() -> argparse.ArgumentParser:
    """`--timeout-ms` for commands that give up on unreachable brokers."""
    timeout = argparse.ArgumentParser(add_help=False)
    timeout.add_argument(
        "--timeout-ms",
        type=int,
        default=DEFAULT_TIMEOUT_MS,
        help=f"give up on the brokers after this long (default {DEFAULT_TIMEOUT_MS})",
    )
    return timeout


def run_reporting(name: str, action: Callable[[], int]) -> int:
    """Run a client command: a CliError or a client error is one line on stderr and
    exit status 1, Ctrl-C is 130."""
    try:
        return action()
    except CliError as exc:
        print(f"kraft {name}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - a client error is one line, never a traceback
        print(f"kraft {name}: {describe_error(exc)}", file=sys.stderr)
        return 1


def describe_error(exc: BaseException) -> str:
    """One line for a confluent-kafka exception (its KafkaError), a kafka-python broker
    error (named by Kafka's error code, as confluent-kafka's are) or anything else."""
    err = exc.args[0] if exc.args else None
    if hasattr(err, "str") and hasattr(err, "name"):
        return f"{err.str()} ({err.name()})"
    from kafka.errors import BrokerResponseError

    if isinstance(exc, BrokerResponseError):
        detail = (str(err) if err else "") or exc.description
        return f"{detail.splitlines()[0]} ({exc.message})"
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


# The authentication and TLS failures librdkafka reported, and the clients whose error
# callbacks report them (callbacks run only when a client is polled): a request that
# then fails says why the brokers could not be reached.
_connection_failures: list[str] = []
_clients: list[Any] = []


def client_conf(args: argparse.Namespace, **extra: Any) -> dict[str, Any]:
    """librdkafka settings: --command-config's, the bootstrap servers, then `extra`."""
    from confluent_kafka import KafkaError

    def on_error(err: KafkaError) -> None:  # librdkafka would print these itself
        if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL):
            _connection_failures[:] = [f"{err.str()} ({err.name()})"]

    return {
        **args.client_settings,
        "bootstrap.servers": args.bootstrap_server,
        "log_level": 0,  # no librdkafka log lines on stderr: errors are reported once
        "error_cb": on_error,
        **extra,
    }


def watched(client: T) -> T:
    """`client` (made from client_conf), polled for its error callbacks when a request
    fails."""
    _clients.append(client)
    return client


def unreachable(bootstrap: str, why: str) -> CliError:
    """`cannot reach <bootstrap>: <why>`, with the authentication or TLS failure behind it
    if librdkafka reported one."""
    for client in _clients:
        client.poll(0)  # runs the error callbacks of what happened meanwhile
    cause = f"; {_connection_failures[-1]}" if _connection_failures else ""
    return CliError(f"cannot reach {bootstrap}: {why}{cause}")


def require_cluster_describe(admin: Any, bootstrap: str, timeout_s: float, what: str) -> None:
    """CliError unless the principal may Describe the cluster, from the cluster's
    authorized operations (DescribeCluster). For the requests that need it and whose
    refusal confluent-kafka cannot report: librdkafka drops DescribeAcls' error code (an
    empty answer) and aborts on DescribeUserScramCredentials' (2.16). A broker without an
    authorizer grants every operation."""
    from confluent_kafka.admin import AclOperation

    fut = admin.describe_cluster(include_authorized_operations=True, request_timeout=timeout_s)
    wait_future(fut, bootstrap, timeout_s)
    if AclOperation.DESCRIBE not in (fut.result().authorized_operations or []):
        raise CliError(
            f"Cluster authorization failed: {what} needs Describe on the cluster "
            "(CLUSTER_AUTHORIZATION_FAILED)"
        )


def cluster_metadata(admin: Any, bootstrap: str, timeout_s: float) -> Any:
    from confluent_kafka import KafkaException

    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise unreachable(bootstrap, describe_error(exc)) from None


def wait_future(fut: Any, bootstrap: str, timeout_s: float) -> None:
    import concurrent.futures

    from confluent_kafka import KafkaError, KafkaException

    try:
        fut.result(timeout=timeout_s + 5)
    except concurrent.futures.TimeoutError:
        raise CliError(f"no answer from {bootstrap} within {timeout_s:g}s") from None
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        transport = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
        if err is not None and hasattr(err, "code") and err.code() in transport:
            raise unreachable(bootstrap, describe_error(exc)) from None
        raise CliError(describe_error(exc)) from None


class AdminTool:
    """An AdminClient for one command (`--bootstrap-server`, `--command-config`,
    `--timeout-ms`), whose futures fail with the tools' one-line errors."""

    def __init__(self, args: argparse.Namespace) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = args.bootstrap_server
        self.timeout_s = args.timeout_ms / 1000
        self.client = watched(AdminClient(client_conf(args)))

    def _get(self, fut: Any) -> Any:
        wait_future(fut, self.bootstrap, self.timeout_s)
        return fut.result()
