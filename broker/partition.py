"""The replication state of one partition on this broker, sans I/O.

No logs, sockets, clocks or tasks: the replica manager feeds in what happened (a
leadership change from the metadata log, a local append, a follower's fetch, the
leader's HW seen by our fetcher, the controller's answer to an ISR change) with
`now_ms`, and gets back what to do (which pending acks=all produces completed and
with which code, which ISR change to propose). That keeps every rule here drivable by
Hypothesis without ports or sleeps (tests/broker/test_replication_model.py).

Kafka's rules (Partition.scala, KIP-497, KIP-841):
- The leader's HW = min LEO over the *maximal* ISR, the leader's own LEO included: the
  committed ISR plus any member a pending expansion adds (a pending shrink still counts
  the members it removes). It never moves backwards on a leader, and only counts a
  follower's LEO once that follower has fetched in the current leader epoch: a
  position from an older epoch may be on a log that diverges from ours, and the fetch
  path only reports a follower whose fetch passed the divergence check.
- KIP-966 (`hw_min_isr`, set by the shell to min.insync.replicas when eligible leader
  replicas are on): the HW does not advance while the committed ISR is below it, so
  every replica that leaves the ISR then holds every record below the HW and the
  controller may elect it (its ELR). The committed ISR, as Kafka's isUnderMinIsr, not
  the maximal one: a pending expansion the controller may refuse must not move the HW
  past records an ELR member lacks.
- A follower's HW = min(the leader's HW, its own LEO).
- acks=all completes once the HW passes the batch's last offset, with
  NOT_ENOUGH_REPLICAS_AFTER_APPEND if the maximal ISR is then below
  `min.insync.replicas`.
- ISR shrink: a follower that has not caught up with the leader's LEO within
  `replica.lag.time.max.ms` leaves (caught up = fetched at our LEO, or at the LEO we had
  at its previous fetch, so a steady stream of produces does not count as lag).
- ISR expand: a follower whose LEO reached the HW and the start of our epoch, and whose
  broker is usable (registered, unfenced, not shutting down), joins.
- KIP-903: a follower's fetch names its broker epoch. A fetch with an older one than the
  last we saw comes from a dead incarnation and is refused; a follower joins the ISR
  only if it fetched with the broker epoch now registered (or sent none), and the
  AlterPartition carries those epochs so the controller checks again. Without this, a
  fetch a machine sent before it crashed and lost its unflushed tail could bring the
  restarted, empty broker back into the ISR on the strength of records it no longer has.
- One ISR change in flight at a time, through AlterPartition to the controller; the
  answer (or a newer partition epoch from the metadata log) commits or drops it. An
  answer that leaves the outcome unknown (a timeout) keeps it pending and it is sent
  again: an expansion the controller may have committed must keep counting in the HW,
  or the HW could pass records the new ISR member lacks (the replication model found
  this when an answer was lost).
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from common.errors import Errors

NO_LEADER = -1
UNKNOWN_OFFSET = -1

# AlterPartition answers that say the change was not applied (Kafka resets on these).
NOT_APPLIED = frozenset({Errors.OPERATION_NOT_ATTEMPTED, Errors.INELIGIBLE_REPLICA})
# Answers that say our state is stale: the metadata log is bringing a newer one.
WAIT_FOR_METADATA = frozenset(
    {
        Errors.UNKNOWN_TOPIC_OR_PARTITION,
        Errors.INVALID_REQUEST,
        Errors.FENCED_LEADER_EPOCH,
        Errors.STALE_BROKER_EPOCH,
        Errors.NEW_LEADER_ELECTED,
    }
)

T = TypeVar("T")


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower, in the current leader epoch."""

    leo: int = UNKNOWN_OFFSET  # the offset of its last fetch: it holds everything below
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1  # last time it was caught up with our LEO (ISR shrink)
    last_fetch_leader_leo: int = UNKNOWN_OFFSET  # our LEO at its last fetch
    broker_epoch: int = -1  # the broker epoch its last fetch named (-1: none)
    log_start: int = UNKNOWN_OFFSET  # the log start offset its last fetch named (DeleteRecords)


@dataclass(frozen=True, slots=True)
class AlterIsr:
    """An ISR change the leader proposes to the controller (an AlterPartition)."""

    new_isr: tuple[int, ...]
    leader_epoch: int
    partition_epoch: int  # the partition epoch it is based on
    # What each new_isr member fetched with (KIP-903); not part of the change's identity.
    broker_epochs: tuple[int, ...] = field(default=(), compare=False)


class Partition(Generic[T]):
    """Leader epoch, replicas, ISR, follower LEOs, HW and pending acks of one partition.

    `T` is whatever the shell uses to track a pending acks=all produce (a future); the
    core only orders and returns them, each with the Kafka error code it ends with.
    """

    def __init__(self, topic: str, partition: int, topic_id: str, local_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.local_id = local_id
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()  # committed: as in the metadata log
        self.pending_isr: AlterIsr | None = None  # sent to the controller, not answered
        self._resend_pending = False  # its last send ended with an unknown outcome
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.high_watermark = 0
        self.hw_min_isr = 0  # KIP-966: no HW advance while len(isr) < this (0: off)
        # First offset written in the current leader epoch (the LEO when we became leader).
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._remote: dict[int, ReplicaState] = {}
        # heap of (required HW, seq, min.insync.replicas, token)
        self._pending: list[tuple[int, int, int, T]] = []
        self._seq = itertools.count()

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader}"
        return (
            f"Partition({self.topic}-{self.partition} {role} epoch={self.leader_epoch} "
            f"isr={self.isr} pending={self.pending_isr} hw={self.high_watermark})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    @property
    def maximal_isr(self) -> tuple[int, ...]:
        """The committed ISR plus whoever a pending change adds: the set the HW waits for."""
        if self.pending_isr is None:
            return self.isr
        return self.isr + tuple(r for r in self.pending_isr.new_isr if r not in self.isr)

    # -- leadership ----------------------------------------------------------------------------

    def make_leader(
        self,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        local_leo: int,
        now_ms: int,
    ) -> tuple[bool, list[tuple[T, int]]]:
        """Lead at `leader_epoch`. Returns (whether this is a new leader epoch here, the
        pending produces that completed).

        Same epoch (only the ISR or replicas changed): follower states are kept, and a
        state older than ours (an AlterPartition answer got here before the metadata
        log did) is ignored. A new epoch: every follower's LEO is unknown until it
        fetches in this epoch, and each ISR member counts as caught up now (it gets a
        full lag window, as in Kafka).
        """
        new_epoch = not self.is_leader or leader_epoch != self.leader_epoch
        if not new_epoch and partition_epoch <= self.partition_epoch:
            return False, []
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self.leader = self.local_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        if new_epoch:
            self.leader_epoch_start_offset = local_leo
            self._remote = {
                r: ReplicaState(last_caught_up_ms=now_ms if r in self.isr else -1)
                for r in self.replicas
                if r != self.local_id
            }
        else:
            self._remote = {
                r: self._remote.get(r) or ReplicaState()
                for r in self.replicas
                if r != self.local_id
            }
        self.high_watermark = min(self.high_watermark, local_leo)
        return new_epoch, self._maybe_advance_hw(local_leo)

    def make_follower(
        self,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader: int,
        leader_epoch: int,
        partition_epoch: int,
        local_leo: int,
    ) -> list[T]:
        """Follow `leader` (or no one: NO_LEADER). Returns the pending produces that can
        no longer complete here: the shell fails them with NOT_LEADER_OR_FOLLOWER."""
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
        self.pending_isr = None
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._remote = {}
        self.high_watermark = min(self.high_watermark, local_leo)
        return self.drain_pending()

    # -- leader side -----------------------------------------------------------------------------

    def on_leader_append(self, local_leo: int) -> list[tuple[T, int]]:
        """Our LEO moved: with an ISR of one, so does the HW."""
        return self._maybe_advance_hw(local_leo)

    def is_stale_fetch(self, replica_id: int, broker_epoch: int) -> bool:
        """A fetch from an incarnation older than one we already heard from (KIP-903)."""
        state = self._remote.get(replica_id)
        return state is not None and -1 < broker_epoch < state.broker_epoch

    def on_follower_fetch(
        self,
        replica_id: int,
        fetch_offset: int,
        local_leo: int,
        now_ms: int,
        broker_epoch: int = -1,
        log_start_offset: int = UNKNOWN_OFFSET,
        prev_fetch_ms: int = -1,
    ) -> list[tuple[T, int]]:
        """A follower fetched at `fetch_offset` (so it holds every offset below it) in our
        current epoch, past the divergence check and `is_stale_fetch`, naming its own log
        start offset (for the low watermark). Returns produces now complete.

        `prev_fetch_ms`: the follower's previous fetch of its session, when this
        partition was in it but not read then (nothing had changed: an incremental
        fetch reads only what changed). Unread, it was as caught up then as at its last
        read, which is what Kafka, reading every partition of the session on every
        fetch, would have recorded."""
        state = self._remote.get(replica_id)
        if not self.is_leader or state is None:
            return []
        state.broker_epoch = broker_epoch
        state.log_start = log_start_offset
        leo = min(fetch_offset, local_leo)
        if leo >= local_leo:
            state.last_caught_up_ms = max(state.last_caught_up_ms, now_ms)
        elif state.last_fetch_leader_leo != UNKNOWN_OFFSET and leo >= state.last_fetch_leader_leo:
            # It has everything we had when it last fetched: caught up as of that fetch.
            state.last_caught_up_ms = max(
                state.last_caught_up_ms, state.last_fetch_ms, prev_fetch_ms
            )
        state.leo = leo
        state.last_fetch_ms = now_ms
        state.last_fetch_leader_leo = local_leo
        return self._maybe_advance_hw(local_leo)

    def low_watermark(self, local_log_start: int) -> int:
        """Kafka's lowWatermarkIfLeader: the smallest log start offset among us and the
        followers that count (here the ISR, which stands for Kafka's "alive" replicas),
        as each last named it in a fetch of this epoch; UNKNOWN_OFFSET while one has not
        fetched yet. A DeleteRecords completes when it reaches the requested offset."""
        low = local_log_start
        for r in self.maximal_isr:
            if r == self.local_id:
                continue
            state = self._remote.get(r)
            low = min(low, UNKNOWN_OFFSET if state is None else state.log_start)
        return low

    def _maybe_advance_hw(self, local_leo: int) -> list[tuple[T, int]]:
        if not self.is_leader or len(self.isr) < self.hw_min_isr:
            return []
        new_hw = local_leo
        for r in self.maximal_isr:
            if r == self.local_id:
                continue
            state = self._remote.get(r)
            if state is None or state.leo == UNKNOWN_OFFSET:
                return []  # an ISR member we have not heard from in this epoch
            new_hw = min(new_hw, state.leo)
        if new_hw <= self.high_watermark:
            return []
        self.high_watermark = new_hw
        return self._complete()

    def add_pending(self, required_hw: int, min_isr: int, token: T) -> int | None:
        """Track an acks=all produce that completes once HW >= `required_hw`. Returns
        its code at once (keeping nothing) when the HW is already there, else None."""
        if self.high_watermark >= required_hw:
            return self._ack_code(min_isr)
        heapq.heappush(self._pending, (required_hw, next(self._seq), min_isr, token))
        return None

    def remove_pending(self, token: T) -> None:
        """Forget a produce that gave up (timed out)."""
        kept = [e for e in self._pending if e[3] is not token]
        if len(kept) != len(self._pending):
            self._pending = kept
            heapq.heapify(self._pending)

    def timeout_code(self, min_isr: int, request_timed_out: int) -> int:
        """What a produce that timed out waiting for the HW answers: too few replicas
        to ever complete it, or plainly too slow."""
        if len(self.maximal_isr) < min_isr:
            return Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        return request_timed_out

    def _ack_code(self, min_isr: int) -> int:
        if len(self.maximal_isr) >= min_isr:
            return Errors.NONE
        return Errors.NOT_ENOUGH_REPLICAS_AFTER_APPEND

    def _complete(self) -> list[tuple[T, int]]:
        done: list[tuple[T, int]] = []
        while self._pending and self._pending[0][0] <= self.high_watermark:
            _, _, min_isr, token = heapq.heappop(self._pending)
            done.append((token, self._ack_code(min_isr)))
        return done

    def drain_pending(self) -> list[T]:
        out = [e[3] for e in sorted(self._pending, key=lambda e: (e[0], e[1]))]
        self._pending = []
        return out

    # -- ISR changes ------------------------------------------------------------------------------

    def is_caught_up(self, replica_id: int, local_leo: int, now_ms: int, lag_max_ms: int) -> bool:
        state = self._remote.get(replica_id)
        if state is None:
            return False
        return state.leo == local_leo or now_ms - state.last_caught_up_ms <= lag_max_ms

    def maybe_shrink_isr(self, local_leo: int, now_ms: int, lag_max_ms: int) -> AlterIsr | None:
        """Propose dropping the ISR followers that lag by more than `lag_max_ms` (run
        every lag_max_ms / 2 by the shell). None: nothing to do, or a change in flight."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        out = [
            r
            for r in self.isr
            if r != self.local_id and not self.is_caught_up(r, local_leo, now_ms, lag_max_ms)
        ]
        if not out:
            return None
        return self._propose(tuple(r for r in self.isr if r not in out))

    def maybe_expand_isr(self, replica_id: int, registered_epoch: int | None) -> AlterIsr | None:
        """After a follower's fetch: propose adding it once it reached our HW and the
        start of our epoch (it then holds every committed record), its broker is usable
        in the metadata image (`registered_epoch`: its broker epoch there, None when it
        is fenced, shutting down or unknown) and it fetched as that incarnation."""
        if not self.is_leader or self.pending_isr is not None or replica_id in self.isr:
            return None
        state = self._remote.get(replica_id)
        if (
            registered_epoch is None
            or state is None
            or state.broker_epoch not in (-1, registered_epoch)
            or state.leo == UNKNOWN_OFFSET
            or state.leo < self.high_watermark
            or state.leo < self.leader_epoch_start_offset
        ):
            return None
        return self._propose((*self.isr, replica_id))

    def _propose(self, new_isr: tuple[int, ...]) -> AlterIsr:
        epochs = tuple(
            s.broker_epoch if (s := self._remote.get(r)) is not None else -1 for r in new_isr
        )
        self.pending_isr = AlterIsr(new_isr, self.leader_epoch, self.partition_epoch, epochs)
        self._resend_pending = False
        return self.pending_isr

    def alter_isr_to_resend(self) -> AlterIsr | None:
        """The pending change, when its last send ended without a known outcome (run
        with the shrink check)."""
        if self.pending_isr is None or not self._resend_pending or not self.is_leader:
            return None
        self._resend_pending = False
        return self.pending_isr

    def on_alter_isr_answer(
        self,
        sent: AlterIsr,
        error_code: int,
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        local_leo: int,
    ) -> list[tuple[T, int]]:
        """The controller answered `sent`. Success commits the ISR it returns; an answer
        saying it was not applied drops it; one saying our state is stale keeps it
        pending until the metadata log brings the newer state (which ends it); any
        other (a timeout: maybe applied, maybe not) keeps it pending and marks it to be
        sent again. An answer to a proposal already ended changes nothing."""
        if self.pending_isr is not sent:
            return []
        if error_code == Errors.NONE:
            self.pending_isr = None
            if (
                self.is_leader
                and leader_epoch == self.leader_epoch
                and partition_epoch > self.partition_epoch
            ):
                self.isr = tuple(isr)
                self.partition_epoch = partition_epoch
        elif error_code in NOT_APPLIED:
            self.pending_isr = None
        elif error_code not in WAIT_FOR_METADATA:
            self._resend_pending = True
        # A dropped expansion no longer holds the HW back; a committed shrink neither.
        return self._maybe_advance_hw(local_leo)

    # -- follower side ---------------------------------------------------------------------------

    def on_follower_progress(self, leader_hw: int, local_leo: int) -> None:
        """Our fetcher appended and saw the leader's HW."""
        if not self.is_leader:
            self.high_watermark = max(0, min(leader_hw, local_leo))

    def on_truncate(self, local_leo: int) -> None:
        self.high_watermark = min(self.high_watermark, local_leo)
