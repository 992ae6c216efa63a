"""One long-running loop of an asyncio shell (Kafka's ShutdownableThread): the follower
fetchers, the broker's heartbeats and the metadata loader each run one."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any


class ShutdownableTask:
    def __init__(self, name: str, run: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self.name = name
        self._run = run
        self._task: asyncio.Task[None] | None = None
        self.stopping = False  # the loop checks this between steps

    def start(self) -> None:
        self.stopping = False
        self._task = asyncio.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        # The flag, not only the cancel: asyncio.wait_for on 3.11 can swallow a
        # cancellation that races with the awaited call's own error.
        self.stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
