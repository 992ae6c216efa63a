"""A controller process: the Raft voter (pysyncobj), the active-controller loop and the
HTTP API, on one asyncio event loop.

    python -m kraft.controller_main --config controller.properties [--override k=v ...]

(`kraft controller` in kraft/tools/cli.py calls `main`). SIGTERM and SIGINT stop it cleanly:
the HTTP listener closes, the node stops deciding, pysyncobj flushes its journal.
Durability: the Raft journal, term and vote are fsynced before they are acknowledged
(kraft/raft_durability.py), so committed metadata survives a majority of machines losing
power at once, as in Kafka's KRaft.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO

from aiohttp import web

from kraft.controller_config import ConfigError, ControllerNodeConfig, load_config
from kraft.http_api import make_app
from kraft.node import ControllerNode
from kraft.quorum import Quorum, QuorumError

log = logging.getLogger("kraft.controller")


class _DataDirLock:
    """One process per metadata.log.dir: two voters sharing a journal would corrupt it."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / ".lock"
        self._file: IO[str] | None = open(self.path, "w")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._file.close()
            self._file = None
            raise ConfigError(
                f"metadata.log.dir {directory} is in use by another controller process"
            ) from None
        self._file.write(f"{os.getpid()}\n")
        self._file.flush()

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None


async def run_controller(
    config: ControllerNodeConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Serve until `stop` is set, or until SIGTERM/SIGINT when `stop` is not given."""
    loop = asyncio.get_running_loop()
    if stop is None:
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
    lock = _DataDirLock(config.metadata_log_dir)
    quorum = Quorum(
        config.node_id,
        config.voters,
        config.metadata_log_dir,
        config.quorum_password,
        max_tail_records=config.max_retained_records,
        fsync=config.quorum_fsync,
    )
    node = ControllerNode(config, quorum)
    # A long-poll holds its request for up to 30 s: don't wait for it on shutdown.
    runner = web.AppRunner(
        make_app(node, max_body_bytes=config.max_body_bytes, auth=config.auth),
        access_log=None,
        shutdown_timeout=1.0,
    )
    try:
        await quorum.start()
        await node.start()
        await runner.setup()
        host, port = config.listener
        await web.TCPSite(runner, host, port, ssl_context=config.ssl_context).start()
        _warn_if_exposed(config)
        log.info(
            "controller started node=%d %s=%s:%d auth=%s raft=%s:%d metadata_offset=%d",
            config.node_id,
            "https" if config.ssl_context else "http",
            host,
            port,
            _auth_summary(config),
            *config.voters[config.node_id],
            quorum.next_offset,
        )
        if on_ready is not None:
            on_ready()
        await stop.wait()
        log.info("controller stopping node=%d", config.node_id)
    finally:
        await runner.cleanup()
        await node.stop()
        with contextlib.suppress(TimeoutError):
            await quorum.stop()
        lock.release()


def _auth_summary(config: ControllerNodeConfig) -> str:
    """How callers authenticate (never the token itself)."""
    ways = []
    if config.auth.token is not None:
        ways.append("token")
    if config.auth.client_certificates:
        ways.append("certificate")
    return "+".join(ways) or "none"


def _warn_if_exposed(config: ControllerNodeConfig) -> None:
    """Say so when the API's security is partial (allowed, as Kafka allows it)."""
    if not config.auth.enabled:
        log.warning(
            "the HTTP API requires no credentials: anyone who can reach %s:%d can write the "
            "cluster's metadata (set controller.quorum.http.token and/or ssl.client.auth)",
            *config.listener,
        )
    elif config.auth.token is not None and config.ssl_context is None:
        log.warning(
            "controller.quorum.http.token travels in clear text over http: map the "
            "controller listener to SSL in listener.security.protocol.map"
        )
    if config.auth.client_certificates and not config.auth.super_users:
        log.info(
            "every client certificate signed by ssl.truststore's CAs may use the HTTP API "
            "(set super.users to admit only some principals)"
        )


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # pysyncobj logs every reconnect at INFO/WARNING; our own lines say what matters.
    logging.getLogger("pysyncobj").setLevel(logging.ERROR)
    logging.getLogger("aiohttp").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="kraft controller", description="run one voter of the controller quorum"
    )
    parser.add_argument("--config", required=True, help="the controller .properties file")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a property (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING"])
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, args.override)
    except ConfigError as exc:
        print(f"kraft controller: {exc}", file=sys.stderr)
        return 2
    _setup_logging(args.log_level)
    try:
        asyncio.run(run_controller(config))
    except ConfigError as exc:  # raised at start-up (e.g. the data dir is in use)
        print(f"kraft controller: {exc}", file=sys.stderr)
        return 2
    except (QuorumError, OSError) as exc:  # a port in use, an unwritable directory
        print(f"kraft controller: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
