"""TxnOffsetCommit in the group coordinator core: offsets pending per producer id,
visible on the commit marker, dropped on abort; loading honours the markers."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.group import messages as m
from broker.group.config import GroupConfig, partition_for
from broker.group.manager import GroupCoordinator
from broker.group.records import (
    OffsetKey,
    OffsetValue,
    decode_key,
    decode_offset_value,
    encode_key,
    encode_offset_value,
)
from common.errors import Errors
from storage.log import Log
from storage.records import Record, build_batch
from tests.harness.group_harness import Harness

G = "g"
P = partition_for(G, 4)
T0, T1 = ("t", 0), ("t", 1)


def committed(h: Harness) -> dict[tuple[str, int], int]:
    code, found = h.core.fetch_offsets(G, None)
    assert code == Errors.NONE
    return {tp: v.offset for tp, v in found.items() if v is not None}


def test_txn_offsets_are_invisible_until_the_commit_marker() -> None:
    h = Harness()
    t = h.txn_commit(G, 7, {T0: 10, T1: 20})
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: 0, T1: 0})
    # the batch is transactional, with the producer's id: a reader of the log knows
    [rec, _] = h.log[P]
    assert isinstance(rec, m.LoadedRecord) and rec.producer_id == 7
    assert committed(h) == {}
    assert h.core.unstable_partitions(G, [T0, ("t", 2)]) == {T0}
    h.marker(P, 7, committed=True)
    assert committed(h) == {T0: 10, T1: 20}
    assert h.core.unstable_partitions(G, None) == set()


def test_an_abort_marker_drops_them() -> None:
    h = Harness()
    h.commit(G, "", -1, {T0: 5})
    h.txn_commit(G, 7, {T0: 10})
    h.marker(P, 7, committed=False)
    assert committed(h) == {T0: 5}
    assert h.core.unstable_partitions(G, None) == set()


def test_a_marker_of_another_producer_or_partition_changes_nothing() -> None:
    h = Harness()
    h.txn_commit(G, 7, {T0: 10})
    h.marker(P, 8, committed=True)
    h.marker((P + 1) % 4, 7, committed=True)
    assert committed(h) == {}
    assert h.core.unstable_partitions(G, None) == {T0}


def test_a_plain_commit_written_after_the_txn_record_wins_at_the_marker() -> None:
    """Kafka compares the record's batch offset: the later record in the log is the
    committed offset, whatever the order the transaction completes in."""
    h = Harness()
    h.txn_commit(G, 7, {T0: 10, T1: 20})
    h.commit(G, "", -1, {T0: 15})
    h.marker(P, 7, committed=True)
    assert committed(h) == {T0: 15, T1: 20}
    assert h.move(P) == 0  # and a load from the log agrees
    assert committed(h) == {T0: 15, T1: 20}


def test_a_failed_append_leaves_nothing_pending_and_maps_the_error() -> None:
    h = Harness()
    h.fail_code = Errors.NOT_LEADER_OR_FOLLOWER
    t = h.txn_commit(G, 7, {T0: 10})
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: Errors.NOT_COORDINATOR})
    assert h.core.unstable_partitions(G, None) == set()
    h.fail_code = Errors.PRODUCER_FENCED  # the producer's own error reaches it unchanged
    t = h.txn_commit(G, 7, {T0: 10})
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: Errors.PRODUCER_FENCED})


def test_pending_from_the_request_until_the_append_is_done() -> None:
    h = Harness()
    h.hold = True
    t = h.txn_commit(G, 7, {T0: 10})
    assert t not in h.answers
    assert h.core.unstable_partitions(G, None) == {T0}
    h.release()
    h.hold = False
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: 0})
    h.marker(P, 7, committed=True)
    assert committed(h) == {T0: 10}


def test_a_member_commit_checks_member_and_generation_v3() -> None:
    h = Harness()
    tj, a = h.join_until_member(G)
    gen = h.answers[tj].generation_id  # type: ignore[attr-defined]
    h.sync(G, a, gen, [(a, b"x")])
    t = h.txn_commit(G, 7, {T0: 1}, member_id="nobody", generation=gen)
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: Errors.UNKNOWN_MEMBER_ID})
    t = h.txn_commit(G, 7, {T0: 1}, member_id=a, generation=gen + 1)
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: Errors.ILLEGAL_GENERATION})
    t = h.txn_commit(G, 7, {T0: 1}, member_id=a, generation=gen)
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: 0})
    # v0-2 name no member: accepted in a non-empty group, unlike a plain commit
    t = h.txn_commit(G, 8, {T1: 1})
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T1: 0})


def test_a_partition_we_do_not_coordinate_answers_not_coordinator() -> None:
    h = Harness()
    h.run(h.core.unload(P))
    t = h.txn_commit(G, 7, {T0: 1})
    assert h.answers[t] == m.PartitionResults(Errors.NONE, {T0: Errors.NOT_COORDINATOR})


def _offset(group: str, tp: tuple[str, int], offset: int) -> tuple[bytes, bytes]:
    return encode_key(OffsetKey(group, *tp)), encode_offset_value(OffsetValue(offset, -1, "", 0))


def test_load_applies_txn_records_only_at_their_commit_marker() -> None:
    h = Harness()
    k0, v10 = _offset(G, T0, 10)
    k1, v20 = _offset(G, T1, 20)
    _, v30 = _offset(G, T0, 30)
    _, v5 = _offset(G, T1, 5)
    log = [
        m.LoadedRecord(k0, v10, 0, producer_id=7),  # committed below
        m.LoadedRecord(k1, v20, 1, producer_id=8),  # aborted below
        m.TxnMarker(7, committed=True),
        m.TxnMarker(8, committed=False),
        m.LoadedRecord(k1, v5, 4),  # plain
        m.LoadedRecord(k0, v30, 5, producer_id=9),  # still open
    ]
    h.run(h.core.begin_load(P))
    assert h.core.load(P, log, 0) == 0
    assert committed(h) == {T0: 10, T1: 5}
    assert h.core.unstable_partitions(G, None) == {T0}
    h.marker(P, 9, committed=True)  # the open one completes after the load
    assert committed(h) == {T0: 30, T1: 5}


def test_load_keeps_a_newer_plain_commit_over_an_older_txn_record() -> None:
    h = Harness()
    k0, v10 = _offset(G, T0, 10)
    _, v15 = _offset(G, T0, 15)
    log = [
        m.LoadedRecord(k0, v10, 0, producer_id=7),
        m.LoadedRecord(k0, v15, 1),
        m.TxnMarker(7, committed=True),
    ]
    h.run(h.core.begin_load(P))
    h.core.load(P, log, 0)
    assert committed(h) == {T0: 15}


def test_a_group_with_only_open_txn_offsets_loads_and_is_not_expired() -> None:
    h = Harness(offsets_retention_ms=1000)
    h.txn_commit(G, 7, {T0: 10})
    assert h.move(P) == 0
    assert G in h.core.groups and h.core.unstable_partitions(G, None) == {T0}
    h.tick(10_000)
    assert G in h.core.groups
    h.marker(P, 7, committed=True)
    assert committed(h) == {T0: 10}


def test_deleting_offsets_drops_their_pending_txn_part() -> None:
    h = Harness()
    h.commit(G, "", -1, {T0: 1})
    h.txn_commit(G, 7, {T0: 10})
    t = h.token("delete")
    h.run(h.core.delete_offsets(t, G, [T0]))
    h.marker(P, 7, committed=True)
    assert committed(h) == {}


# -- the shell's load reads the log's transactional batches and markers ----------------------


def _marker(producer_id: int, commit: bool) -> bytes:
    """A control batch with an EndTransactionMarker (key: version, type; value:
    version, coordinator epoch), as the partition leader writes it."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    return build_batch(
        [Record(value=struct.pack(">hi", 0, 3), key=key)],
        producer_id=producer_id,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
        now_ms=0,
    )


def test_the_shell_loads_markers_from_the_log(tmp_path: Path) -> None:
    lg = Log(tmp_path / f"__consumer_offsets-{P}")

    def txn(pid: int, tp: tuple[str, int], offset: int) -> bytes:
        k, v = _offset(G, tp, offset)
        return build_batch(
            [Record(value=v, key=k)],
            producer_id=pid,
            producer_epoch=0,
            is_transactional=True,
            now_ms=0,
        )

    for raw in (
        txn(7, T0, 10),
        txn(8, T1, 20),
        _marker(7, commit=True),
        _marker(8, commit=False),
        txn(9, T1, 30),  # open at the end of the log
    ):
        lg.append_as_leader(raw, 0)

    hosted = SimpleNamespace(core=SimpleNamespace(is_leader=True, leader_epoch=0), log=lg)
    replicas = SimpleNamespace(partition=lambda topic, p: hosted)

    async def no_topic() -> None:
        return None

    async def run() -> GroupCoordinator:
        gc = GroupCoordinator(GroupConfig(num_partitions=4), replicas, no_topic)  # type: ignore[arg-type]
        gc.core.begin_load(P)
        await gc._load(P)
        return gc

    gc = asyncio.run(run())
    _, found = gc.core.fetch_offsets(G, None)
    assert {tp: v.offset for tp, v in found.items() if v} == {T0: 10}
    assert gc.core.unstable_partitions(G, None) == {T1}
    gc.on_txn_marker("__consumer_offsets", P, 9, True)
    _, found = gc.core.fetch_offsets(G, None)
    assert {tp: v.offset for tp, v in found.items() if v} == {T0: 10, T1: 30}
    lg.close()


def test_a_marker_written_while_the_partition_loads_is_not_lost(tmp_path: Path) -> None:
    """The load reads the log to where it ended when it began; a marker appended after
    that restarts it, so the commit is seen."""
    lg = Log(tmp_path / f"__consumer_offsets-{P}")
    k, v = _offset(G, T0, 10)
    lg.append_as_leader(
        build_batch(
            [Record(value=v, key=k)],
            producer_id=7,
            producer_epoch=0,
            is_transactional=True,
            now_ms=0,
        ),  # fmt: skip
        0,
    )
    hosted = SimpleNamespace(core=SimpleNamespace(is_leader=True, leader_epoch=0), log=lg)
    replicas = SimpleNamespace(partition=lambda topic, p: hosted)

    async def no_topic() -> None:
        return None

    async def run() -> GroupCoordinator:
        gc = GroupCoordinator(GroupConfig(num_partitions=4), replicas, no_topic)  # type: ignore[arg-type]
        gc.core.begin_load(P)
        gc._loads[P] = asyncio.create_task(gc._load(P))
        await asyncio.sleep(0)  # the load has started (and captured the log end)
        lg.append_as_leader(_marker(7, commit=True), 0)
        gc.on_txn_marker("__consumer_offsets", P, 7, True)
        while P in gc._loads:
            await gc._loads[P]
        return gc

    gc = asyncio.run(run())
    _, found = gc.core.fetch_offsets(G, None)
    assert {tp: v.offset for tp, v in found.items() if v} == {T0: 10}
    lg.close()


# -- a Hypothesis model: transactional and plain commits, markers, moves ------------------


def log_view(log: list[Any]) -> tuple[dict[tuple[str, int], int], set[tuple[str, int]]]:
    """What the log says, read the way Kafka's consumer of __consumer_offsets does: the
    committed offsets (the newest record in log order among plain ones and those whose
    producer's commit marker follows) and the partitions with an open transaction."""
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    pending: dict[int, dict[tuple[str, int], tuple[int, int]]] = {}
    for pos, item in enumerate(log):
        if isinstance(item, m.TxnMarker):
            done = pending.pop(item.producer_id, {})
            if item.committed:
                for tp, (at, off) in done.items():
                    if tp not in offsets or offsets[tp][0] < at:
                        offsets[tp] = (at, off)
            continue
        key, value, pid = (
            (item.key, item.value, item.producer_id)
            if isinstance(item, m.LoadedRecord)
            else (item[0], item[1], -1)
        )
        k = decode_key(key)
        if not isinstance(k, OffsetKey) or value is None:
            continue
        tp = (k.topic, k.partition)
        target = pending.setdefault(pid, {}) if pid >= 0 else offsets
        target[tp] = (pos, decode_offset_value(value).offset)
    open_tps = {tp for per in pending.values() for tp in per}
    return {tp: off for tp, (_, off) in offsets.items()}, open_tps


PRODUCERS = (7, 8, 9)
TPS = [("t", p) for p in range(3)]


class TxnOffsetsModel(RuleBasedStateMachine):
    """Three transactional producers and a plain committer on one group; appends held
    and completed late or failed; markers only for a producer with no append in flight
    (its client waits for TxnOffsetCommit's answer before EndTxn); the coordinator
    moves. After every step the core's committed offsets equal the log's reading, and
    its unstable partitions are the log's open transactions' and those being appended."""

    @initialize()
    def start(self) -> None:
        self.h = Harness()
        self.h.hold = True
        self.next_offset = 0

    def _in_flight(self, pid: int) -> bool:
        return any(a.producer_id == pid for a in self.h.held)

    @rule(pid=st.sampled_from(PRODUCERS), tps=st.sets(st.sampled_from(TPS), min_size=1))
    def txn_commit(self, pid: int, tps: set[tuple[str, int]]) -> None:
        self.next_offset += 1
        self.h.txn_commit(G, pid, dict.fromkeys(sorted(tps), self.next_offset))

    @rule(tp=st.sampled_from(TPS))
    def plain_commit(self, tp: tuple[str, int]) -> None:
        self.next_offset += 1
        self.h.commit(G, "", -1, {tp: self.next_offset})

    @rule(ok=st.booleans(), n=st.integers(1, 3))
    def complete(self, ok: bool, n: int) -> None:
        for _ in range(n):
            if self.h.held:
                self.h.complete(
                    self.h.held.pop(0), Errors.NONE if ok else Errors.NOT_ENOUGH_REPLICAS
                )

    @rule(pid=st.sampled_from(PRODUCERS), commit=st.booleans())
    def marker(self, pid: int, commit: bool) -> None:
        if not self._in_flight(pid):
            self.h.marker(P, pid, commit)

    @rule()
    def move(self) -> None:
        held, self.h.held = self.h.held, []
        for a in held:
            self.h.complete(a, Errors.NOT_LEADER_OR_FOLLOWER)
        assert self.h.move(P) == 0

    @invariant()
    def agrees_with_the_log(self) -> None:
        offsets, open_tps = log_view(self.h.log[P])
        assert committed(self.h) == offsets
        in_flight = set()
        for a in self.h.held:
            if a.producer_id >= 0:
                keys = [decode_key(k) for k, _ in a.records]
                in_flight |= {(k.topic, k.partition) for k in keys if isinstance(k, OffsetKey)}
        assert self.h.core.unstable_partitions(G, None) == open_tps | in_flight


TestTxnOffsetsModel = TxnOffsetsModel.TestCase
TestTxnOffsetsModel.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)  # fmt: skip
