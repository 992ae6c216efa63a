"""The pysyncobj adapter: replicate metadata batches through Raft, from asyncio.

pysyncobj runs its own tick thread; everything it calls back (apply, commit callbacks,
state changes) runs there. This module is the only bridge between that thread and the
event loop, and it never blocks the loop:
- `append` hands a batch to pysyncobj with a callback that resolves an asyncio future
  through `loop.call_soon_threadsafe`, and waits with its own timeout, because callbacks
  can be lost (notes/pysyncobj.md). A lost or failed attempt is retried with the SAME
  (writer, seq): the state machine answers a duplicate with its first outcome, so a
  retry can never apply a batch twice.
- every applied batch wakes the loop (coalesced: one wake-up per burst) so
  `wait_for_offset` long-polls without sleeping.

pysyncobj's leader flag is advisory: two nodes can both believe they lead for up to
`leaderFallbackTimeout`. Only the state machine's controller-epoch fencing makes writes
from a deposed leader harmless; callers must pass the epoch they were elected in.

Time: unlike the controller's other shells, this adapter keeps its own deadlines on the
event loop's clock (`loop.time()`, `asyncio.wait_for`) instead of a `common.clock.Clock`.
They bound waits on pysyncobj's tick thread, which runs Raft on real time (its election
and append timers read `time.monotonic` on that thread); a manual clock could not move
that thread, only stall or rush the waits on it. A whole-cluster simulation replaces this
adapter (an in-memory quorum under the same interface), not its clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, SyncObjConsumer, replicated
from pysyncobj.monotonic import monotonic as raft_monotonic

from kraft.raft_durability import Durability, DurableTransport, register
from kraft.state_machine import AppendResult, AppendStatus, MetadataStateMachine
from metadata_log.image import MetadataImage
from metadata_log.records import Record, encode_batch

log = logging.getLogger("kraft.quorum")

_ROLES = {0: "follower", 1: "candidate", 2: "leader"}
# Failures after which the batch certainly or possibly did not land: retry (same seq).
_RETRYABLE = {
    FAIL_REASON.QUEUE_FULL,
    FAIL_REASON.MISSING_LEADER,
    FAIL_REASON.DISCARDED,
    FAIL_REASON.NOT_LEADER,
    FAIL_REASON.LEADER_CHANGED,
    FAIL_REASON.UNKNOWN_OUTCOME,
}


class QuorumError(Exception):
    """The batch was not committed (or its outcome is unknown) within the deadline."""


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str  # "leader", "follower" or "candidate" (pysyncobj's view; may be stale)
    term: int
    leader_id: int  # -1 when unknown
    commit_index: int  # Raft index: for diagnostics only, never a metadata offset
    last_applied: int


@dataclass(frozen=True, slots=True)
class VoterProgress:
    node_id: int
    log_end_offset: int  # -1: unknown
    last_fetch_ms: int  # wall clock; -1: unknown
    last_caught_up_ms: int  # wall clock; -1: unknown


class MetadataConsumer(SyncObjConsumer):
    """The replicated state. pysyncobj snapshots every attribute set AFTER
    `SyncObjConsumer.__init__`, and silently drops the ones set before it: the apply
    hook (a bound method of the live Quorum) must stay out of snapshots; the state
    machine must go in."""

    def __init__(self, max_tail_records: int, on_apply: Callable[[], None]) -> None:
        self._on_apply = on_apply  # excluded from snapshots (set before super().__init__)
        super().__init__()
        self.sm = MetadataStateMachine(max_tail_records)

    @replicated
    def append_batch(
        self,
        controller_epoch: int,
        writer: str,
        seq: int,
        batch_bytes: bytes,
        after: int | None = None,  # journals written before pipelining replay without it
    ) -> AppendResult:
        # Runs on the tick thread of every voter, in log order: deterministic, short.
        result = self.sm.append_batch(controller_epoch, writer, seq, batch_bytes, after)
        self._on_apply()
        return result

    def _deserialize(self, data: dict) -> None:
        # A snapshot (restart, or a leader's transfer) replaced the state machine.
        super()._deserialize(data)
        self._on_apply()


class Quorum:
    """One voter of the controller quorum, owned by an asyncio event loop."""

    def __init__(
        self,
        node_id: int,
        voters: dict[int, tuple[str, int]],
        data_dir: Path,
        password: str,
        *,
        max_tail_records: int = 50_000,
        attempt_timeout_s: float = 1.0,
        fsync: bool = True,
    ) -> None:
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not one of the voters {sorted(voters)}")
        if not password:
            raise ValueError("a quorum password is required (pysyncobj speaks pickle)")
        self.node_id = node_id
        self.voters = dict(voters)
        self.data_dir = Path(data_dir)
        self.writer = f"{node_id}:{uuid.uuid4()}"  # one incarnation of this process
        self.attempt_timeout_s = attempt_timeout_s
        self._password = password
        # The power-loss simulation's ledger (tests/harness/power_loss.py) is a test hook,
        # set from the environment so no configuration can leave it on by accident.
        self.durability = Durability(
            fsync=fsync, ledger=os.environ.get("KRAFT_DURABILITY_LEDGER") == "1"
        )
        self._max_tail_records = max_tail_records
        self._addr_to_id = {f"{h}:{p}": nid for nid, (h, p) in voters.items()}
        self._seq = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._syncobj: SyncObj | None = None
        self._consumer: MetadataConsumer | None = None
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []  # heap by offset
        self._waiter_ids = itertools.count()
        self._wake_pending = False
        self._state_listeners: list[Callable[[], None]] = []
        self.commit_latency_s = 0.0  # EWMA of successful appends
        self.append_retries = 0
        self._caught_up_ms: dict[int, int] = {}  # voter -> last time it was caught up

    # -- life cycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the journal and join the quorum. Runs on the loop's thread on purpose:
        pysyncobj's tick thread stops when the thread that built it exits, so it must not
        be built in a short-lived executor thread. It is start-up only (journal open and
        the tick thread's first bind), before anything is served."""
        self._loop = asyncio.get_running_loop()
        host, port = self.voters[self.node_id]
        _check_bindable(host, port)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        journal_file = self.data_dir / "raft.journal"
        dump_file = self.data_dir / "raft.dump"
        register(journal_file, dump_file, self.durability)
        conf = SyncObjConf(
            appendEntriesUseBatch=False,  # ~1 ms commits instead of ~100 ms
            raftMinTimeout=0.3,
            raftMaxTimeout=0.6,
            appendEntriesPeriod=0.05,
            leaderFallbackTimeout=1.0,  # a cut-off leader steps down within ~1 s
            connectionRetryTime=0.5,
            commandsWaitLeader=False,  # fail fast with MISSING_LEADER; we retry ourselves
            dynamicMembershipChange=False,  # static voters
            journalFile=str(journal_file),
            fullDumpFile=str(dump_file),
            password=self._password,
            # Bind the voter's own address: without it pysyncobj binds 0.0.0.0, exposing
            # the Raft port on every interface whatever controller.quorum.voters says.
            bindAddress=f"{host}:{port}" if host else None,
            onStateChanged=self._on_state_changed,
            # Compaction pickles the state in a forked child (pysyncobj's default): an
            # in-thread dump of a large image takes >1 s and would stall heartbeats.
            useFork=True,
        )
        self._consumer = MetadataConsumer(self._max_tail_records, self._on_apply)
        self_addr = f"{host}:{port}"
        others = [f"{h}:{p}" for nid, (h, p) in sorted(self.voters.items()) if nid != self.node_id]
        self._syncobj = SyncObj(
            self_addr,
            others,
            conf,
            consumers=[self._consumer],
            transportClass=DurableTransport,  # acknowledge only what is on disk
        )
        log.info("quorum started node=%d raft=%s voters=%s", self.node_id, self_addr, others)

    async def stop(self, timeout_s: float = 5.0) -> None:
        syncobj, self._syncobj = self._syncobj, None
        if syncobj is None:
            return
        syncobj.destroy()  # asks the tick thread to close sockets and the journal
        thread = syncobj._SyncObj__thread  # noqa: SLF001 - no public handle to join
        if thread is not None:
            await asyncio.wait_for(asyncio.to_thread(thread.join, timeout_s), timeout_s + 1)
        for _, _, fut in self._waiters:  # long-polls answer "not yet" instead of hanging
            if not fut.done():
                fut.set_result(None)
        self._waiters.clear()

    # -- the replicated write ------------------------------------------------------------------

    def new_seq(self) -> int:
        """A sequence number for `append(seq=...)`, known before the append starts (a
        pipelined batch names the one it was decided after)."""
        return next(self._seq)

    async def append(
        self,
        controller_epoch: int,
        records: list[Record],
        *,
        timeout_s: float = 5.0,
        seq: int | None = None,
        after: int | None = None,
    ) -> AppendResult:
        """Commit `records` as one batch. Returns the state machine's outcome (OK, or
        STALE_CONTROLLER_EPOCH / INVALID); raises QuorumError when no outcome was
        learned in time (the batch may still land later: callers must treat that as
        unknown, never as failed). `after`: the seq of this writer's batch it must follow
        (refused unless that one applied)."""
        if seq is None:
            seq = self.new_seq()
        return await self.append_raw(
            controller_epoch, self.writer, seq, encode_batch(records), timeout_s, after
        )

    async def append_raw(
        self,
        controller_epoch: int,
        writer: str,
        seq: int,
        batch: bytes,
        timeout_s: float = 5.0,
        after: int | None = None,
    ) -> AppendResult:
        """`append` with an explicit (writer, seq): retries of one batch share them."""
        loop = self._require_loop()
        started = loop.time()
        deadline = started + timeout_s
        last_error = "no attempt"
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise QuorumError(f"append not committed within {timeout_s:.1f}s: {last_error}")
            fut: asyncio.Future[tuple[AppendResult | None, int]] = loop.create_future()
            consumer = self._require_consumer()
            consumer.append_batch(
                controller_epoch, writer, seq, batch, after, callback=self._bridge(loop, fut)
            )
            try:
                result, err = await asyncio.wait_for(fut, min(self.attempt_timeout_s, remaining))
            except TimeoutError:
                last_error = "callback lost or commit slow"
                self.append_retries += 1
                continue
            if err == FAIL_REASON.SUCCESS and result is not None:
                elapsed = loop.time() - started
                self.commit_latency_s = 0.8 * self.commit_latency_s + 0.2 * elapsed
                return result
            if err not in _RETRYABLE:
                raise QuorumError(f"append refused by pysyncobj (fail reason {err})")
            last_error = f"fail reason {err}"
            self.append_retries += 1
            # No leader (election under way) or it just changed: give Raft a moment.
            await asyncio.sleep(min(0.05, max(0.0, deadline - loop.time())))

    @staticmethod
    def _bridge(
        loop: asyncio.AbstractEventLoop, fut: asyncio.Future[tuple[AppendResult | None, int]]
    ) -> Callable[[AppendResult | None, int], None]:
        def resolve(result: AppendResult | None, err: int) -> None:
            if not fut.done():  # the attempt may have timed out already
                fut.set_result((result, err))

        def callback(result: AppendResult | None, err: int) -> None:  # tick thread
            with contextlib.suppress(RuntimeError):  # the loop closed during shutdown
                loop.call_soon_threadsafe(resolve, result, err)

        return callback

    # -- apply notifications (tick thread -> loop) ---------------------------------------------

    def _on_apply(self) -> None:
        # Coalesce: a burst of applies costs one wake-up of the loop. The loop clears the
        # flag before reading the state, so no apply can be missed.
        if self._wake_pending or self._loop is None:
            return
        self._wake_pending = True
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._wake_waiters)

    def _wake_waiters(self) -> None:
        self._wake_pending = False
        next_offset = self.next_offset
        while self._waiters and self._waiters[0][0] < next_offset:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """True once the record at `offset` is committed and applied here."""
        if self.next_offset > offset:
            return True
        if timeout_s <= 0:
            return False
        if len(self._waiters) > 1024:
            # Timed-out waiters stay in the heap until an apply passes them; on an idle
            # log they could pile up, so drop them now and then.
            self._waiters = [w for w in self._waiters if not w[2].done()]
            heapq.heapify(self._waiters)
        fut: asyncio.Future[None] = self._require_loop().create_future()
        heapq.heappush(self._waiters, (offset, next(self._waiter_ids), fut))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(fut, timeout_s)
        return self.next_offset > offset

    # -- state changes (tick thread -> loop) ---------------------------------------------------

    def add_state_listener(self, listener: Callable[[], None]) -> None:
        """`listener()` runs on the loop after every Raft role change."""
        self._state_listeners.append(listener)

    def _on_state_changed(self, old: int, new: int) -> None:  # tick thread
        if self._loop is None:
            return
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._notify_state, old, new)

    def _notify_state(self, old: int, new: int) -> None:
        log.info(
            "raft role %s -> %s node=%d term=%d",
            _ROLES.get(old, old),
            _ROLES.get(new, new),
            self.node_id,
            self.term,
        )
        for listener in list(self._state_listeners):
            listener()

    # -- reads (loop thread; plain attribute reads of pysyncobj state) -------------------------

    @property
    def is_leader(self) -> bool:
        """pysyncobj's own view: can be true on two nodes at once (see module doc)."""
        return self._syncobj is not None and self._syncobj._isLeader()

    @property
    def role(self) -> str:
        s = self._syncobj
        # pysyncobj exposes no public getter for candidate vs follower.
        return _ROLES.get(s._SyncObj__raftState, "follower") if s is not None else "follower"

    @property
    def term(self) -> int:
        return self._syncobj.raftCurrentTerm if self._syncobj is not None else 0

    @property
    def leader_id(self) -> int:
        leader = self._syncobj._getLeader() if self._syncobj is not None else None
        return -1 if leader is None else self._addr_to_id.get(leader.id, -1)

    def status(self) -> RaftStatus:
        # Not getStatus(): it iterates dicts the tick thread mutates. These are plain
        # attribute reads, safe from another thread.
        s = self._syncobj
        if s is None:
            return RaftStatus("follower", 0, -1, 0, 0)
        return RaftStatus(
            role=self.role,
            term=s.raftCurrentTerm,
            leader_id=self.leader_id,
            commit_index=s.raftCommitIndex,
            last_applied=s.raftLastApplied,
        )

    def replication(self) -> list[VoterProgress]:
        """Each voter's progress as this node sees it; meaningful on the Raft leader only
        (pysyncobj keeps match indexes and response times there). Offsets are Raft
        indexes + 1 (the next index, as a log end offset); times are wall-clock ms."""
        s = self._syncobj
        if s is None or not s._isLeader():
            return []
        match = _copy(s._SyncObj__raftMatchIndex)  # noqa: SLF001 - no public getter
        seen = _copy(s._SyncObj__lastResponseTime)  # noqa: SLF001
        leader_end = s._SyncObj__getCurrentLogIndex() + 1  # noqa: SLF001
        now_wall_ms = int(time.time() * 1000)
        now_mono = raft_monotonic()  # the clock pysyncobj stamps responses with
        out = [VoterProgress(self.node_id, leader_end, now_wall_ms, now_wall_ms)]
        by_id = {self._addr_to_id.get(n.id, -1): n for n in set(match) | set(seen)}
        for node_id in sorted(self.voters):
            if node_id == self.node_id:
                continue
            node = by_id.get(node_id)
            end = match[node] + 1 if node in match else -1
            fetched = -1
            if node in seen:
                fetched = now_wall_ms - int((now_mono - seen[node]) * 1000)
            if end >= leader_end and fetched >= 0:
                self._caught_up_ms[node_id] = fetched
            caught_up = self._caught_up_ms.get(node_id, -1)
            out.append(VoterProgress(node_id, end, fetched, caught_up))
        return out

    @property
    def state_machine(self) -> MetadataStateMachine:
        # Always through the consumer: loading a snapshot replaces the state machine.
        return self._require_consumer().sm

    @property
    def next_offset(self) -> int:
        return self.state_machine.next_offset if self._consumer is not None else 0

    def image(self) -> MetadataImage:
        return self.state_machine.image

    def records_from(self, offset: int, max_records: int) -> list[tuple[int, bytes]] | None:
        return self.state_machine.records_from(offset, max_records)

    def snapshot(self) -> tuple[MetadataImage, int]:
        return self.state_machine.snapshot()

    def _require_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise RuntimeError("quorum not started")
        return self._loop

    def _require_consumer(self) -> MetadataConsumer:
        if self._consumer is None:
            raise RuntimeError("quorum not started")
        return self._consumer


def _copy(d: dict) -> dict:
    """A copy of a dict the tick thread may be resizing (a copy racing a resize raises;
    a retry sees the settled dict)."""
    for _ in range(5):
        with contextlib.suppress(RuntimeError):
            return dict(d)
    return {}


def _check_bindable(host: str, port: int) -> None:
    """Fail start-up with a clear message instead of letting pysyncobj retry the bind
    forever in its thread (it binds with SO_REUSEADDR too, so this matches)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, port))
    except OSError as exc:
        raise QuorumError(f"cannot bind the Raft port {host}:{port}: {exc}") from exc
    finally:
        s.close()


__all__ = [
    "AppendResult",
    "AppendStatus",
    "MetadataConsumer",
    "Quorum",
    "QuorumError",
    "RaftStatus",
    "VoterProgress",
]
