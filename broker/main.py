"""A broker process: `kraft broker --config broker.properties [--override k=v ...]`.

    python -m broker.main --config broker.properties

SIGTERM or SIGINT starts a controlled shutdown (the controller moves our leaderships
away, then says "go"), bounded by `controlled.shutdown.timeout.ms`; the logs are then
flushed and closed cleanly, so the next start skips recovery. A second signal skips
what is left of the controlled shutdown.
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

from broker.allocator import tune_malloc
from broker.config import BrokerConfig, ConfigError, load_config
from broker.server import BrokerServer
from storage.log_manager import LogDirError

log = logging.getLogger("broker")


class _LogDirLocks:
    """One broker per log dir (Kafka's `.lock`): two writers would corrupt the logs."""

    def __init__(self, dirs: tuple[Path, ...]) -> None:
        self._files: list[IO[str]] = []
        try:
            for d in dirs:
                d.mkdir(parents=True, exist_ok=True)
                f = open(d / ".lock", "w")  # noqa: SIM115 - held for the process's life
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    f.close()
                    raise ConfigError(f"log dir {d} is in use by another broker process") from None
                f.write(f"{os.getpid()}\n")
                f.flush()
                self._files.append(f)
        except BaseException:
            self.release()
            raise

    def release(self) -> None:
        for f in self._files:
            f.close()
        self._files = []


async def run_broker(
    config: BrokerConfig,
    *,
    stop: asyncio.Event | None = None,
    on_ready: Callable[[BrokerServer], None] | None = None,
) -> None:
    """Serve until `stop` is set, or until SIGTERM/SIGINT when `stop` is not given."""
    loop = asyncio.get_running_loop()
    signals = 0
    hard_stop = asyncio.Event()
    if stop is None:
        stop = asyncio.Event()

        def on_signal() -> None:
            nonlocal signals
            signals += 1
            (stop if signals == 1 else hard_stop).set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
    locks = _LogDirLocks(config.log_dirs)
    server = BrokerServer(config)
    try:
        startup = asyncio.create_task(server.startup(), name="broker-startup")
        stopped = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait({startup, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if startup in done:
            stopped.cancel()
            startup.result()  # raises what start-up raised
            log.info(
                "broker started id=%d listeners=%s epoch=%d metadata_offset=%d partitions=%d",
                config.node_id,
                ",".join(f"{k.listener_name}://{k.host}:{k.port}" for k in server.listeners),
                server.lifecycle.broker_epoch,
                server.replica_manager.image().offset,
                len(server.replica_manager.partitions),
            )
            if on_ready is not None:
                on_ready(server)
            await stop.wait()
        else:
            startup.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await startup
        log.info("broker stopping id=%d", config.node_id)
    finally:
        if server.lifecycle.broker_epoch >= 0 and not hard_stop.is_set():
            controlled = asyncio.create_task(server.controlled_shutdown())
            abort = asyncio.create_task(hard_stop.wait())
            await asyncio.wait({controlled, abort}, return_when=asyncio.FIRST_COMPLETED)
            for task in (controlled, abort):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await server.shutdown()
        locks.release()
        log.info("broker stopped id=%d", config.node_id)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    # Quiet by default: our own lines say what matters.
    logging.getLogger("aiohttp").setLevel(logging.WARNING)
    if level.upper() != "DEBUG":
        logging.getLogger("storage").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kraft broker", description="run a Kafka-protocol broker")
    parser.add_argument("--config", required=True, help="the broker .properties file")
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
        print(f"kraft broker: {exc}", file=sys.stderr)
        return 2
    _setup_logging(args.log_level)
    tune_malloc()
    try:
        asyncio.run(run_broker(config))
    except (ConfigError, LogDirError) as exc:
        print(f"kraft broker: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # a port in use, an unwritable directory
        print(f"kraft broker: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
