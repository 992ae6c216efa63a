"""A Hypothesis model of the group coordinator core: four clients (two dynamic, two
static members) join, sync (the leader assigns 6 partitions round-robin over the
members its JoinGroup answer listed), heartbeat, commit, leave and go quiet; time
passes; appends to __consumer_offsets complete late, fail, or are lost when the
coordinator moves (unload, then load from what was appended).

Invariants after every step:
- in a Stable group no partition is assigned to two members;
- a group's generation id never decreases, across coordinator moves too;
- a commit is accepted only from a current member at the current generation (or from
  outside group management while the group has no members);
- the core's committed offsets are exactly those whose commit was answered NONE, and
  a coordinator that loads the partition finds the same;
- at the end, with appends done and time passing, every request has been answered.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.group import messages as m
from broker.group.config import partition_for
from broker.group.group import GroupState
from common.errors import Errors
from tests.harness.group_harness import Harness

G = "model-group"
PARTITIONS = 6
CLIENTS = range(4)
INSTANCES = {2: "static-2", 3: "static-3"}


@dataclass
class Client:
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    members: list[str] = field(default_factory=list)
    join: str | None = None  # outstanding request tokens
    sync: str | None = None
    synced_generation: int = -1


def encode(parts: list[int]) -> bytes:
    return ",".join(map(str, parts)).encode()


def decode(raw: bytes) -> set[int]:
    return {int(x) for x in raw.decode().split(",") if x} if raw else set()


class GroupModel(RuleBasedStateMachine):
    @initialize()
    def start(self) -> None:
        self.h = Harness(initial_rebalance_delay_ms=1_000)
        self.h.hold = True
        self.clients = {c: Client() for c in CLIENTS}
        self.committed: dict[tuple[str, int], int] = {}  # answered NONE, latest wins
        self.commits: dict[str, dict[tuple[str, int], int]] = {}  # token -> offsets sent
        self.max_generation = 0  # the core's, since the last coordinator move
        self.max_told = 0  # the highest generation a member was told
        self.p = partition_for(G, 4)

    # -- answers -----------------------------------------------------------------------------

    def collect(self) -> None:
        for c, cl in self.clients.items():
            if cl.join is not None and cl.join in self.h.answers:
                self.on_join(c, self.h.answers[cl.join])
                cl.join = None
            if cl.sync is not None and cl.sync in self.h.answers:
                r = self.h.answers[cl.sync]
                assert isinstance(r, m.SyncResult)
                if r.error_code == Errors.NONE:
                    cl.synced_generation = cl.generation
                elif r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                    self.forget(cl)
                cl.sync = None
        for token, offsets in list(self.commits.items()):
            if token in self.h.answers:
                r = self.h.answers[token]
                assert isinstance(r, m.PartitionResults)
                for tp, code in r.partitions.items():
                    if code == Errors.NONE:
                        self.committed[tp] = offsets[tp]
                del self.commits[token]

    @staticmethod
    def forget(cl: Client) -> None:
        cl.member_id, cl.generation, cl.leader, cl.members = "", -1, False, []

    def on_join(self, c: int, r: object) -> None:
        assert isinstance(r, m.JoinResult)
        cl = self.clients[c]
        if r.error_code == Errors.MEMBER_ID_REQUIRED:
            cl.member_id = r.member_id
        elif r.error_code == Errors.NONE:
            cl.member_id, cl.generation = r.member_id, r.generation_id
            self.max_told = max(self.max_told, r.generation_id)
            cl.leader = r.leader == r.member_id
            cl.members = [x[0] for x in r.members]
            assert not cl.leader or cl.member_id in cl.members
        elif r.error_code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
            self.forget(cl)

    # -- rules -------------------------------------------------------------------------------

    @rule(c=st.sampled_from(CLIENTS))
    def join(self, c: int) -> None:
        cl = self.clients[c]
        if cl.join is None:
            cl.join = self.h.join(G, member_id=cl.member_id, instance=INSTANCES.get(c))
        self.collect()
        if cl.join is None and cl.generation < 0 and cl.member_id and c not in INSTANCES:
            cl.join = self.h.join(G, member_id=cl.member_id)  # KIP-394: again, with the id
            self.collect()

    @rule(c=st.sampled_from(CLIENTS), omit=st.booleans())
    def sync(self, c: int, omit: bool = False) -> None:
        """A leader assigns round-robin over its members; with `omit` it leaves the last
        one out of the assignment (legal: that member gets nothing)."""
        cl = self.clients[c]
        if cl.sync is not None or cl.generation < 0 or cl.join is not None:
            return
        assignments = []
        if cl.leader:
            n = len(cl.members)
            assignments = [
                (mid, encode([p for p in range(PARTITIONS) if p % n == i]))
                for i, mid in enumerate(cl.members)
            ]
            if omit and n > 1:
                assignments.pop()
        cl.sync = self.h.sync(G, cl.member_id, cl.generation, assignments, INSTANCES.get(c))
        self.collect()

    @rule(c=st.sampled_from(CLIENTS))
    def heartbeat(self, c: int) -> None:
        cl = self.clients[c]
        if cl.member_id:
            code = self.h.heartbeat(G, cl.member_id, cl.generation, INSTANCES.get(c))
            if code in (Errors.UNKNOWN_MEMBER_ID, Errors.FENCED_INSTANCE_ID):
                self.forget(cl)
        self.collect()

    @rule(c=st.sampled_from(CLIENTS))
    def leave(self, c: int) -> None:
        cl = self.clients[c]
        if cl.member_id:
            self.h.leave(G, (cl.member_id, INSTANCES.get(c)))
            self.forget(cl)
        self.collect()

    @rule(
        c=st.sampled_from([*CLIENTS, -1]), p=st.integers(0, PARTITIONS - 1), off=st.integers(0, 99)
    )
    def commit(self, c: int, p: int, off: int) -> None:
        """A member's commit (c >= 0) or one from outside group management (c = -1)."""
        g = self.h.core.groups.get(G)
        if c < 0:
            member_id, generation, instance = "", -1, None
        else:
            cl = self.clients[c]
            member_id, generation, instance = cl.member_id, cl.generation, INSTANCES.get(c)
        allowed = (
            g is not None
            and member_id in g.members
            and generation == g.generation_id
            and g.state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE)
        ) or (generation < 0 and (g is None or g.state == GroupState.EMPTY))
        before = len(self.h.held)
        token = self.h.commit(G, member_id, generation, {("t", p): off}, instance)
        if len(self.h.held) > before:  # accepted: its record is being appended
            event("a commit accepted")
            assert allowed, f"commit from {member_id!r} gen {generation} accepted: {g}"
        self.commits[token] = {("t", p): off}
        self.collect()

    @rule(ms=st.sampled_from([100, 1_000, 5_000, 12_000]))
    def tick(self, ms: int) -> None:
        self.h.tick(ms)
        self.collect()

    @rule(ok=st.booleans(), n=st.integers(1, 3))
    def complete_writes(self, ok: bool, n: int) -> None:
        """The oldest appends finish, in order (the log keeps their order)."""
        for _ in range(n):
            if not self.h.held:
                break
            a = self.h.held.pop(0)
            self.h.complete(a, Errors.NONE if ok else Errors.NOT_ENOUGH_REPLICAS)
        self.collect()

    @rule(clients=st.sets(st.sampled_from(CLIENTS), min_size=1), omit=st.booleans())
    def settle(self, clients: set[int], omit: bool) -> None:
        """A calm stretch: these clients (re)join and sync until the group is stable,
        appends succeed, time moves in small steps."""
        for _ in range(4):
            for c in sorted(clients):
                self.join(c)
                if self.clients[c].join is not None and not self.clients[c].member_id:
                    self.join(c)
            self.complete_writes(True, 10)
            self.tick(1_000)
            self.complete_writes(True, 10)
            for c in sorted(clients):
                self.sync(c, omit)
            self.complete_writes(True, 10)
            for c in sorted(clients):
                self.heartbeat(c)
            g = self.h.core.groups.get(G)
            if g is not None and g.state == GroupState.STABLE:
                break

    @rule()
    def move_coordinator(self) -> None:
        """Leadership of the offsets partition moves and comes back: appends in flight
        are lost, the groups are loaded from what was appended."""
        held, self.h.held = self.h.held, []
        for a in held:
            self.h.complete(a, Errors.NOT_LEADER_OR_FOLLOWER)
        assert self.h.move(self.p) == 0
        self.collect()
        # What was never stored was never told: the loaded generation may be older
        # than the core's was, never older than one a member heard.
        after = self.h.core.groups.get(G)
        self.max_generation = after.generation_id if after is not None else 0

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def coordinator_invariants(self) -> None:
        if not hasattr(self, "h"):
            return
        g = self.h.core.groups.get(G)
        if g is None:  # an empty group without offsets is deleted at the retention check
            assert not self.committed
            self.max_generation = self.max_told = 0
            return
        event(f"reached {g.state.value}, generation {min(g.generation_id, 3)}")
        if g.state == GroupState.STABLE:
            event(f"stable with {len(g.members)} members")
            seen: set[int] = set()
            for mem in g.members.values():
                parts = decode(mem.assignment)
                assert not parts & seen, f"partitions {parts & seen} assigned twice: {g}"
                seen |= parts
        assert g.generation_id >= self.max_generation, (g.generation_id, self.max_generation)
        assert g.generation_id >= self.max_told, (g.generation_id, self.max_told)
        self.max_generation = g.generation_id
        offsets = {tp: v.offset for tp, v in g.offsets.items()}
        assert offsets == self.committed, (offsets, self.committed)

    def teardown(self) -> None:
        if not hasattr(self, "h"):
            return
        self.h.hold = False
        self.h.release()
        for _ in range(20):
            self.h.tick(12_000)
        self.collect()
        waiting = [(c, cl.join, cl.sync) for c, cl in self.clients.items() if cl.join or cl.sync]
        assert not waiting, f"requests never answered: {waiting}"
        assert not self.commits, f"commits never answered: {self.commits}"


GroupModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("GROUP_MODEL_EXAMPLES", "300")),
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_group_model = GroupModel.TestCase
