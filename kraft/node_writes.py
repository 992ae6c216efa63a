"""The active controller's writes (a mixin of `ControllerNode`): pipelined group commit.

Writes queue; the requests that queued are decided in order, each on the view of the
ones before it, and appended as ONE entry (kraft/group_commit.py); up to
`controller.max.inflight.entries` entries are in flight, each decided on the projection
of those before it (kraft/pipeline.py). Every answer waits for its entry, so none
reports state that has not committed. An entry that does not apply (INVALID: the image
moved under it) has its requests, and those of every entry after it, decided again one
at a time on the committed image once nothing is in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Any

from kraft.group_commit import MAX_GROUP, Planned, Projection, plan_entry, plan_group
from kraft.pipeline import Entry, Outcome, Pipeline
from kraft.service import NotActiveController
from kraft.state_machine import AppendResult, AppendStatus

if TYPE_CHECKING:
    from common.clock import Clock
    from kraft.controller import QuorumController
    from kraft.quorum import Quorum
    from metadata_log.records import Record

log = logging.getLogger("kraft.node")

Waiter = tuple[Any, "asyncio.Future[tuple[Any, AppendResult | None]]"]


class GroupCommitWrites:
    # ControllerNode's fields and methods the writes use.
    node_id: int
    quorum: Quorum
    controller: QuorumController
    clock: Clock
    _lock: asyncio.Lock
    _queue: list[Waiter]
    _pipeline: Pipeline[Waiter]
    _settled: asyncio.Event
    _settling: set[asyncio.Task[None]]
    _drainer: asyncio.Task[None] | None
    if TYPE_CHECKING:

        def _require_active(self) -> int: ...

        def _leader_http(self) -> str | None: ...

        def _handle_stale(self, result: AppendResult) -> None: ...

        async def _append(
            self,
            epoch: int,
            records: list[Record],
            seq: int | None = None,
            after: int | None = None,
        ) -> AppendResult: ...

    async def _write(self, request: Any) -> tuple[Any, AppendResult | None]:
        """Queue `request` for the next group commit and wait for its answer."""
        self._require_active()  # fail fast, without queueing
        fut: asyncio.Future[tuple[Any, AppendResult | None]] = (
            asyncio.get_running_loop().create_future()
        )
        self._queue.append((request, fut))
        self._kick()
        return await fut

    def _kick(self) -> None:
        if self._drainer is None or self._drainer.done():
            self._drainer = asyncio.create_task(self._drain(), name=f"writes-{self.node_id}")

    async def _drain(self) -> None:
        """Propose the queue group by group (group commit), up to `max_inflight` entries
        in flight (kraft/pipeline.py); requests of entries that did not apply are decided
        again one at a time once nothing is in flight."""
        pipe = self._pipeline
        while self._queue or pipe.redo_ready():
            group: list[Waiter] = []
            try:
                async with self._lock:
                    while not (pipe.has_room() or pipe.redo_ready()):
                        self._settled.clear()
                        await self._settled.wait()
                    if pipe.redo_ready():
                        group = pipe.take_redo()
                        await self._redo(group)
                        continue
                    group = self._queue[:MAX_GROUP]
                    del self._queue[:MAX_GROUP]
                    if group and not self._propose(group):
                        group = []  # queued again, not failed
                        self._settled.clear()
                        await self._settled.wait()
            except Exception as exc:  # noqa: BLE001 - every waiter must hear of it
                for _, fut in group:
                    if not fut.done():
                        fut.set_exception(exc)

    async def _wait_idle(self) -> None:
        """Until nothing is in flight (the lock held: nothing new is proposed). Bounded:
        each append ends within `write_timeout_s`."""
        while self._pipeline.in_flight:
            self._settled.clear()
            await self._settled.wait()

    def _propose(self, group: list[Waiter]) -> bool:
        """Decide `group` on the pipeline's view and start appending it as one entry
        (without waiting for it to commit); False: not now, `group` went back to the
        queue until an entry settles."""
        epoch = self._require_active()
        now_ms = self.clock.monotonic_ms()
        view = self._pipeline.view(self.quorum.image(), self.quorum.next_offset)
        if view is None:  # the newest entry will be refused: wait for it (and the redo)
            self._queue[:0] = group
            return False
        image, first, after = view
        requests = [req for req, _ in group]
        projection: Projection | None = None
        if self._pipeline.max_inflight > 1:  # the next entry may be decided on this one
            planned, projection = plan_entry(self.controller, image, first, requests, now_ms)
        else:
            planned = plan_group(self.controller, image, first, requests, now_ms)
        if len(planned) < len(group):  # the entry is full: the rest go first next time
            self._queue[:0] = group[len(planned) :]
            del group[len(planned) :]
        records = [r for p in planned for r in p.records]
        if not records:
            self._answer(group, planned, None)
            return True
        seq = None if projection is None else self.quorum.new_seq()
        entry = self._pipeline.add(Entry(group, planned, seq, after, projection))
        task = asyncio.create_task(self._settle(entry, epoch, records))
        self._settling.add(task)
        task.add_done_callback(self._settling.discard)
        return True

    async def _settle(self, entry: Entry[Waiter], epoch: int, records: list[Record]) -> None:
        result: AppendResult | None = None
        error: Exception | None = None
        try:
            result = await self._append(epoch, records, seq=entry.seq, after=entry.after)
        except Exception as exc:  # noqa: BLE001 - TimeoutError: outcome unknown
            error = exc
        try:
            outcome = self._pipeline.settle(entry, result)
            if outcome is Outcome.STALE:
                assert result is not None
                with contextlib.suppress(NotActiveController):
                    self._handle_stale(result)
                error = NotActiveController(self._leader_http())
            if error is not None:
                for _, fut in entry.waiters:
                    if not fut.done():
                        fut.set_exception(error)
            elif outcome is Outcome.REDO:
                # The committed image moved outside this pipeline (an append whose
                # outcome was unknown landed late), or an entry before this one did not
                # apply: take each decision again, one at a time.
                assert result is not None
                log.info(
                    "entry of %d requests re-taken one by one: %s", len(entry.waiters), result.error
                )
            else:
                self._answer(entry.waiters, entry.planned, result)
        finally:
            self._settled.set()
            if self._pipeline.redo_ready():  # whichever entry settles last starts the redo
                self._kick()

    @staticmethod
    def _answer(group: list[Waiter], planned: list[Planned], result: AppendResult | None) -> None:
        for (_, fut), p in zip(group, planned, strict=True):
            if fut.done():
                continue
            if p.error is not None:
                fut.set_exception(p.error)
            else:
                fut.set_result(p.answer(result))

    async def _redo(self, group: list[Waiter]) -> None:
        for req, fut in group:
            if fut.done():
                continue
            try:
                fut.set_result(await self._write_one(req))
            except Exception as exc:  # noqa: BLE001
                fut.set_exception(exc)

    async def _write_one(self, request: Any) -> tuple[Any, AppendResult | None]:
        """Decide on `request` on the committed image, append, and answer (the lock held)."""
        result: AppendResult | None = None
        for attempt in (1, 2):
            epoch = self._require_active()
            now_ms = self.clock.monotonic_ms()
            decision = self.controller.decide(self.quorum.image(), request, now_ms)
            if not decision.records:
                return decision.respond(None), None
            result = await self._append(epoch, list(decision.records))
            self._handle_stale(result)
            if result.status != AppendStatus.INVALID:
                break
            log.info(
                "stale decision re-taken node=%d attempt=%d: %s",
                self.node_id,
                attempt,
                result.error,
            )
        return decision.respond(result), result
