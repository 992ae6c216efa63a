"""Group commit: many controller decisions in one Raft entry. Sans-I/O.

The active controller used to take one write at a time: decide on the committed image,
append one entry, wait for its commit, answer, and only then look at the next request;
about 1 commit round trip per write. Here the requests that queued while the last entry
was in flight are planned together (Kafka's QuorumController does the same with its
in-memory "latest" state and deferred completions):

- each is decided in arrival order on the committed image plus the records of the ones
  planned before it, which the state machine's own rules (`apply_records`) project, so a
  registration's broker epoch, a partition epoch or a producer id block seen by a later
  decision is exactly what the entry will give it;
- a decision whose records do not apply to that projection is answered as the state
  machine would have answered it alone (INVALID), and its records stay out of the entry,
  so one bad decision cannot sink the others;
- the records of the rest go in ONE entry, in order; each decision learns its own first
  offset (the entry's first offset plus its position).

Safety does not rest on the projection: the state machine re-checks the whole entry at
apply time (compare-and-set on partition epochs, controller epoch fencing), and an entry
that does not apply changes nothing (the node then decides each request again alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kraft.decision import Decision
from kraft.state_machine import AppendResult, AppendStatus, apply_records
from metadata_log.delta import MetadataReplayError
from metadata_log.image import MetadataImage

MAX_GROUP = 256  # requests per entry: bounds one entry's size and one plan's latency
MAX_GROUP_RECORDS = 20_000  # no request joins a group that already holds this many records


class Decider(Protocol):
    def decide(self, image: MetadataImage, request: Any, now_ms: int) -> Decision: ...


@dataclass(frozen=True, slots=True)
class Planned:
    """One request's place in the group: its decision and where its records start in
    the entry, or why it has none (`error`: decide raised; `invalid`: its records do not
    apply on top of the ones before it)."""

    decision: Decision | None
    start: int = 0
    error: Exception | None = None
    invalid: str | None = None

    @property
    def records(self) -> tuple:
        if self.decision is None or self.invalid is not None:
            return ()
        return self.decision.records

    def answer(self, entry: AppendResult | None) -> tuple[Any, AppendResult | None]:
        """The response and this decision's own append outcome, once the entry (None: no
        entry was needed) committed with status OK."""
        assert self.decision is not None
        if self.invalid is not None:
            own = AppendResult(AppendStatus.INVALID, error=self.invalid)
            return self.decision.respond(own), own
        if not self.decision.records:
            return self.decision.respond(None), None
        assert entry is not None
        first = entry.first_offset + self.start
        own = AppendResult(entry.status, first, first + len(self.decision.records) - 1)
        return self.decision.respond(own), own


def plan_group(
    decider: Decider,
    image: MetadataImage,
    next_offset: int,
    requests: Sequence[Any],
    now_ms: int,
    max_records: int = MAX_GROUP_RECORDS,
) -> list[Planned]:
    """Decide `requests` in order on `image` (committed, records up to `next_offset` - 1)
    plus the records planned before each; one `Planned` per request planned. Once the
    group holds `max_records` records the rest are left out (the caller queues them
    for the next group): the answer is shorter than `requests`."""
    return _plan(decider, image, next_offset, requests, now_ms, max_records)[0]


@dataclass(slots=True)
class Projection:
    """The image an entry leaves behind if it applies, and the offset after it: what the
    next pipelined entry is decided on. Lazy: the entry's last decision is projected only
    when a next entry is decided while this one is in flight (projecting costs as much as
    applying, and most entries commit before anything is decided on them)."""

    image: MetadataImage  # every decision of the entry but `last` projected
    next_offset: int  # where `last` starts
    last: tuple = ()
    failed: str | None = None  # `last` does not apply: the entry will be refused

    def resolve(self) -> tuple[MetadataImage, int] | None:
        """(image, next offset) after the whole entry, or None when it cannot apply."""
        if self.last:
            last, self.last = self.last, ()
            try:
                self.image, _ = apply_records(
                    self.image, self.next_offset, list(last), encoded=False
                )
            except MetadataReplayError as exc:
                self.failed = str(exc)
                return None
            self.next_offset += len(last)
        return None if self.failed is not None else (self.image, self.next_offset)


def plan_entry(
    decider: Decider,
    image: MetadataImage,
    next_offset: int,
    requests: Sequence[Any],
    now_ms: int,
    max_records: int = MAX_GROUP_RECORDS,
) -> tuple[list[Planned], Projection]:
    """`plan_group`, and the projection of the entry for the one after it."""
    planned, projected, count, pending = _plan(
        decider, image, next_offset, requests, now_ms, max_records
    )
    last = () if pending is None else planned[pending].records
    return planned, Projection(projected, next_offset + count, last)


def _plan(
    decider: Decider,
    image: MetadataImage,
    next_offset: int,
    requests: Sequence[Any],
    now_ms: int,
    max_records: int,
) -> tuple[list[Planned], MetadataImage, int, int | None]:
    """The plan, the projection of all but the last decision with records, how many
    records that projection holds, and the last one's index (None: none pending)."""
    out: list[Planned] = []
    projected = image
    count = 0  # records projected so far = the next one's position in the entry
    # The last decision with records, not yet projected: only a later request needs the
    # projection, so a group's last (or only) decision is never applied twice on the
    # leader (a fencing of 10,000 partitions costs tens of milliseconds to apply).
    pending: int | None = None

    def settle() -> None:
        nonlocal projected, count, pending
        if pending is None:
            return
        i, pending = pending, None
        decision = out[i].decision
        assert decision is not None
        try:
            projected, _ = apply_records(
                projected, next_offset + count, list(decision.records), encoded=False
            )
        except MetadataReplayError as exc:
            out[i] = Planned(decision, invalid=str(exc))
            return
        count += len(decision.records)

    for request in requests:
        settle()
        if count >= max_records:
            break
        try:
            decision = decider.decide(projected, request, now_ms)
        except Exception as exc:  # noqa: BLE001 - a refusal raised (e.g. ControllerApiError)
            out.append(Planned(None, error=exc))
            continue
        if not decision.records:
            out.append(Planned(decision))
            continue
        out.append(Planned(decision, count))
        pending = len(out) - 1
    # A last decision left unprojected goes in unchecked: if its records do not apply,
    # the state machine refuses the entry and the node decides each request again alone.
    return out, projected, count, pending
