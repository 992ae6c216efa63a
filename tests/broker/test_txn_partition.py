"""Transactions on a partition, through the replica manager and real logs under
tmp_path: the LSO, read_committed fetches and their aborted lists, ListOffsets by
isolation, markers (fencing, listeners), the transactional produce rules and the
KIP-890 verification hook, followers completing transactions, and restarts restoring
producer state and the aborted list from `.snapshot` and `.txnindex` files (or from the
log when those are corrupt). The Fetch response's aborted list is checked with kio.
"""

from __future__ import annotations

import io
import uuid
from pathlib import Path
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from broker.codec import encode_fetch_response
from broker.fetcher import FollowerData
from broker.replica_manager import ReplicaManager
from broker.results import FetchResult
from common.errors import Errors
from storage.control_batch import ABORT, COMMIT, build_marker_batch
from storage.log import Log
from storage.log_manager import LogManager
from storage.records import Record as DataRecord
from storage.records import build_batch
from storage.segment import FileSlice
from storage.txn_index import AbortedTxn
from tests.harness.replicas import (
    TOPIC,
    Metadata,
    batch,
    broker_config,
    checked,
    fp,
    run,
    topic,
    values_in,
)


def manager(tmp_path: Path, **props: str) -> ReplicaManager:
    cfg = broker_config(tmp_path, 1, **props)
    lm = LogManager(cfg.log_dirs, cfg.log_config, cfg.log_manager_config)
    lm.startup()
    return ReplicaManager(cfg, lm)


def txn_batch(*values: bytes, pid: int, epoch: int = 0, seq: int = 0) -> bytes:
    return build_batch(
        [DataRecord(v) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )


def read(rm: ReplicaManager, offset: int, isolation: int) -> tuple[FetchResult, list[Any]]:
    r = rm.fetch(fp(offset), -1, isolation)
    assert r.error_code == 0, r
    raw = r.records.read() if isinstance(r.records, FileSlice) else (r.records or b"")
    return r, values_in(raw)


async def produce(rm: ReplicaManager, records: bytes, tid: str | None = "tx") -> int:
    r = await rm.produce(TOPIC, 0, checked(records), -1, 1000, tid)
    return r.error_code


async def abort_one_commit_other(rm: ReplicaManager) -> None:
    """pid 5 writes a, b (0-1) and pid 6 writes c (2); pid 5 aborts (3), 6 commits (4)."""
    assert await produce(rm, txn_batch(b"a", b"b", pid=5)) == 0
    assert await produce(rm, txn_batch(b"c", pid=6)) == 0
    assert await rm.write_txn_marker(TOPIC, 0, 5, 0, False, 1, 1000) == 0
    assert await rm.write_txn_marker(TOPIC, 0, 6, 0, True, 1, 1000) == 0


@run
async def test_read_committed_stops_at_the_lso_and_lists_the_aborted(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    heard: list[tuple[str, int, int, bool]] = []
    rm.marker_listeners.append(lambda *a: heard.append(a))
    assert await produce(rm, txn_batch(b"a", b"b", pid=5)) == 0
    assert await produce(rm, txn_batch(b"c", pid=6)) == 0
    h = rm.partition(TOPIC, 0)
    assert h is not None and h.core.high_watermark == 3 and h.last_stable_offset == 0
    r, values = read(rm, 0, 1)
    assert (values, r.high_watermark, r.last_stable_offset, r.aborted) == ([], 3, 0, ())
    assert rm.list_offset(TOPIC, 0, -1, -1, 1).offset == 0
    assert rm.list_offset(TOPIC, 0, -1, -1, 0).offset == 3
    assert await rm.write_txn_marker(TOPIC, 0, 5, 0, False, 1, 1000) == 0
    assert heard == [(TOPIC, 0, 5, False)]
    assert h.last_stable_offset == 2  # producer 6's transaction still open at 2
    r, values = read(rm, 0, 1)
    assert values == [b"a", b"b"] and r.aborted == (AbortedTxn(5, 0, 3, 2),)
    assert await rm.write_txn_marker(TOPIC, 0, 6, 0, True, 1, 1000) == 0
    assert h.last_stable_offset == 5 == h.log.log_end_offset
    r, values = read(rm, 0, 1)
    # Data and both markers; the client drops the aborted records by the list.
    assert values[:3] == [b"a", b"b", b"c"] and len(values) == 5
    assert [(t.producer_id, t.first_offset) for t in r.aborted or ()] == [(5, 0)]
    r, _ = read(rm, 4, 1)
    assert r.aborted == ()  # nothing read: no list
    r, values = read(rm, 0, 0)
    assert r.aborted is None and r.last_stable_offset == 5
    assert rm.list_offset(TOPIC, 0, -1, -1, 1).offset == 5
    entry = h.producers.entry(6)
    assert entry is not None and entry.coordinator_epoch == 1
    assert entry.current_txn_first_offset == -1


@run
async def test_markers_are_fenced_and_need_leadership(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    assert await produce(rm, txn_batch(b"a", pid=5, epoch=3)) == 0
    assert await rm.write_txn_marker(TOPIC, 0, 5, 3, True, 7, 1000) == 0
    zombie = await rm.write_txn_marker(TOPIC, 0, 5, 3, True, 6, 1000)
    assert zombie == Errors.TRANSACTION_COORDINATOR_FENCED
    old = await rm.write_txn_marker(TOPIC, 0, 5, 2, True, 7, 1000)
    assert old == Errors.INVALID_PRODUCER_EPOCH
    assert (
        await rm.write_txn_marker("nope", 0, 5, 3, True, 7, 1000)
        == Errors.UNKNOWN_TOPIC_OR_PARTITION
    )


@run
async def test_transactional_produce_rules_and_verification(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    asked: list[tuple[str, int, int, str, int]] = []
    answer = {"code": Errors.INVALID_TXN_STATE}

    async def verifier(tid: str, pid: int, epoch: int, t: str, p: int) -> int:
        asked.append((tid, pid, epoch, t, p))
        return answer["code"]

    rm.verifier = verifier
    assert await produce(rm, txn_batch(b"a", pid=5)) == Errors.INVALID_TXN_STATE
    assert await produce(rm, txn_batch(b"a", pid=5), tid=None) == Errors.INVALID_TXN_STATE
    answer["code"] = Errors.CONCURRENT_TRANSACTIONS  # retriable: told as NOT_ENOUGH_REPLICAS
    assert await produce(rm, txn_batch(b"a", pid=5)) == Errors.NOT_ENOUGH_REPLICAS
    answer["code"] = Errors.NONE
    assert await produce(rm, txn_batch(b"a", pid=5)) == 0
    assert asked == [("tx", 5, 0, TOPIC, 0)] * 3
    assert await produce(rm, txn_batch(b"b", pid=5, seq=1)) == 0
    assert len(asked) == 3  # the transaction is open here: no need to ask
    plain = batch(b"x", pid=5, epoch=0, seq=2)
    assert await produce(rm, plain) == Errors.INVALID_TXN_STATE
    assert rm.partition(TOPIC, 0).log.log_end_offset == 2  # type: ignore[union-attr]


@run
async def test_followers_complete_transactions_and_index_aborts(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(2, 1), leader=2)))
    leader = Log(tmp_path / "leader" / f"{TOPIC}-0")
    leader.append_as_leader(bytearray(txn_batch(b"a", pid=5)), 0)
    leader.append_as_leader(bytearray(txn_batch(b"b", pid=6)), 0)
    leader.append_as_leader(bytearray(build_marker_batch(5, 0, ABORT, 0, 0)), 0)
    data = leader.read(0, 1 << 20).read()
    sent = rm.follower_fetch_state((TOPIC, 0))
    assert sent is not None
    assert await rm.process_follower_data((TOPIC, 0), sent, FollowerData(0, 3, 0, data)) == 0
    h = rm.partition(TOPIC, 0)
    assert h is not None
    assert h.log.collect_aborted_txns(0, 3) == [AbortedTxn(5, 0, 2, 1)]
    assert h.last_stable_offset == 1  # producer 6 still open
    more = leader.append_as_leader(bytearray(build_marker_batch(6, 0, COMMIT, 0, 0)), 0)
    assert more.first_offset == 3
    sent = rm.follower_fetch_state((TOPIC, 0))
    assert sent is not None
    tail = leader.read(3, 1 << 20).read()
    assert await rm.process_follower_data((TOPIC, 0), sent, FollowerData(0, 4, 0, tail)) == 0
    assert h.last_stable_offset == 4


async def _restart(tmp_path: Path, md: Metadata) -> ReplicaManager:
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.snapshot())
    return rm


def _state(rm: ReplicaManager) -> tuple[Any, ...]:
    h = rm.partition(TOPIC, 0)
    assert h is not None
    r, values = read(rm, 0, 1)
    return h.last_stable_offset, values, r.aborted, h.producers.ongoing_txns()


@run
async def test_restart_restores_lso_and_aborted_list_from_its_files(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    await abort_one_commit_other(rm)
    h = rm.partition(TOPIC, 0)
    assert h is not None
    h.log.roll()  # a snapshot at the roll (offset 5)
    assert await produce(rm, txn_batch(b"d", pid=7)) == 0  # open across the restart
    before = _state(rm)
    assert before[0] == 5 and before[3] == {5: 7}
    rm.snapshot_producer_states()
    rm.log_manager.shutdown()
    files = sorted(p.name for p in h.log.dir.iterdir())
    assert any(n.endswith(".txnindex") for n in files)
    assert any(n.endswith(".snapshot") for n in files), files
    rm2 = await _restart(tmp_path, md)
    assert _state(rm2) == before
    # the producer's open transaction survived: its commit still closes it
    assert await rm2.write_txn_marker(TOPIC, 0, 7, 0, True, 1, 1000) == 0
    assert rm2.partition(TOPIC, 0).last_stable_offset == 7  # type: ignore[union-attr]


@pytest.mark.parametrize("damage", ["txnindex", "snapshot"])
def test_corrupt_txnindex_or_snapshot_is_rebuilt_from_the_log(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    @run
    async def scenario(tmp_path: Path) -> None:
        md = Metadata()
        rm = manager(tmp_path)
        await rm.on_metadata_update(*md.update(*topic()))
        await abort_one_commit_other(rm)
        assert await produce(rm, txn_batch(b"d", pid=7)) == 0
        before = _state(rm)
        h = rm.partition(TOPIC, 0)
        assert h is not None
        rm.snapshot_producer_states()
        rm.log_manager.shutdown()
        damaged = 0
        for path in h.log.dir.iterdir():
            if path.name.endswith("." + damage):
                raw = path.read_bytes()
                # .txnindex: a torn entry (not a multiple of 34 bytes); .snapshot: a
                # body its CRC no longer matches.
                path.write_bytes(
                    raw + b"\x00\x07" if damage == "txnindex" else raw[:-3] + b"\xff" * 3
                )
                damaged += 1
        assert damaged
        caplog.clear()
        rm2 = await _restart(tmp_path, md)
        assert _state(rm2) == before
        said = caplog.text
        assert ("transaction index unusable" in said) == (damage == "txnindex"), said
        assert damage != "snapshot" or "snapshot" in said, said

    scenario(tmp_path)


@pytest.mark.parametrize("version", [4, 5, 11, 12, 15])
def test_fetch_response_carries_the_aborted_list(version: int, tmp_path: Path) -> None:
    aborted = (AbortedTxn(5, 0, 3, 2), AbortedTxn(9, 10, 12, 13))
    data = batch(b"a", b"b")
    path = tmp_path / "seg"
    path.write_bytes(data)
    with io.FileIO(path, "r") as f:
        sl = FileSlice(f, 0, len(data))
        r = FetchResult(0, 10, 4, 0, sl, aborted=aborted)
        empty = FetchResult(0, 10, 4, 0, None, aborted=())
        t: str | uuid.UUID = uuid.uuid4() if version >= 13 else "t"
        parts = encode_fetch_response(version, 3, 0, [(t, [(0, r, sl), (1, empty, None)])],
                                      read_committed=True)  # fmt: skip
        frame = b"".join(p.read() if isinstance(p, FileSlice) else bytes(p) for p in parts)
    cls = load_response_schema(1, version)
    _head, n = entity_reader(cls.__header_schema__)(frame, 4)
    body, m = entity_reader(cls)(frame, 4 + n)
    assert 4 + n + m == len(frame)
    p0, p1 = body.responses[0].partitions
    assert [(a.producer_id, a.first_offset) for a in p0.aborted_transactions] == [(5, 0), (9, 10)]
    assert p0.records == data and p0.last_stable_offset == 4
    assert p1.aborted_transactions == () and p1.records == b""
