"""Pipelined group commit: several Raft entries in flight at once. Sans-I/O.

Group commit (kraft/group_commit.py) decides the requests that queued while ONE entry
was in flight, on the committed image. Here the active controller does not wait for
that entry: it decides the next group on the image the entries still in flight will
leave behind if they apply (a speculative view: committed image + their records, as
projected by the state machine's own `apply_records`) and proposes it at once, up to
`max_inflight` entries (`controller.max.inflight.entries`; 1 is plain group commit).
Kafka's QuorumController does the same: it decides on its in-memory "latest" state and
completes each request when its offset commits.

Safety still rests on the state machine alone. Each pipelined entry names the one it was
decided after (`after`, a sequence number of the same writer), and the state machine
refuses it unless that one applied (kraft/state_machine.py). So when an entry does not
apply (INVALID: the image moved under it), every entry decided after it is refused too,
in Raft order, and none of their speculative answers is ever given: their requests are
decided again one at a time on the committed image, once nothing is in flight
(`take_redo`). No new entry is decided on a view that proved wrong: after a failure the
pipeline takes nothing new until the redo is done.

Leadership changes need nothing new: each entry's append fails or times out on its own
exactly as a lone entry did (STALE_CONTROLLER_EPOCH: the node stops being active; no
outcome: the client is told to retry), and an entry decided after one that never landed
is refused.

This module holds the bookkeeping only: which entries are in flight, what the next one
is decided on, and what a settled entry means for its waiters. The node (kraft/node_writes.py)
does the I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Generic, TypeVar

from kraft.group_commit import Planned, Projection
from kraft.state_machine import AppendResult, AppendStatus
from metadata_log.image import MetadataImage

W = TypeVar("W")  # a waiter: whatever the node answers (request and future)


@dataclass(slots=True)
class Entry(Generic[W]):
    """One proposed Raft entry: its waiters and decisions (same order), the writer's
    sequence number it is appended with and the one it must follow, and the view it
    leaves behind if it applies (None: not projected, nothing may be decided on it)."""

    waiters: list[W]
    planned: list[Planned]
    seq: int | None = None
    after: int | None = None
    projection: Projection | None = None
    key: int = -1  # set by the pipeline


class Outcome(Enum):
    ANSWER = "answer"  # applied: answer each waiter from its decision
    STALE = "stale"  # fenced: this node is no longer the active controller
    UNKNOWN = "unknown"  # no outcome learned in time: the clients retry
    REDO = "redo"  # did not apply: its requests wait in `take_redo`


class Pipeline(Generic[W]):
    def __init__(self, max_inflight: int = 1) -> None:
        if max_inflight < 1:
            raise ValueError("max_inflight must be at least 1")
        self.max_inflight = max_inflight
        self._inflight: dict[int, Entry[W]] = {}  # by key, in proposal order
        self._next_key = 0
        self._last_key = -1  # the newest proposed entry
        self._redo: list[tuple[int, list[W]]] = []

    @property
    def in_flight(self) -> int:
        return len(self._inflight)

    def has_room(self) -> bool:
        """May the next entry be proposed now? Not while a failed entry's requests wait
        to be decided again: everything decided after it is wrong."""
        return len(self._inflight) < self.max_inflight and not self._redo

    def redo_ready(self) -> bool:
        """Requests of failed entries are waiting, and nothing is in flight any more."""
        return bool(self._redo) and not self._inflight

    def view(
        self, committed: MetadataImage, committed_next: int
    ) -> tuple[MetadataImage, int, int | None] | None:
        """What the next entry is decided on: the image, its next offset, and the seq it
        must follow (None: the committed image, nothing to follow). None when the newest
        entry in flight cannot apply as projected: it will be refused, and so would any
        entry decided after it; the caller waits for it to settle.

        The newest proposed entry's projection while it is in flight. Once it settled,
        the committed image: had it applied, everything before it had too (each one
        follows the one before), so the committed image holds them all; had it not,
        the pipeline is redoing and proposes nothing."""
        tail = self._inflight.get(self._last_key)
        if tail is None or tail.projection is None:
            return committed, committed_next, None
        after = tail.projection.resolve()
        if after is None:
            return None
        return after[0], after[1], tail.seq

    def add(self, entry: Entry[W]) -> Entry[W]:
        assert self.has_room(), "proposed without room"
        entry.key = self._next_key
        self._next_key += 1
        self._last_key = entry.key
        self._inflight[entry.key] = entry
        return entry

    def settle(self, entry: Entry[W], result: AppendResult | None) -> Outcome:
        """`entry`'s append finished with `result` (None: outcome unknown)."""
        self._inflight.pop(entry.key, None)
        if result is None:
            return Outcome.UNKNOWN
        if result.status == AppendStatus.STALE_CONTROLLER_EPOCH:
            return Outcome.STALE
        if result.status != AppendStatus.OK:
            self._redo.append((entry.key, entry.waiters))
            return Outcome.REDO
        return Outcome.ANSWER

    def take_redo(self) -> list[W]:
        """The waiters of every failed entry, in the order they were proposed, once
        nothing is in flight (else [])."""
        if not self.redo_ready():
            return []
        self._redo.sort(key=lambda kw: kw[0])
        out = [w for _, waiters in self._redo for w in waiters]
        self._redo.clear()
        return out
