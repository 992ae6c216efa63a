"""The nemesis's plan: a list of timed faults generated from a seed alone
(random.Random(seed)), so `--seed N` replays the same schedule. Pure: no I/O, no clock.

Targets that depend on the cluster's state when the fault fires ("the leader of
chaos-1/2", "the active controller") stay symbolic in the schedule and are resolved then
(tests/chaos/faults.py); everything else (which node, which split, how long) is fixed here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# What the nemesis can do. Pauses are "short" (under broker.session.timeout.ms: the broker
# stays registered) or "long" (over it: the controller fences it while it is frozen).
KINDS = (
    "kill", "pause-short", "pause-long", "isolate", "split", "ctrl-cut", "asym", "crash-all",
    "disk-full",
)  # fmt: skip
_WEIGHTS = (5, 3, 3, 3, 3, 2, 3, 1, 2)
# Symbolic targets for kill and pause; resolved when the fault fires.
ROLE_TARGETS = ("leader", "follower", "active-controller", "controller", "broker")


@dataclass(frozen=True)
class Profile:
    name: str
    n_controllers: int
    n_brokers: int
    topics: int
    partitions: int
    min_faults: int
    max_faults: int
    window_s: float  # faults start within this many seconds of the workload's start
    session_ms: int = 6000
    kinds: tuple[str, ...] = KINDS


PROFILES = {
    # The CI subset: small and short (a schedule is ~30-40 s with start-up and the drain).
    # Disk-full is in since a failed append no longer tears batches (storage/segment.py;
    # tests/storage/test_append_all_or_nothing.py froze what the campaign found).
    "short": Profile("short", 3, 3, topics=2, partitions=3, min_faults=2, max_faults=3,
                     window_s=10.0),
    # `make chaos`: more faults, more overlap.
    "full": Profile("full", 3, 3, topics=2, partitions=3, min_faults=4, max_faults=7,
                    window_s=35.0),
}  # fmt: skip


@dataclass(frozen=True)
class Fault:
    at_s: float  # start, seconds after the workload started
    heal_s: float  # when it heals (always <= the schedule's end)
    kind: str
    target: str  # "node:5", "leader:chaos-0/1", "active-controller", "" (whole cluster)
    # Partitions: the cut links as "src>dst" node ids, one direction each.
    cuts: tuple[str, ...] = ()

    def describe(self) -> str:
        cuts = f" cuts={','.join(self.cuts)}" if self.cuts else ""
        tgt = f" {self.target}" if self.target else ""
        return f"{self.at_s:6.2f}s..{self.heal_s:6.2f}s {self.kind}{tgt}{cuts}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    profile: Profile
    faults: tuple[Fault, ...]

    @property
    def end_s(self) -> float:
        """When the last fault has healed."""
        return max((f.heal_s for f in self.faults), default=0.0)

    @property
    def controller_ids(self) -> list[int]:
        return list(range(1, self.profile.n_controllers + 1))

    @property
    def broker_ids(self) -> list[int]:
        c = self.profile.n_controllers
        return list(range(c + 1, c + self.profile.n_brokers + 1))

    def topic_names(self) -> list[str]:
        return [f"chaos-{i}" for i in range(self.profile.topics)]

    def describe(self) -> str:
        head = f"schedule seed={self.seed} profile={self.profile.name} ({len(self.faults)} faults)"
        return "\n".join([head, *(f"  {f.describe()}" for f in self.faults)])


def _both(a: list[int], b: list[int]) -> tuple[str, ...]:
    return tuple(f"{x}>{y}" for x in a for y in b) + tuple(f"{y}>{x}" for x in a for y in b)


def generate(seed: int, profile: Profile) -> Schedule:
    rng = random.Random(seed)
    p = profile
    ctrls = list(range(1, p.n_controllers + 1))
    brokers = list(range(p.n_controllers + 1, p.n_controllers + p.n_brokers + 1))
    nodes = ctrls + brokers
    session_s = p.session_ms / 1000
    faults: list[Fault] = []
    t = round(rng.uniform(0.5, 2.0), 2)
    busy_until = 0.0  # a crash-all runs alone: nothing overlaps it
    for _ in range(rng.randint(p.min_faults, p.max_faults)):
        if t > p.window_s and len(faults) >= p.min_faults:
            break
        weights = [w if k in p.kinds else 0 for k, w in zip(KINDS, _WEIGHTS, strict=True)]
        kind = rng.choices(KINDS, weights)[0]
        if kind == "crash-all":
            # It waits for every earlier fault to heal: it runs alone.
            t = max([t, busy_until, *(f.heal_s + 0.5 for f in faults)])
        target, cuts = "", ()
        dur = rng.uniform(2.0, 6.0)
        if kind in ("kill", "pause-short", "pause-long"):
            role = rng.choice(ROLE_TARGETS)
            if role in ("leader", "follower"):
                topic = rng.randrange(p.topics)
                target = f"{role}:chaos-{topic}/{rng.randrange(p.partitions)}"
            elif role == "controller":
                target = f"node:{rng.choice(ctrls)}"
            elif role == "broker":
                target = f"node:{rng.choice(brokers)}"
            else:
                target = role
            if kind == "pause-short":
                dur = rng.uniform(1.0, 0.6 * session_s)
            elif kind == "pause-long":
                dur = rng.uniform(1.3 * session_s, 1.8 * session_s)
        elif kind == "isolate":
            node = rng.choice(nodes)
            target = f"node:{node}"
            cuts = _both([node], [n for n in nodes if n != node])
        elif kind == "split":
            shuffled = nodes[:]
            rng.shuffle(shuffled)
            k = rng.randint(1, len(nodes) // 2)
            minority, majority = sorted(shuffled[:k]), sorted(shuffled[k:])
            target = f"minority:{'+'.join(map(str, minority))}"
            cuts = _both(minority, majority)
        elif kind == "ctrl-cut":
            cuts = _both(ctrls, brokers)
        elif kind == "asym":
            # One node can receive but not send to the others, or send but not receive.
            node = rng.choice(nodes)
            others = [n for n in nodes if n != node]
            if rng.random() < 0.5:
                target = f"node:{node} outbound"
                cuts = tuple(f"{node}>{o}" for o in others)
            else:
                target = f"node:{node} inbound"
                cuts = tuple(f"{o}>{node}" for o in others)
        elif kind == "disk-full":
            target = f"node:{brokers[0]}"  # the broker whose log dir is the small image
        at, heal = round(t, 2), round(t + dur, 2)
        faults.append(Fault(at, heal, kind, target, cuts))
        if kind == "crash-all":
            busy_until = heal
            t = heal + rng.uniform(0.5, 2.0)
        else:
            # Often the next fault starts while this one is still on: faults combine.
            t += rng.uniform(0.5, dur + 2.0)
    # Nothing may overlap a crash-all.
    cleaned: list[Fault] = []
    for f in faults:
        clash = any(
            (o.kind == "crash-all" or f.kind == "crash-all")
            and o is not f
            and f.at_s < o.heal_s
            and o.at_s < f.heal_s
            for o in cleaned
        )
        if not clash:
            cleaned.append(f)
    return Schedule(seed, profile, tuple(cleaned))
