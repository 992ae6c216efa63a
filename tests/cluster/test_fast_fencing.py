"""Fast fencing of a dead broker on a real cluster (3 controllers + 3 brokers, each its own
process), with Kafka's default timings: heartbeats every 2 s, a 9 s session, and our
`broker.disconnect.fence.grace.ms` default of 3 s (kraft/cluster_control.py).

- A SIGKILLed broker that leads partitions is fenced, and every partition it led has a new
  leader, also in a surviving broker's Metadata answer, within half the session timeout
  (a condition deadline, not a timing assertion):
  its followers' reconnects are refused and its controller connections close; the active
  controller's own connection to its listeners is refused too, which confirms the death
  (kraft/liveness_probe.py). Three rounds; the measured kill -> fenced, -> leaders moved
  and -> seen by a client are printed (-s).
- The same with the grace as long as the session: only the probe's confirmation can fence
  it within half the session, so this fails if the confirmation path breaks.
- A SIGSTOPped broker (slow, or cut off: its connections stay open and its port accepts)
  is not fenced in 5 s, more than the grace plus a heartbeat interval: silence alone keeps
  Kafka's session timeout.
- A controller failover fences nobody: the brokers' connections to the dead controller
  close, but only the active controller decides and it heard from them.
- Nor does a SIGSTOPped active controller, paused for longer than the session: the
  brokers' heartbeats to it hang (its kernel still accepts the connections), and each
  try gives up after two heartbeat intervals for the next controller, in time for the
  new active controller's session (the fault campaign, seed 2279696855, saw every
  broker fenced when a try waited request.timeout.ms).

Every wait is a condition under a deadline; failures carry the node logs.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kraft.tools.launcher import active_controller, cluster_state
from tests.harness.cluster_procs import POLL_S, ProcCluster, wait_for

SESSION_MS = 9000  # broker.session.timeout.ms: Kafka's default
FAST_DEADLINE_S = SESSION_MS / 2000  # "well under the session": half of it
TOPIC, PARTITIONS = "fast-fencing", 6
PAUSE_S = 5.0  # longer than grace (3 s) + a heartbeat interval (2 s), shorter than the session
ROUNDS = 3


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ProcCluster]:
    # Every timing at its default, unless the test names controller properties.
    props = getattr(request, "param", None)
    c = ProcCluster(tmp_path / "data", controller_props=props)
    try:
        c.start()
        create_topic(c)
        yield c
    finally:
        c.close()


def create_topic(c: ProcCluster) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    fs = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)], request_timeout=15)
    fs[TOPIC].result(20)
    wait_isr_full(c, "the new topic")


def describe(c: ProcCluster) -> str:
    parts = c.partitions(TOPIC) or {}
    rows = [f"p{p}: leader={s['leader']} isr={s['isr']}" for p, s in sorted(parts.items())]
    return f"{'; '.join(rows) or 'no partitions'}; fenced: {sorted(c.fenced_brokers() or [])}"


def wait_isr_full(c: ProcCluster, when: str) -> None:
    def full() -> bool:
        parts = c.partitions(TOPIC)
        return (
            parts is not None
            and len(parts) == PARTITIONS
            and all(p["leader"] >= 0 and len(p["isr"]) == 3 for p in parts.values())
        )

    try:
        wait_for(full, 60, f"every ISR to hold all 3 replicas ({when})")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{describe(c)}\n{c.logs()}") from None


def leaders(c: ProcCluster) -> dict[int, int]:
    return {p: s["leader"] for p, s in (c.partitions(TOPIC) or {}).items()}


def busiest_leader(c: ProcCluster) -> tuple[int, set[int]]:
    led: dict[int, set[int]] = {}
    for p, leader in leaders(c).items():
        led.setdefault(leader, set()).add(p)
    victim = max(led, key=lambda b: len(led[b]))
    assert victim >= 0 and led[victim], describe(c)
    return victim, led[victim]


def client_leaders(bootstrap: str) -> dict[int, int]:
    """Leaders as a client sees them: a Metadata request to a broker."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = admin.list_topics(TOPIC, timeout=2).topics[TOPIC]
    return {p: m.leader for p, m in topic.partitions.items()}


def test_sigkilled_leader_is_fenced_and_its_leaderships_move_well_under_the_session(
    cluster: ProcCluster,
) -> None:
    kill_busiest_leader(cluster, ROUNDS, "grace 3000 ms")


@pytest.mark.parametrize(
    "cluster", [{"broker.disconnect.fence.grace.ms": str(SESSION_MS)}], indirect=True
)
def test_the_probe_alone_fences_a_dead_broker_well_under_the_session(
    cluster: ProcCluster,
) -> None:
    kill_busiest_leader(cluster, 1, f"grace {SESSION_MS} ms: the probe's confirmation only")


def kill_busiest_leader(cluster: ProcCluster, rounds: int, label: str) -> None:
    to_fenced: list[float] = []
    to_moved: list[float] = []
    to_seen: list[float] = []
    for round_ in range(rounds):
        victim, led = busiest_leader(cluster)
        survivors = ",".join(b.address for b in cluster.brokers if b.node_id != victim)
        client_leaders(survivors)  # connect before the kill: its time is not ours
        cluster.kill_broker(victim)
        t_kill = time.monotonic()

        def fenced(victim: int = victim) -> bool:
            return victim in (cluster.fenced_brokers() or set())

        def moved(victim: int = victim, led: set[int] = led) -> bool:
            now = leaders(cluster)
            return all(now.get(p, -1) not in (-1, victim) for p in led)

        what = f"round {round_}: SIGKILLed broker {victim} (leading p{sorted(led)})"
        try:
            wait_for(fenced, FAST_DEADLINE_S, f"{what} to be fenced")
            to_fenced.append(time.monotonic() - t_kill)
            remaining = FAST_DEADLINE_S - (time.monotonic() - t_kill)
            wait_for(moved, max(remaining, POLL_S), f"{what}: its partitions to get new leaders")
            to_moved.append(time.monotonic() - t_kill)

            def seen(victim: int = victim, led: set[int] = led, at: str = survivors) -> bool:
                now = client_leaders(at)
                return all(now.get(p, -1) not in (-1, victim) for p in led)

            remaining = FAST_DEADLINE_S - (time.monotonic() - t_kill)
            wait_for(seen, max(remaining, POLL_S), f"{what}: clients to see the new leaders")
            to_seen.append(time.monotonic() - t_kill)
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}\nexpected within {FAST_DEADLINE_S}s of the kill (session "
                f"{SESSION_MS} ms); seen: {describe(cluster)}\n{cluster.logs()}"
            ) from None

        offset = int((cluster.cluster_state() or {}).get("metadata_offset", -1))
        cluster.restart_broker(victim)
        cluster.wait_brokers_unfenced({victim}, offset, 60)
        wait_isr_full(cluster, f"broker {victim} restarted")

    print(
        f"\nfast fencing, {rounds} SIGKILLs of the busiest leader (heartbeat 2000 ms, {label}, "
        f"session {SESSION_MS} ms): kill->fenced "
        f"{', '.join(f'{t:.2f}' for t in to_fenced)} s (median "
        f"{statistics.median(to_fenced):.2f}); kill->leaders moved "
        f"{', '.join(f'{t:.2f}' for t in to_moved)} s (median {statistics.median(to_moved):.2f}); "
        f"kill->new leaders in a broker's Metadata {', '.join(f'{t:.2f}' for t in to_seen)} s "
        f"(median {statistics.median(to_seen):.2f})"
    )


def test_a_paused_broker_keeps_its_session(cluster: ProcCluster) -> None:
    victim, led = busiest_leader(cluster)
    cluster.pause_broker(victim)
    t_pause = time.monotonic()
    try:
        # Watched for the whole pause: a deliberate length, not a synchronisation.
        while time.monotonic() - t_pause < PAUSE_S:
            assert victim not in (cluster.fenced_brokers() or set()), (
                f"broker {victim}, SIGSTOPped {time.monotonic() - t_pause:.1f}s ago (under "
                f"the {SESSION_MS} ms session), was fenced: {describe(cluster)}\n"
                f"{cluster.logs()}"
            )
            time.sleep(POLL_S)
    finally:
        cluster.resume_broker(victim)
    assert victim not in (cluster.fenced_brokers() or set()), describe(cluster)
    assert all(leaders(cluster)[p] == victim for p in led), (
        f"broker {victim} lost leaderships while paused under the session: {describe(cluster)}"
    )


def test_a_controller_failover_fences_nobody(cluster: ProcCluster) -> None:
    active = cluster.wait_active_controller(30)
    cluster.kill_controller(active.node_id)
    t_kill = time.monotonic()
    new = cluster.wait_active_controller(30)  # among the running: never the killed one
    # Watched for the grace plus a heartbeat interval and more after the failover.
    while time.monotonic() - t_kill < PAUSE_S:
        fenced = cluster.fenced_brokers()
        assert not fenced, (
            f"brokers {sorted(fenced or [])} fenced after controller {active.node_id} was "
            f"killed (new active: {new.node_id}): {describe(cluster)}\n{cluster.logs()}"
        )
        time.sleep(POLL_S)
    cluster.restart_controller(active.node_id)


def test_a_paused_active_controller_fences_nobody(cluster: ProcCluster) -> None:
    active = cluster.wait_active_controller(30)
    others = [c for c in cluster.controllers if c.node_id != active.node_id]
    active.pause()
    try:
        new = wait_for(lambda: active_controller(others), 30,
                       "the other controllers to elect an active one", cluster.logs)  # fmt: skip
        t_new = time.monotonic()
        # Watched for the new active controller's whole first session and more: every
        # broker must have heartbeated to it by then (a deliberate length).
        while time.monotonic() - t_new < SESSION_MS / 1000 + 3:
            state = cluster_state(others)
            fenced = {b["broker_id"] for b in (state or {}).get("brokers", []) if b["fenced"]}
            assert not fenced, (
                f"brokers {sorted(fenced)} fenced while controller {active.node_id} was paused "
                f"(new active: {new.node_id}): {describe(cluster)}\n{cluster.logs()}"
            )
            time.sleep(POLL_S)
    finally:
        active.resume()
