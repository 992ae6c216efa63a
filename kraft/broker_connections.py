"""The controller HTTP layer's view of brokers' connections (a signal of
kraft/cluster_control.py's failure detection): a dead broker process's connections are
closed by its kernel, so when the last connection of a broker incarnation closes, the
active controller is told.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections import Counter
from typing import Any

from aiohttp import web

from kraft.service import ControllerApiError, ControllerService, NotActiveController
from metadata_log.controller_api import BrokerUnreachableRequest

log = logging.getLogger("kraft.http_api")

BROKER_HEADER = "X-Kraft-Broker"  # "<broker id>:<broker epoch>" (broker/controller_channel.py)
_BROKER_IDENT = re.compile(r"([0-9]{1,10}):([0-9]{1,19})")
CONNECTION_CHECK_S = 0.1  # how often closed connections are looked for


class BrokerConnections:
    """The open connections of each broker incarnation, learnt from the header its requests
    carry. When the last one closes, the process is probably gone (a live broker keeps the
    connection its heartbeats use): that is reported to the service as a `disconnected`
    event, and the controller decides (kraft/cluster_control.py; a controller that is not
    active ignores it). aiohttp has no close callback for a connection (its protocol has
    slots), so open connections are checked every CONNECTION_CHECK_S."""

    def __init__(self, service: ControllerService) -> None:
        self._service = service
        self._owner: dict[Any, tuple[int, int]] = {}  # aiohttp protocol -> (broker, epoch)
        self._count: Counter[tuple[int, int]] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()

    def note(self, request: web.Request) -> None:
        raw = request.headers.get(BROKER_HEADER)
        if raw is None:
            return
        match = _BROKER_IDENT.fullmatch(raw)
        if match is None or request.transport is None:
            return
        ident = (int(match[1]), int(match[2]))
        old = self._owner.get(request.protocol)
        if old == ident:
            return
        if old is not None:  # registered again on the same connection: a new epoch
            self._count[old] -= 1
            if self._count[old] <= 0:
                del self._count[old]
        self._owner[request.protocol] = ident
        self._count[ident] += 1

    async def watch(self) -> None:
        while True:
            await asyncio.sleep(CONNECTION_CHECK_S)
            closed = [p for p in self._owner if p.transport is None or p.transport.is_closing()]
            for proto in closed:
                ident = self._owner.pop(proto)
                self._count[ident] -= 1
                if self._count[ident] <= 0:
                    del self._count[ident]
                    self._report(*ident)

    def _report(self, broker_id: int, broker_epoch: int) -> None:
        req = BrokerUnreachableRequest(broker_id, broker_epoch, -1, "disconnected")

        async def report() -> None:
            try:
                await self._service.broker_unreachable(req)
            except (NotActiveController, ControllerApiError, TimeoutError):
                pass  # not ours to decide, or the session timeout still holds
            except Exception:
                log.exception("reporting broker %d's lost connections failed", broker_id)

        task = asyncio.create_task(report())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
