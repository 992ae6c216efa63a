"""Failover at the process level: 3 controllers + 3 brokers, each its own process, crashed
(SIGKILL), paused (SIGSTOP) and restarted one at a time while a confluent-kafka producer
(acks=all, idempotent) writes unique values; then a consumer reads everything back and a
Jepsen-style check runs (see ../shared/notes/reliability.md): no acknowledged value lost,
none duplicated, one value per offset, offsets as acknowledged, nothing that was never sent.

The faults, in order, each while the producer runs:
  a. the followers of partition 0 paused for 0.75 s, its leader SIGKILLed at the end of
     that pause (it dies holding records nobody else has), the followers resumed; a new
     leader must acknowledge within 10 s; the old leader restarts and rejoins the ISRs;
  b. the active controller SIGKILLed: a new one takes over, acks=all goes on; restarted;
  c. a follower SIGSTOPped for 2x replica.lag.time.max.ms: its ISRs shrink to 2 while it
     is still registered (by the leaders, through AlterPartition), acks=all goes on; SIGCONT.
Then every ISR must be whole again and the history is checked.

Timings are shrunk so failures are detected fast: brokers heartbeat every 500 ms with a
6 s session, and a follower that has not caught up for 1.5 s leaves the ISR. The 3 s
SIGSTOP is therefore shorter than the session: the ISR must shrink through the leader,
not through the controller fencing the broker. The module runs in about 30 s.

Every wait is a condition under a deadline; every failure message carries the node logs.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.acked_history import Ack, Rec, Workload, check_history, read_all
from tests.harness.cluster_procs import ProcCluster, wait_for

SESSION_MS = 6000
HEARTBEAT_MS = 500
LAG_MS = 1500
CONTROLLER_PROPS = {"broker.session.timeout.ms": str(SESSION_MS)}
BROKER_PROPS = {
    "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
    "broker.session.timeout.ms": str(SESSION_MS),
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.fetch.backoff.ms": "200",
    "replica.fetch.wait.max.ms": "200",
}
LEADER_FAILOVER_S = 10.0  # a new leader of the killed leader's partition serves within this
ISR_RECOVER_S = 60.0
FOLLOWER_HOLD_S = LAG_MS / 2000  # followers paused up to the leader kill, staying in the ISR


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[ProcCluster]:
    c = ProcCluster(
        tmp_path / "data", controller_props=CONTROLLER_PROPS, broker_props=BROKER_PROPS
    )
    try:
        c.start()
        yield c
    finally:
        c.close()


# -- helpers ---------------------------------------------------------------------------------


def create_topic(c: ProcCluster, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    fs = admin.create_topics(
        [NewTopic(topic, partitions, 3, config={"min.insync.replicas": "2"})],
        request_timeout=15,
    )
    fs[topic].result(20)
    wait_isr_full(c, topic, partitions, 30, "the new topic")


def describe(c: ProcCluster, topic: str) -> str:
    parts = c.partitions(topic) or {}
    rows = [
        f"p{p}: leader={s['leader']} epoch={s['leader_epoch']} isr={s['isr']} "
        f"replicas={s['replicas']}"
        for p, s in sorted(parts.items())
    ]
    return f"partitions of {topic}: {'; '.join(rows) or 'unknown'}; fenced brokers: " + str(
        sorted(c.fenced_brokers() or [])
    )


def wait_isr_full(c: ProcCluster, topic: str, n: int, timeout_s: float, when: str) -> None:
    def full() -> bool:
        parts = c.partitions(topic)
        return (
            parts is not None
            and len(parts) == n
            and all(p["leader"] >= 0 and set(p["isr"]) == set(p["replicas"]) and
                    len(p["replicas"]) == 3 for p in parts.values())
        )

    try:
        wait_for(full, timeout_s, f"every partition's ISR to hold all 3 replicas ({when})")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nexpected: ISR == replicas (3) for all {n} partitions; seen: "
            f"{describe(c, topic)}\n{c.logs()}"
        ) from None


def wait_acks(c: ProcCluster, w: Workload, since: float, partitions: set[int],
              timeout_s: float, what: str) -> None:
    """Every partition in `partitions` acknowledged a message produced after `since`."""

    def probe() -> bool:
        return partitions <= {a.partition for a in w.acks_since(since)}

    try:
        wait_for(probe, timeout_s, what)
    except AssertionError as exc:
        seen = sorted({a.partition for a in w.acks_since(since)})
        raise AssertionError(
            f"{exc}\nexpected: an acks=all acknowledgement on partitions {sorted(partitions)} "
            f"for a message produced after the fault; seen acks on {seen}; producer: "
            f"{w.summary()}\n{describe(c, w.topic)}\n{c.logs()}"
        ) from None


# -- 1. leader kill, controller kill, follower pause ------------------------------------------


def test_acked_writes_survive_leader_kill_controller_kill_and_follower_pause(
    cluster: ProcCluster,
) -> None:
    topic, n_parts = "failover", 3
    create_topic(cluster, topic, n_parts)
    w = Workload(cluster.bootstrap, topic, n_parts)
    timings: dict[str, float] = {}  # printed at the end (pytest -s shows it)
    w.start()
    try:
        wait_acks(cluster, w, 0.0, set(range(n_parts)), 20, "first acks on every partition")

        # a. SIGKILL the leader of partition 0; a new leader serves within 10 s; restart it.
        #    Its followers are paused for a moment (under replica.lag.time.max.ms, so they
        #    stay in the ISR) up to the kill: the leader dies holding appended records no
        #    follower has. Not one of them may have been acknowledged (acks=all), and the
        #    restarted leader must truncate them away.
        parts = wait_for(lambda: cluster.partitions(topic), 10, "the topic's partitions")
        victim = parts[0]["leader"]
        epoch_before = parts[0]["leader_epoch"]
        followers = [r for r in parts[0]["isr"] if r != victim]
        try:
            for f in followers:
                cluster.pause_broker(f)
            time.sleep(FOLLOWER_HOLD_S)  # a deliberate pause length, not a synchronisation
            cluster.kill_broker(victim)
        finally:
            for f in followers:
                cluster.resume_broker(f)
        t_kill = time.monotonic()
        wait_acks(cluster, w, t_kill, {0}, LEADER_FAILOVER_S,
                  f"a new leader of p0 to acknowledge after broker {victim} was killed")
        timings["leader_failover_s"] = round(time.monotonic() - t_kill, 2)
        new = cluster.partitions(topic) or {}
        assert new.get(0, {}).get("leader") not in (None, -1, victim) and \
            new[0]["leader_epoch"] > epoch_before, (
                f"expected p0 led by a broker other than the killed {victim} with an epoch "
                f"above {epoch_before}; seen {describe(cluster, topic)}\n{cluster.logs()}"
            )
        offset = int((cluster.cluster_state() or {}).get("metadata_offset", -1))
        cluster.restart_broker(victim)
        cluster.wait_brokers_unfenced({victim}, offset, 30)
        wait_isr_full(cluster, topic, n_parts, 30,
                      f"broker {victim} restarted after SIGKILL must rejoin the ISRs")

        # b. SIGKILL the active controller; a new one takes over and acks=all keeps working.
        active = cluster.wait_active_controller(15)
        cluster.kill_controller(active.node_id)
        t_kill = time.monotonic()
        new_active = cluster.wait_active_controller(15)
        assert new_active.node_id != active.node_id
        timings["controller_failover_s"] = round(time.monotonic() - t_kill, 2)
        wait_acks(cluster, w, t_kill, set(range(n_parts)), 20,
                  f"acks on every partition after controller {active.node_id} was killed")
        cluster.restart_controller(active.node_id)
        wait_for(lambda: controllers_caught_up(cluster), 30,
                 f"controller {active.node_id} to rejoin and catch up", cluster.logs)

        # c. SIGSTOP a follower for 2x replica.lag.time.max.ms: its ISRs shrink to 2 (by
        #    the leader, before the session times out), acks=all goes on; SIGCONT.
        parts = wait_for(lambda: cluster.partitions(topic), 10, "the topic's partitions")
        paused, followed = pick_follower(parts)
        cluster.pause_broker(paused)
        t_pause = time.monotonic()
        try:
            def shrunk() -> dict[int, dict[str, Any]] | None:
                now = cluster.partitions(topic)
                if now is None or any(paused in now[p]["isr"] or len(now[p]["isr"]) != 2
                                      for p in followed):
                    return None
                return now

            try:
                after = wait_for(shrunk, 3 * SESSION_MS / 1000,
                                 f"the ISRs of p{sorted(followed)} to drop paused broker {paused}")
            except AssertionError as exc:
                raise AssertionError(
                    f"{exc}\nexpected: ISR of size 2 without {paused} for partitions "
                    f"{sorted(followed)}; seen {describe(cluster, topic)}\n{cluster.logs()}"
                ) from None
            t_shrunk = time.monotonic() - t_pause
            timings["isr_shrink_s"] = round(t_shrunk, 2)
            fenced = cluster.fenced_brokers() or set()
            assert paused not in fenced, (
                f"expected the leaders to shrink the ISR (AlterPartition) within "
                f"replica.lag.time.max.ms={LAG_MS} ms, before the {SESSION_MS} ms session "
                f"ran out; the ISR shrank only after {t_shrunk:.1f}s, once the controller had "
                f"fenced broker {paused}: {describe(cluster, topic)}\n{cluster.logs()}"
            )
            assert all(after[p]["leader"] != paused for p in followed)
            t_after = time.monotonic()
            wait_acks(cluster, w, t_after, followed, 10,
                      f"acks=all on p{sorted(followed)} with broker {paused} paused (ISR 2)")
            hold = t_pause + 2 * LAG_MS / 1000 - time.monotonic()
            if hold > 0:
                time.sleep(hold)  # a deliberate pause length, not a synchronisation
        finally:
            cluster.resume_broker(paused)
    finally:
        w.stop()

    assert w.crashed is None, f"producer thread crashed: {w.summary()}"
    fatal = [e for e in w.client_errors if "fatal=True" in e]
    assert not fatal, f"expected no fatal producer errors, got {fatal}"
    assert w.acked, f"expected acknowledged writes, got none: {w.summary()}"
    wait_isr_full(cluster, topic, n_parts, ISR_RECOVER_S, "after the faults healed")
    m = controller_metrics(cluster)
    assert (m["kraft_under_replicated_partitions"], m["kraft_offline_partitions"]) == (0, 0), m

    recs = read_all(cluster.bootstrap, topic, n_parts)
    problems = check_history(w, recs)
    print(f"failover workload: {w.summary()}; read {len(recs)} records; {timings}")
    assert not problems, (
        "expected every acknowledged value exactly once at its acknowledged offset, one value "
        "per offset and nothing unsent; found:\n  " + "\n  ".join(problems)
        + f"\nproducer: {w.summary()}; read {len(recs)} records\n{describe(cluster, topic)}"
        + f"\n{cluster.logs()}"
    )


def controller_metrics(c: ProcCluster) -> dict[str, float]:
    """The active controller's Prometheus gauges."""
    import urllib.request

    ctl = c.wait_active_controller(10)
    with urllib.request.urlopen(ctl.url("/metrics"), timeout=5) as resp:
        text = resp.read().decode()
    return {
        name: float(value)
        for line in text.splitlines()
        if line and not line.startswith("#") and "{" not in line
        for name, value in [line.split()]
    }


def controllers_caught_up(c: ProcCluster) -> bool:
    from kraft.tools.launcher import active_controller, running_nodes

    running = running_nodes(c.controllers)
    if len(running) != len(c.controllers) or active_controller(running) is None:
        return False
    offsets = {(ctl.status() or {}).get("metadata_offset") for ctl in running}
    return len(offsets) == 1 and None not in offsets


def pick_follower(parts: dict[int, dict[str, Any]]) -> tuple[int, set[int]]:
    """A broker in some ISR as a follower, preferring one that leads nothing; with the
    partitions it follows in the ISR."""
    follows: dict[int, set[int]] = defaultdict(set)
    leads: dict[int, int] = defaultdict(int)
    for p, s in parts.items():
        leads[s["leader"]] += 1
        for r in s["isr"]:
            if r != s["leader"]:
                follows[r].add(p)
    assert follows, f"expected some follower in an ISR, partitions: {parts}"
    broker = min(follows, key=lambda b: (leads[b], -len(follows[b]), b))
    return broker, follows[broker]


# -- 2. acks=all refused below min.insync.replicas ---------------------------------------------


def test_acks_all_refused_with_two_of_three_replicas_down(cluster: ProcCluster) -> None:
    from confluent_kafka import KafkaError, Producer

    topic = "min-isr"
    create_topic(cluster, topic, 1)

    def produce_one(value: str, **conf: Any) -> Any:
        """One message; returns the delivery error (None: acknowledged)."""
        p = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", **conf})
        result: list[Any] = []
        p.produce(topic, value=value.encode(), partition=0,
                  on_delivery=lambda err, msg: result.append(err))
        p.flush(30)
        assert result, f"expected a delivery report for {value} within 30s"
        return result[0]

    idem = {"enable.idempotence": True, "message.timeout.ms": 20000}
    err = produce_one("before-0", **idem)
    assert err is None, f"expected an ack with 3 brokers up, got {err}\n{cluster.logs()}"

    parts = cluster.partitions(topic) or {}
    leader = parts[0]["leader"]
    survivor = next(r for r in parts[0]["replicas"] if r != leader)
    killed = [b.node_id for b in cluster.brokers if b.node_id != survivor]
    for b in killed:
        cluster.kill_broker(b)

    def isr_is_survivor() -> bool:
        p0 = (cluster.partitions(topic) or {}).get(0)
        return p0 is not None and list(p0["isr"]) == [survivor] and p0["leader"] == survivor

    try:
        wait_for(isr_is_survivor, 3 * SESSION_MS / 1000,
                 f"ISR to shrink to [{survivor}] after killing {killed}")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nseen {describe(cluster, topic)}\n{cluster.logs()}") from None

    m = controller_metrics(cluster)
    assert m["kraft_under_replicated_partitions"] >= 1, m

    # acks=all with ISR 1 < min.insync.replicas 2: refused. Transient leader errors (the
    # client's metadata may still name a dead leader) are retried with a fresh message.
    refused: list[str] = []
    errors: list[str] = []
    deadline = time.monotonic() + 30
    while True:
        value = f"refused-{len(refused)}"
        refused.append(value)
        err = produce_one(value, **{"enable.idempotence": False, "retries": 0,
                                    "message.timeout.ms": 10000})
        errors.append("ack" if err is None else err.name())
        if err is not None and err.code() == KafkaError.NOT_ENOUGH_REPLICAS:
            break
        assert err is not None and time.monotonic() < deadline, (
            f"expected NOT_ENOUGH_REPLICAS for acks=all with ISR [{survivor}] and "
            f"min.insync.replicas=2; got {errors}\n{describe(cluster, topic)}\n{cluster.logs()}"
        )

    # With eligible leader replicas (KIP-966, on by default) the survivor's HW stands
    # still while its ISR is below min.insync.replicas: 'before-0' may not be readable
    # yet (its HW lagged the old leader's by a fetch); it is checked once the ISR is back.
    got = read_all(cluster.bootstrap, topic, 1, timeout_s=30)
    values = [v for _, _, v in got]
    assert values in ([], ["before-0"]), (
        f"expected the partition to hold only the acknowledged 'before-0' (refused: {refused}); "
        f"read {values}"
    )

    # One broker back: once it has caught up and rejoined the ISR, acks=all works again.
    back = killed[0]
    offset = int((cluster.cluster_state() or {}).get("metadata_offset", -1))
    cluster.restart_broker(back)
    cluster.wait_brokers_unfenced({back}, offset, 30)

    def isr_two() -> bool:
        p0 = (cluster.partitions(topic) or {}).get(0)
        return p0 is not None and len(p0["isr"]) >= 2

    try:
        wait_for(isr_two, 30, f"restarted broker {back} to rejoin the ISR of p0")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}\nexpected ISR >= 2; seen {describe(cluster, topic)}\n{cluster.logs()}"
        ) from None
    err = produce_one("after-0", **idem)
    assert err is None, (
        f"expected an ack with ISR >= 2, got {err}\n{describe(cluster, topic)}\n{cluster.logs()}"
    )
    values = [v for _, _, v in read_all(cluster.bootstrap, topic, 1, timeout_s=30)]
    assert values == ["before-0", "after-0"], (
        f"expected ['before-0', 'after-0'] (refused: {refused}), read {values}"
    )


# -- the checker itself catches each anomaly ---------------------------------------------------


def test_history_check_catches_each_anomaly() -> None:
    w = Workload("unused:0", "t", 2)
    for i, (p, off) in enumerate([(0, 0), (1, 0), (0, 1), (1, 1)], 1):
        w.sent[f"v-{i:06d}"] = (p, 0.0)
        w.acked.append(Ack(f"v-{i:06d}", p, off, 0.0, 0.0))
    w.sent["v-000005"] = (0, 0.0)  # sent, never acknowledged: may or may not be read
    good: list[Rec] = [(0, 0, "v-000001"), (0, 1, "v-000003"), (0, 2, "v-000005"),
                       (1, 0, "v-000002"), (1, 1, "v-000004")]
    assert check_history(w, good) == []
    assert check_history(w, [r for r in good if r[2] != "v-000005"]) == []
    cases = {
        "lost": [r for r in good if r[2] != "v-000003"],
        "duplicated": [*good, (0, 3, "v-000001")],
        "never sent": [*good, (1, 2, "v-999999")],
        "inconsistent offset": [*good, (1, 1, "v-000005")],
        "not strictly increasing": [(0, 1, "v-000003"), (0, 0, "v-000001"), *good[2:]],
        "another offset than acknowledged": [(0, 0, "v-000001"), (0, 2, "v-000003"),
                                             (1, 0, "v-000002"), (1, 1, "v-000004")],
        "not sent to": [(0, 0, "v-000001"), (0, 1, "v-000003"), (1, 0, "v-000002"),
                        (1, 1, "v-000004"), (1, 2, "v-000005")],
    }
    for what, recs in cases.items():
        problems = check_history(w, recs)
        assert any(what in p for p in problems), f"{what}: expected it reported, got {problems}"
