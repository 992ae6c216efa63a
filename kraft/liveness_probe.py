"""The active controller's confirmation that a suspected broker's process is gone: a TCP
connect to each listener it registered. The I/O half of fast fencing
(kraft/cluster_control.py decides; this only reports what the network said).

Only a refusal counts (ECONNREFUSED: the host answered, nothing listens on the port), and
only when *every* address of *every* listener refuses. An accepted connection (a live,
perhaps slow, process), a timeout or an unreachable host (a partition, a vanished host)
confirm nothing: those keep the grace or the session timeout. The connection is closed
at once, before any byte: a live broker sees a peer that hung up, nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable

from metadata_log.image import BrokerRegistration
from metadata_log.records import Endpoint

log = logging.getLogger("kraft.liveness_probe")

PROBE_TIMEOUT_S = 1.0


async def _refuses(host: str, port: int, timeout_s: float) -> bool:
    loop = asyncio.get_running_loop()
    try:
        infos = await asyncio.wait_for(
            loop.getaddrinfo(host, port, type=socket.SOCK_STREAM), timeout_s
        )
    except (OSError, TimeoutError):
        return False  # unresolvable: says nothing about the process
    if not infos:
        return False
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        sock.setblocking(False)
        try:
            await asyncio.wait_for(loop.sock_connect(sock, addr), timeout_s)
        except ConnectionRefusedError:
            continue
        except (OSError, TimeoutError):
            return False  # unreachable or silent: not a refusal
        else:
            return False  # something listens there
        finally:
            with contextlib.suppress(OSError):
                sock.close()
    return True


async def listeners_refuse(
    listeners: tuple[Endpoint, ...], timeout_s: float = PROBE_TIMEOUT_S
) -> bool:
    """True iff every address of every listener refused a connection."""
    if not listeners:
        return False
    results = await asyncio.gather(*(_refuses(ep.host, ep.port, timeout_s) for ep in listeners))
    return all(results)


class LivenessProbes:
    """At most one probe per broker at a time, each in its own task; `on_refused(broker_id,
    broker_epoch)` is awaited when every listener of that incarnation refused (the node
    then asks the sans-I/O core, which may have heard a heartbeat meanwhile)."""

    def __init__(
        self,
        on_refused: Callable[[int, int], Awaitable[None]],
        timeout_s: float = PROBE_TIMEOUT_S,
    ) -> None:
        self._on_refused = on_refused
        self._timeout_s = timeout_s
        self._running: dict[int, asyncio.Task[None]] = {}

    def start(self, reg: BrokerRegistration) -> None:
        if reg.broker_id in self._running:
            return

        async def probe() -> None:
            try:
                if await listeners_refuse(reg.listeners, self._timeout_s):
                    await self._on_refused(reg.broker_id, reg.broker_epoch)
            except Exception:
                log.exception("liveness probe of broker %d failed", reg.broker_id)
            finally:
                self._running.pop(reg.broker_id, None)

        self._running[reg.broker_id] = asyncio.create_task(probe(), name=f"probe-{reg.broker_id}")
