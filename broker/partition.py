"""The replication state of one partition on this broker, sans I/O.

No logs, sockets, clocks or tasks: the replica manager feeds in what happened (a
leadership change from the metadata log, a local append, a follower's fetch, the
leader's HW seen by our fetcher) with `now_ms`, and gets back what to do (which
pending acks=all produces completed, which must fail). That keeps every rule here
drivable by Hypothesis without ports or sleeps.

Kafka's rules (Partition.scala):
- The leader's HW = min LEO over the ISR, the leader's own LEO included. It never
  moves backwards on a leader, and only counts a follower's LEO once that follower
  has fetched in the current leader epoch (a follower's position from an older epoch
  may be on a log that diverges from ours; the fetch path only reports a follower
  whose fetch passed the divergence check).
- A follower's HW = min(the leader's HW, its own LEO).
- acks=all completes once the HW passes the batch's last offset.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

NO_LEADER = -1
UNKNOWN_OFFSET = -1

T = TypeVar("T")


@dataclass(slots=True)
class ReplicaState:
    """What the leader knows of one follower, in the current leader epoch."""

    leo: int = UNKNOWN_OFFSET  # the offset of its last fetch: it holds everything below
    last_fetch_ms: int = -1
    last_caught_up_ms: int = -1  # last time its fetch reached our LEO (for ISR shrink)


class Partition(Generic[T]):
    """Leader epoch, replicas, ISR, follower LEOs, HW and pending acks of one partition.

    `T` is whatever the shell uses to track a pending acks=all produce (a future); the
    core only orders and returns them.
    """

    def __init__(self, topic: str, partition: int, topic_id: str, local_id: int) -> None:
        self.topic = topic
        self.partition = partition
        self.topic_id = topic_id
        self.local_id = local_id
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader = NO_LEADER
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.high_watermark = 0
        # First offset written in the current leader epoch (the LEO when we became leader).
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._remote: dict[int, ReplicaState] = {}
        self._pending: list[tuple[int, int, T]] = []  # heap of (required HW, seq, token)
        self._seq = itertools.count()

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader}"
        return (
            f"Partition({self.topic}-{self.partition} {role} epoch={self.leader_epoch} "
            f"isr={self.isr} hw={self.high_watermark})"
        )

    @property
    def is_leader(self) -> bool:
        return self.leader == self.local_id

    def remote(self, replica_id: int) -> ReplicaState | None:
        return self._remote.get(replica_id)

    # -- leadership ----------------------------------------------------------------------------

    def make_leader(
        self,
        replicas: Iterable[int],
        isr: Iterable[int],
        leader_epoch: int,
        partition_epoch: int,
        local_leo: int,
        now_ms: int,
    ) -> tuple[bool, list[T]]:
        """Lead at `leader_epoch`. Returns (whether this is a new leader epoch here, the
        pending produces the HW now covers).

        Same epoch (only the ISR or replicas changed): follower states are kept. A new
        epoch: every follower's LEO is unknown until it fetches in this epoch, and each
        ISR member counts as caught up now (it gets a full lag window, as in Kafka).
        """
        new_epoch = not self.is_leader or leader_epoch != self.leader_epoch
        self.replicas = tuple(replicas)
        self.isr = tuple(isr)
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
        self.leader = leader
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.leader_epoch_start_offset = UNKNOWN_OFFSET
        self._remote = {}
        self.high_watermark = min(self.high_watermark, local_leo)
        return self.drain_pending()

    # -- leader side -----------------------------------------------------------------------------

    def on_leader_append(self, local_leo: int) -> list[T]:
        """Our LEO moved: with an ISR of one, so does the HW."""
        return self._maybe_advance_hw(local_leo)

    def on_follower_fetch(
        self, replica_id: int, fetch_offset: int, local_leo: int, now_ms: int
    ) -> list[T]:
        """A follower fetched at `fetch_offset` (so it holds every offset below it) in our
        current epoch, past the divergence check. Returns produces now complete."""
        state = self._remote.get(replica_id)
        if not self.is_leader or state is None:
            return []
        state.leo = min(fetch_offset, local_leo)
        state.last_fetch_ms = now_ms
        if fetch_offset >= local_leo:
            state.last_caught_up_ms = now_ms
        return self._maybe_advance_hw(local_leo)

    def _maybe_advance_hw(self, local_leo: int) -> list[T]:
        if not self.is_leader:
            return []
        new_hw = local_leo
        for r in self.isr:
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

    def add_pending(self, required_hw: int, token: T) -> bool:
        """Track an acks=all produce that completes once HW >= `required_hw`. Returns
        True (and keeps nothing) when the HW is already there."""
        if self.high_watermark >= required_hw:
            return True
        heapq.heappush(self._pending, (required_hw, next(self._seq), token))
        return False

    def remove_pending(self, token: T) -> None:
        """Forget a produce that gave up (timed out)."""
        kept = [e for e in self._pending if e[2] is not token]
        if len(kept) != len(self._pending):
            self._pending = kept
            heapq.heapify(self._pending)

    def _complete(self) -> list[T]:
        done: list[T] = []
        while self._pending and self._pending[0][0] <= self.high_watermark:
            done.append(heapq.heappop(self._pending)[2])
        return done

    def drain_pending(self) -> list[T]:
        out = [token for _, _, token in sorted(self._pending)]
        self._pending = []
        return out

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    # -- follower side ---------------------------------------------------------------------------

    def on_follower_progress(self, leader_hw: int, local_leo: int) -> None:
        """Our fetcher appended and saw the leader's HW."""
        if not self.is_leader:
            self.high_watermark = max(0, min(leader_hw, local_leo))

    def on_truncate(self, local_leo: int) -> None:
        self.high_watermark = min(self.high_watermark, local_leo)

    # -- ISR (the next step wires these to AlterPartition) -----------------------------------

    def lagging_isr_members(self, now_ms: int, lag_time_max_ms: int) -> list[int]:
        """ISR followers that have not caught up with our LEO within the lag window."""
        if not self.is_leader:
            return []
        return [
            r
            for r in self.isr
            if r != self.local_id
            and (state := self._remote.get(r)) is not None
            and now_ms - state.last_caught_up_ms > lag_time_max_ms
        ]
