"""The transaction coordinator core, driven deterministically: appends succeed (or
fail) when the test says, markers are acknowledged when the test says."""

from __future__ import annotations

import itertools

import pytest

from broker.txn import records as rec
from broker.txn.coordinator import TransactionCoordinatorCore
from broker.txn.messages import Append, InitResult, Reply, SendMarkers, TxnConfig
from broker.txn.state import TransactionState as S
from common.errors import Errors

TID = "tx-1"


class Driver:
    def __init__(self, config: TxnConfig | None = None) -> None:
        pids = itertools.count(1000)
        self.core: TransactionCoordinatorCore[str] = TransactionCoordinatorCore(
            config or TxnConfig(num_partitions=1, abort_check_interval_ms=100),
            lambda: next(pids),
            lambda g: ("__consumer_offsets", 7),
        )
        self.core.begin_load(0, coordinator_epoch=5)
        self.core.load(0, [], 0)
        self.replies: dict[str, object] = {}
        self.markers: list[SendMarkers] = []
        self.log: list[tuple[bytes, bytes | None]] = []
        self.pending: list[Append] = []
        self.auto_append = True

    def run(self, outs: list, now: int = 0) -> None:
        for o in outs:
            if isinstance(o, Reply):
                self.replies[o.token] = o.result
            elif isinstance(o, SendMarkers):
                self.markers.append(o)
            elif self.auto_append:
                self.append_done(o, Errors.NONE, now)
            else:
                self.pending.append(o)

    def append_done(self, a: Append, code: int, now: int = 0) -> None:
        if code == Errors.NONE:
            self.log.extend(a.records)
        self.run(self.core.on_append_done(a.write_id, code, now), now)

    def init(self, tok: str = "i", timeout: int = 60_000, pid: int = -1, epoch: int = -1, now=0):
        self.run(self.core.init_producer_id(tok, TID, timeout, pid, epoch, now), now)
        return self.replies.pop(tok)

    def add(self, pid: int, epoch: int, *tps: tuple[str, int], now: int = 0):
        self.run(self.core.add_partitions("a", TID, pid, epoch, tps, now), now)
        return self.replies.pop("a")

    def end(self, pid: int, epoch: int, commit: bool, now: int = 0):
        self.run(self.core.end_txn("e", TID, pid, epoch, commit, now), now)
        return self.replies.pop("e")

    def ack_markers(self, now: int = 0) -> None:
        ms, self.markers = self.markers, []
        for m in ms:
            self.run(
                self.core.on_markers_done(
                    m.transactional_id, m.producer_id, m.producer_epoch,
                    m.coordinator_epoch, True, now,
                ),
                now,
            )  # fmt: skip

    def state(self) -> S:
        return self.core.txns[TID].state


def test_init_commit_abort_cycle() -> None:
    d = Driver()
    r = d.init()
    assert r == InitResult(Errors.NONE, 1000, 0)
    assert d.add(1000, 0, ("t", 0), ("t", 1)) == {("t", 0): 0, ("t", 1): 0}
    assert d.state() == S.ONGOING
    assert d.end(1000, 0, True) == Errors.NONE
    assert d.state() == S.PREPARE_COMMIT
    [m] = d.markers
    assert (m.commit, m.coordinator_epoch, m.partitions) == (True, 5, (("t", 0), ("t", 1)))
    # a retried EndTxn while the markers are out: retriable
    assert d.end(1000, 0, True) == Errors.CONCURRENT_TRANSACTIONS
    d.ack_markers()
    assert d.state() == S.COMPLETE_COMMIT and not d.core.txns[TID].partitions
    assert d.end(1000, 0, True) == Errors.NONE  # retry of the completed one
    assert d.end(1000, 0, False) == Errors.INVALID_TXN_STATE
    assert d.add(1000, 0, ("t", 2)) == {("t", 2): 0}
    assert d.end(1000, 0, False) == Errors.NONE
    assert d.markers[0].commit is False
    d.ack_markers()
    assert d.state() == S.COMPLETE_ABORT
    states = [rec.decode_value(v).state for _, v in d.log if v is not None]
    assert states == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT,
                      S.ONGOING, S.PREPARE_ABORT, S.COMPLETE_ABORT]  # fmt: skip


def test_second_init_bumps_epoch_and_fences_the_first() -> None:
    d = Driver()
    d.init()
    assert d.init(tok="j") == InitResult(Errors.NONE, 1000, 1)
    assert d.add(1000, 0, ("t", 0)) == {("t", 0): Errors.PRODUCER_FENCED}
    assert d.end(1000, 0, True) == Errors.PRODUCER_FENCED
    assert d.add(999, 1, ("t", 0)) == {("t", 0): Errors.INVALID_PRODUCER_ID_MAPPING}


def test_init_while_ongoing_aborts_with_bumped_epoch_then_succeeds() -> None:
    d = Driver()
    d.init()
    d.add(1000, 0, ("t", 0))
    assert d.init(tok="j") == InitResult(Errors.CONCURRENT_TRANSACTIONS)
    assert d.state() == S.PREPARE_ABORT
    [m] = d.markers
    assert (m.commit, m.producer_epoch) == (False, 1)  # the fencing epoch
    assert d.init(tok="k") == InitResult(Errors.CONCURRENT_TRANSACTIONS)  # still aborting
    d.ack_markers()
    assert d.init(tok="l") == InitResult(Errors.NONE, 1000, 2)
    assert d.end(1000, 0, True) == Errors.PRODUCER_FENCED


def test_invalid_timeout_and_empty_id() -> None:
    d = Driver(TxnConfig(num_partitions=1, max_timeout_ms=1000))
    assert d.init(timeout=1001).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
    assert d.init(timeout=0).error_code == Errors.INVALID_TRANSACTION_TIMEOUT
    d.run(d.core.init_producer_id("x", "", 100, -1, -1, 0))
    assert d.replies["x"] == InitResult(Errors.INVALID_REQUEST)


def test_end_txn_in_empty_state_is_invalid() -> None:
    d = Driver()
    d.init()
    assert d.end(1000, 0, True) == Errors.INVALID_TXN_STATE


def test_concurrent_request_while_a_write_is_pending() -> None:
    d = Driver()
    d.init()
    d.auto_append = False
    d.run(d.core.add_partitions("a", TID, 1000, 0, [("t", 0)], 0))
    assert "a" not in d.replies
    assert d.end(1000, 0, True) == Errors.CONCURRENT_TRANSACTIONS
    d.append_done(d.pending.pop(), Errors.NOT_LEADER_OR_FOLLOWER)
    assert d.replies.pop("a") == {("t", 0): Errors.NOT_COORDINATOR}
    assert d.state() == S.EMPTY  # the failed write changed nothing


def test_timeout_aborts_with_epoch_bump() -> None:
    d = Driver()
    d.init(timeout=1000)
    d.add(1000, 0, ("t", 0), now=10)
    d.run(d.core.tick(500), 500)
    assert d.state() == S.ONGOING
    d.run(d.core.tick(1100), 1100)
    assert d.state() == S.PREPARE_ABORT
    [m] = d.markers
    assert (m.commit, m.producer_epoch) == (False, 1)
    d.ack_markers()
    assert d.state() == S.COMPLETE_ABORT
    assert d.end(1000, 0, True) == Errors.PRODUCER_FENCED
    assert d.add(1000, 0, ("t", 0)) == {("t", 0): Errors.PRODUCER_FENCED}


def test_epoch_exhaustion_rotates_producer_id() -> None:
    d = Driver()
    d.init()
    d.core.txns[TID].producer_epoch = 32_766
    r = d.init(tok="j")
    assert r == InitResult(Errors.NONE, 1001, 0)
    # a KIP-360 retry with the old id and exhausted epoch gets the same answer
    assert d.init(tok="k", pid=1000, epoch=32_766) == InitResult(Errors.NONE, 1001, 0)


def test_kip360_recovery_init() -> None:
    d = Driver()
    d.init()
    assert d.init(tok="j", pid=1000, epoch=0) == InitResult(Errors.NONE, 1000, 1)
    assert d.init(tok="k", pid=1000, epoch=0) == InitResult(Errors.NONE, 1000, 1)  # retry
    assert d.init(tok="l", pid=1000, epoch=7).error_code == Errors.PRODUCER_FENCED
    assert d.init(tok="m", pid=55, epoch=1).error_code == Errors.PRODUCER_FENCED


def test_verify_only() -> None:
    d = Driver()
    d.init()
    d.add(1000, 0, ("t", 0))
    d.run(d.core.verify_partitions("v", TID, 1000, 0, [("t", 0), ("t", 1)]))
    assert d.replies.pop("v") == {("t", 0): 0, ("t", 1): Errors.INVALID_TXN_STATE}
    d.run(d.core.verify_partitions("v", TID, 1000, 3, [("t", 0)]))
    assert d.replies.pop("v") == {("t", 0): Errors.PRODUCER_FENCED}
    assert not [v for _, v in d.log if v and rec.decode_value(v).state == S.ONGOING][1:]


def test_add_offsets_adds_the_group_partition() -> None:
    d = Driver()
    d.init()
    d.run(d.core.add_offsets("o", TID, 1000, 0, "g", 0))
    assert d.replies.pop("o") == Errors.NONE
    assert d.core.txns[TID].partitions == {("__consumer_offsets", 7)}


def test_load_replays_log_and_resends_markers_of_prepared() -> None:
    d = Driver()
    d.init()
    d.add(1000, 0, ("t", 0))
    d.end(1000, 0, True)
    log = list(d.log)
    d.core.unload(0)
    assert d.core.check(TID) == Errors.NOT_COORDINATOR
    d.core.begin_load(0, 6)
    assert d.core.check(TID) == Errors.COORDINATOR_LOAD_IN_PROGRESS
    outs, bad = d.core.load(0, log + [(b"\x00\x09junk", b"x")], 0)
    assert bad == 1
    [m] = outs
    assert isinstance(m, SendMarkers)
    assert (m.commit, m.coordinator_epoch, m.partitions) == (True, 6, (("t", 0),))
    # the old coordinator epoch's acknowledgement is ignored; the new one completes
    d.run(d.core.on_markers_done(TID, 1000, 0, 5, True, 0))
    assert d.state() == S.PREPARE_COMMIT
    d.run(d.core.on_markers_done(TID, 1000, 0, 6, True, 0))
    assert d.state() == S.COMPLETE_COMMIT


def test_expiry_tombstones_idle_ids() -> None:
    cfg = TxnConfig(num_partitions=1, id_expiration_ms=1000, remove_check_interval_ms=100)
    d = Driver(cfg)
    d.init()
    d.run(d.core.tick(2000), 2000)
    assert TID not in d.core.txns
    assert d.log[-1] == (rec.encode_key(TID), None)


def test_describe_and_list() -> None:
    d = Driver()
    d.init()
    d.add(1000, 0, ("t", 0), now=100)
    desc = d.core.describe(TID)
    assert (desc.state, desc.producer_id, desc.start_ms, desc.partitions) == (
        "Ongoing", 1000, 100, (("t", 0),),
    )  # fmt: skip
    assert d.core.describe("nope").error_code == Errors.TRANSACTIONAL_ID_NOT_FOUND
    assert d.core.list_transactions([], [], -1, 200) == (0, [], [(TID, 1000, "Ongoing")])
    assert d.core.list_transactions(["Empty", "Bogus"], [], -1, 200) == (0, ["Bogus"], [])
    assert d.core.list_transactions([], [5], -1, 200)[2] == []
    assert d.core.list_transactions([], [], 50, 200)[2] == [(TID, 1000, "Ongoing")]
    assert d.core.list_transactions([], [], 500, 200)[2] == []


@pytest.mark.parametrize("state", list(S))
def test_value_round_trip(state: S) -> None:
    parts = () if state == S.EMPTY else (("a", 0), ("a", 3), ("b", 1))
    v = rec.TxnLogValue(7, 3, 60000, state, parts, 123, 100)
    assert rec.decode_value(rec.encode_value(v)) == v
    assert rec.decode_key(rec.encode_key("x-é")) == "x-é"


def test_value_v0_bytes_as_kafka_writes_them() -> None:
    v = rec.TxnLogValue(1, 2, 3, S.ONGOING, (("t", 4),), 5, 6)
    assert rec.encode_value(v).hex() == (
        "0000" "0000000000000001" "0002" "00000003" "01"
        "00000001" "000174" "00000001" "00000004" "0000000000000005" "0000000000000006"
    )  # fmt: skip


def test_value_v1_flexible_reads() -> None:
    body = (
        bytes.fromhex("0001" "0000000000000001" "0002" "00000003" "01")
        + bytes([2, 2]) + b"t" + bytes([2]) + bytes.fromhex("00000004") + bytes([0])
        + bytes.fromhex("0000000000000005" "0000000000000006")
        + bytes([1, 0, 8]) + bytes.fromhex("0000000000000009")
    )  # fmt: skip
    v = rec.decode_value(body)
    assert (v.partitions, v.previous_producer_id, v.start_ms) == ((("t", 4),), 9, 6)


def test_the_next_transaction_waits_for_the_last_to_complete_instead_of_backing_off() -> None:
    """AddPartitionsToTxn while the last transaction writes its markers is parked and
    answered when it completes (Kafka answers CONCURRENT_TRANSACTIONS and the client
    retries 20 ms later); parked too long, it gets CONCURRENT_TRANSACTIONS after all."""
    d = Driver()
    r = d.init()
    tp = ("t", 0)
    assert d.add(r.producer_id, r.producer_epoch, tp) == {tp: Errors.NONE}
    assert d.end(r.producer_id, r.producer_epoch, True) == Errors.NONE
    assert d.state() == S.PREPARE_COMMIT and d.markers
    d.run(d.core.add_partitions("next", TID, r.producer_id, r.producer_epoch, [("t", 1)], 10))
    assert "next" not in d.replies  # parked, not refused
    d.ack_markers(now=12)
    assert d.replies.pop("next") == {("t", 1): Errors.NONE}
    assert d.state() == S.ONGOING and d.core.txns[TID].partitions == {("t", 1)}

    assert d.end(r.producer_id, r.producer_epoch, False, now=20) == Errors.NONE
    d.run(d.core.add_partitions("late", TID, r.producer_id, r.producer_epoch, [tp], 21), 21)
    assert "late" not in d.replies
    now = 21
    while "late" not in d.replies:  # the timer wakes at each deadline the core names
        deadline = d.core.next_deadline_ms()
        assert deadline is not None and now < deadline <= 21 + 500
        now = deadline
        d.run(d.core.tick(now), now)
    assert now == 21 + 500
    assert d.replies.pop("late") == {tp: Errors.CONCURRENT_TRANSACTIONS}
