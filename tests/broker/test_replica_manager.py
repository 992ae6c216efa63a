"""The broker's replication core and replica manager, through real storage.

Metadata updates are built from real records with `MetadataDelta` (no controller);
logs are real `storage.log.Log`s under tmp_path. The pure cores (`Partition`,
`ProducerStateManager`) are driven directly. Replication over the wire between two
brokers is in tests/broker/test_replication_wire.py.

Every wait has a deadline; nothing sleeps to synchronise.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from broker import replica_changes
from broker.fetcher import FollowerData
from broker.producer_state import (
    INT32_MAX,
    BatchHeader,
    ProducerStateError,
    ProducerStateManager,
    increment_sequence,
)
from broker.replica_manager import ReplicaManager
from broker.replication_quota import ReplicationQuota
from metadata_log.records import (
    BROKER_RESOURCE,
    ConfigRecord,
    PartitionChangeRecord,
    Record,
    RemoveTopicRecord,
)
from storage.log import Log
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchView
from tests.harness.replicas import (
    TID,
    TOPIC,
    Metadata,
    batch,
    broker_config,
    checked,
    eventually,
    fp,
    run,
    topic,
    values_in,
)

TID2 = "7f1c2b63-4e6c-4e8f-8b66-1b5c3a4d2e21"


def manager(tmp_path: Path, node_id: int = 1, **props: str) -> ReplicaManager:
    cfg = broker_config(tmp_path, node_id, **props)
    lm = LogManager(cfg.log_dirs, cfg.log_config, cfg.log_manager_config)
    lm.startup()
    return ReplicaManager(cfg, lm)


def fetched(rm: ReplicaManager, offset: int, replica_id: int = -1) -> list[bytes | None]:
    r = rm.fetch(fp(offset), replica_id, 0)
    assert r.error_code == 0, r
    return values_in(r.records.read() if hasattr(r.records, "read") else (r.records or b""))  # type: ignore[union-attr]


# -- ProducerStateManager ---------------------------------------------------------------------


def headers(*batches: bytes) -> list[BatchHeader]:
    return [BatchHeader.of(RecordBatchView(b)) for b in batches]


def test_producer_state_sequences_duplicates_and_epochs() -> None:
    ps = ProducerStateManager()
    b0 = batch(b"a", b"b", pid=7, epoch=3, seq=0)
    assert ps.check(headers(b0)) is None  # an unknown producer may start anywhere
    ps.record(headers(b0), first_offset=100)
    dup = ps.check(headers(b0))
    assert dup is not None and (dup.first_offset, dup.last_offset) == (100, 101)
    with pytest.raises(ProducerStateError) as gap:
        ps.check(headers(batch(b"c", pid=7, epoch=3, seq=5)))
    assert gap.value.error_code == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
    with pytest.raises(ProducerStateError) as old:
        ps.check(headers(batch(b"c", pid=7, epoch=2, seq=2)))
    assert old.value.error_code == 47  # INVALID_PRODUCER_EPOCH
    with pytest.raises(ProducerStateError) as new_epoch:
        ps.check(headers(batch(b"c", pid=7, epoch=4, seq=3)))
    assert new_epoch.value.error_code == 45  # a new epoch starts at 0
    assert ps.check(headers(batch(b"c", pid=7, epoch=4, seq=0))) is None
    # the batches of one request are checked in order
    ok = headers(batch(b"c", pid=7, epoch=3, seq=2), batch(b"d", pid=7, epoch=3, seq=3))
    assert ps.check(ok) is None
    with pytest.raises(ProducerStateError):
        ps.check(headers(batch(b"c", pid=7, epoch=3, seq=2), batch(b"d", pid=7, epoch=3, seq=2)))


def test_producer_state_keeps_five_batches_and_wraps_sequences() -> None:
    ps = ProducerStateManager()
    for i in range(7):
        ps.record(headers(batch(b"x", pid=1, epoch=0, seq=i)), first_offset=i)
    assert ps.check(headers(batch(b"x", pid=1, epoch=0, seq=2))) is not None
    with pytest.raises(ProducerStateError):  # older than the last five: out of order
        ps.check(headers(batch(b"x", pid=1, epoch=0, seq=1)))
    assert increment_sequence(INT32_MAX, 1) == 0
    ps.record(headers(batch(b"x", pid=2, epoch=0, seq=INT32_MAX)), first_offset=50)
    assert ps.check(headers(batch(b"y", pid=2, epoch=0, seq=0))) is None


# -- the leader's data path --------------------------------------------------------------------


@run
async def test_produce_and_fetch_with_rf1(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    r = await rm.produce(TOPIC, 0, checked(batch(b"a", b"b")), acks=1, timeout_ms=1000)
    assert (r.error_code, r.base_offset) == (0, 0)
    r = await rm.produce(TOPIC, 0, checked(batch(b"c")), acks=-1, timeout_ms=1000)
    assert (r.error_code, r.base_offset) == (0, 2)
    assert fetched(rm, 0) == [b"a", b"b", b"c"]
    assert rm.list_offset(TOPIC, 0, -1, -1).offset == 3
    assert rm.list_offset(TOPIC, 0, -2, -1).offset == 0
    assert rm.offset_for_leader_epoch(TOPIC, 0, 0, -1) == (0, 0, 3)
    assert rm.fetch(fp(4), -1, 0).error_code == 1  # OFFSET_OUT_OF_RANGE
    assert rm.fetch(fp(0, epoch=1), -1, 0).error_code == 75  # UNKNOWN_LEADER_EPOCH
    assert (await rm.produce("nope", 0, checked(batch(b"x")), 1, 1000)).error_code == 3


@run
async def test_errors_for_followers_and_fenced_epochs(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(2, 1), leader=2, epoch=3)))
    assert (await rm.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)).error_code == 6
    assert rm.fetch(fp(0), -1, 0).error_code == 6
    await rm.on_metadata_update(*md.update(PartitionChangeRecord(TID, 0, (1, 2), 1, 4, 1)))
    assert rm.fetch(fp(0, epoch=3), -1, 0).error_code == 74  # FENCED_LEADER_EPOCH
    assert rm.fetch(fp(0, epoch=4), -1, 0).error_code == 0
    assert rm.partition(TOPIC, 0).log.leader_epoch_cache.latest_epoch == 4  # type: ignore[union-attr]


@run
async def test_acks_all_waits_for_the_isr_and_consumers_see_only_committed(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(1, 2, 3))))
    produce = asyncio.create_task(rm.produce(TOPIC, 0, checked(batch(b"a", b"b")), -1, 10_000))
    await eventually(lambda: rm.partition(TOPIC, 0).log.log_end_offset == 2, 5, "append")  # type: ignore[union-attr]
    assert fetched(rm, 0) == []  # the HW is still 0
    assert fetched(rm, 0, replica_id=2) == [b"a", b"b"]  # followers read to the LEO
    rm.fetch(fp(2), 2, 0)
    assert not produce.done()
    rm.fetch(fp(2), 3, 0)
    result = await asyncio.wait_for(produce, 5)
    assert (result.error_code, result.base_offset) == (0, 0)
    assert fetched(rm, 0) == [b"a", b"b"]


@run
async def test_min_insync_replicas_and_timeouts(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path, **{"min.insync.replicas": "2"})
    await rm.on_metadata_update(*md.update(*topic(replicas=(1, 2), isr=(1,))))
    r = await rm.produce(TOPIC, 0, checked(batch(b"a")), -1, 1000)
    assert r.error_code == 19  # NOT_ENOUGH_REPLICAS, nothing appended
    assert rm.partition(TOPIC, 0).log.log_end_offset == 0  # type: ignore[union-attr]
    assert (await rm.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)).error_code == 0
    await rm.on_metadata_update(*md.update(PartitionChangeRecord(TID, 0, (1, 2), 1, 0, 1)))
    r = await rm.produce(TOPIC, 0, checked(batch(b"b")), -1, 50)
    assert r.error_code == 7  # REQUEST_TIMED_OUT: broker 2 never fetched
    assert rm.partition(TOPIC, 0).core.drain_pending() == []  # type: ignore[union-attr]
    # a topic-level min.insync.replicas wins over the broker's
    await rm.on_metadata_update(*md.update(ConfigRecord(2, TOPIC, "min.insync.replicas", "3")))
    assert (await rm.produce(TOPIC, 0, checked(batch(b"c")), -1, 50)).error_code == 19


@run
async def test_idempotent_retries_get_original_offsets(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    first = batch(b"a", b"b", pid=42, epoch=0, seq=0)
    assert (await rm.produce(TOPIC, 0, checked(first), 1, 1000)).base_offset == 0
    assert (
        await rm.produce(TOPIC, 0, checked(batch(b"c", pid=42, epoch=0, seq=2)), 1, 1000)
    ).base_offset == 2
    again = await rm.produce(TOPIC, 0, checked(batch(b"a", b"b", pid=42, epoch=0, seq=0)), -1, 1000)
    assert (again.error_code, again.base_offset) == (0, 0)
    assert rm.partition(TOPIC, 0).log.log_end_offset == 3  # type: ignore[union-attr]
    gap = await rm.produce(TOPIC, 0, checked(batch(b"d", pid=42, epoch=0, seq=9)), 1, 1000)
    assert gap.error_code == 45
    bumped = await rm.produce(TOPIC, 0, checked(batch(b"d", pid=42, epoch=1, seq=0)), 1, 1000)
    assert (bumped.error_code, bumped.base_offset) == (0, 3)
    fenced = await rm.produce(TOPIC, 0, checked(batch(b"e", pid=42, epoch=0, seq=3)), 1, 1000)
    assert fenced.error_code == 47
    assert fetched(rm, 0) == [b"a", b"b", b"c", b"d"]


@run
async def test_a_produce_during_a_leader_epoch_change_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's produce waits while the broker makes the partition leader; ours did not
    (NOT_LEADER_OR_FOLLOWER), and an idempotent producer's next in-flight request then
    met a sequence gap, on which librdkafka bumps its epoch and re-sends messages that
    may already be written: the fault campaign's duplicates."""
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    first = batch(b"a", b"b", pid=42, epoch=0, seq=0)
    assert (await rm.produce(TOPIC, 0, checked(first), 1, 1000)).base_offset == 0
    release = threading.Event()
    real_start = replica_changes.start_leader_epoch

    def slow_start(lg: Log, epoch: int) -> None:  # the file step, on its thread
        assert release.wait(10)
        real_start(lg, epoch)

    monkeypatch.setattr(replica_changes, "start_leader_epoch", slow_start)
    h = rm.partition(TOPIC, 0)
    assert h is not None
    # Re-elected (leader epoch 1): the partition is transitioning until the file step ends.
    update = asyncio.create_task(
        rm.on_metadata_update(*md.update(PartitionChangeRecord(TID, 0, (1,), 1, 1, 1)))
    )
    await eventually(lambda: h.transitioning, 5, "the transition to start")
    produce = asyncio.create_task(
        rm.produce(TOPIC, 0, checked(batch(b"c", pid=42, epoch=0, seq=2)), 1, 5000)
    )
    for _ in range(20):  # the produce gets to its wait (it must not answer meanwhile)
        await asyncio.sleep(0)
    assert not produce.done()
    release.set()
    await asyncio.wait_for(update, 5)
    r = await asyncio.wait_for(produce, 5)
    assert (r.error_code, r.base_offset) == (0, 2)
    assert fetched(rm, 0) == [b"a", b"b", b"c"]


@run
async def test_a_produce_gives_up_waiting_for_a_transition_at_its_timeout(
    tmp_path: Path,
) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    h = rm.partition(TOPIC, 0)
    assert h is not None
    h.transitioning = True  # an update that never ends (the file step hangs)
    r = await asyncio.wait_for(rm.produce(TOPIC, 0, checked(batch(b"a")), 1, 50), 5)
    assert r.error_code == 6  # NOT_LEADER_OR_FOLLOWER, retriable


@run
async def test_the_batch_after_one_the_disk_refused_gets_a_storage_error_not_a_gap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk refuses seq 1; the connection's next request (seq 2) must not get
    OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka bumps its epoch (duplicates), but
    the retriable KAFKA_STORAGE_ERROR Kafka answers for an offline log dir."""
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    h = rm.partition(TOPIC, 0)
    assert h is not None

    async def send(value: bytes, seq: int) -> int:
        r = await rm.produce(TOPIC, 0, checked(batch(value, pid=42, epoch=0, seq=seq)), 1, 1000)
        return r.error_code

    assert await send(b"a", 0) == 0
    real_append = h.log.append_checked_as_leader

    def disk_full(*args: object, **kwargs: object) -> object:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(h.log, "append_checked_as_leader", disk_full)
    assert await send(b"b", 1) == 56  # KAFKA_STORAGE_ERROR
    assert await send(b"c", 2) == 56  # the gap is the refused batch: not 45
    monkeypatch.setattr(h.log, "append_checked_as_leader", real_append)
    assert await send(b"b", 1) == 0  # the client's retries, in order
    assert await send(b"c", 2) == 0
    assert await send(b"z", 9) == 45  # a real gap is one again
    assert fetched(rm, 0) == [b"a", b"b", b"c"]


@run
async def test_producer_state_is_rebuilt_from_the_log_after_a_restart(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    for seq in range(3):
        await rm.produce(TOPIC, 0, checked(batch(b"v%d" % seq, pid=9, epoch=2, seq=seq)), 1, 1000)
    rm.log_manager.shutdown()
    rm2 = manager(tmp_path)
    await rm2.on_metadata_update(*md.snapshot())
    retry = await rm2.produce(TOPIC, 0, checked(batch(b"v2", pid=9, epoch=2, seq=2)), 1, 1000)
    assert (retry.error_code, retry.base_offset) == (0, 2)
    assert (
        await rm2.produce(TOPIC, 0, checked(batch(b"v3", pid=9, epoch=2, seq=4)), 1, 1000)
    ).error_code == 45
    assert rm2.partition(TOPIC, 0).log.log_end_offset == 3  # type: ignore[union-attr]


@run
async def test_wait_for_data_wakes_on_append_and_times_out(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    t0 = time.monotonic()
    await rm.wait_for_data([fp(0)], 1, 50)
    assert time.monotonic() - t0 >= 0.04
    waiter = asyncio.create_task(rm.wait_for_data([fp(0)], 1, 30_000))
    await asyncio.sleep(0)
    assert not waiter.done()
    await rm.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)
    await asyncio.wait_for(waiter, 5)  # woken by the append, long before 30 s


@run
async def test_a_long_poll_answers_with_the_reads_of_its_wait(tmp_path: Path) -> None:
    """wait_for_data returns what it read on its last look, exactly what fetch would
    read then: the fetch answers with it instead of reading the log again."""
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    waiter = asyncio.create_task(rm.wait_for_data([fp(0)], 1, 30_000))
    await asyncio.sleep(0)
    await rm.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)
    found = await asyncio.wait_for(waiter, 5)
    h = rm.partition(TOPIC, 0)
    assert h is not None and list(found) == [fp(0)] and found[fp(0)] == h.log.read(0, 1 << 20)
    r = rm.fetch(fp(0), -1, 0, found[fp(0)])
    assert r.error_code == 0 and r.records is found[fp(0)].records and r.high_watermark == 1
    # a wait that times out at the end of the log read nothing: the fetch reads itself
    assert fp(1) not in await rm.wait_for_data([fp(1)], 1, 10)
    # a partition with an error to report is not read: fetch answers it
    assert await rm.wait_for_data([fp(1), fp(5)], 1, 30_000) == {}


@run
async def test_consumers_wait_for_the_hw_followers_for_the_leo(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(1, 2))))
    consumer = asyncio.create_task(rm.wait_for_data([fp(0)], 1, 30_000))
    follower = asyncio.create_task(rm.wait_for_data([fp(0)], 1, 30_000, replica_id=2))
    await asyncio.sleep(0)
    await rm.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)
    await asyncio.wait_for(follower, 5)
    assert not consumer.done()  # HW is still 0
    rm.fetch(fp(1), 2, 0)  # the follower has it: HW 1
    await asyncio.wait_for(consumer, 5)


@run
async def test_leadership_loss_fails_pending_produces(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(1, 2))))
    produce = asyncio.create_task(rm.produce(TOPIC, 0, checked(batch(b"a")), -1, 30_000))
    # appended, so waiting for the HW (the append and the wait are one step)
    await eventually(lambda: rm.partition(TOPIC, 0).log.log_end_offset == 1, 5, "append")  # type: ignore[union-attr]
    await rm.on_metadata_update(*md.update(PartitionChangeRecord(TID, 0, (2,), 2, 1, 1)))
    assert (await asyncio.wait_for(produce, 5)).error_code == 6


@run
async def test_divergence_is_reported_to_followers(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(1, 2), isr=(1,))))
    await rm.produce(TOPIC, 0, checked(batch(b"a", b"b")), 1, 1000)  # epoch 0: offsets 0-1
    await rm.on_metadata_update(*md.update(PartitionChangeRecord(TID, 0, (1,), 1, 2, 1)))
    await rm.produce(TOPIC, 0, checked(batch(b"c")), 1, 1000)  # epoch 2 from offset 2
    # a follower that had epoch 1 up to offset 5 (written by a leader we never saw)
    r = rm.fetch(fp(5, last_epoch=1), 2, 0)
    assert r.diverging_epoch == (0, 2) and r.records is None
    ok = rm.fetch(fp(2, last_epoch=0), 2, 0)
    assert ok.diverging_epoch is None and ok.error_code == 0


@run
async def test_follower_appends_truncates_and_follows_the_hw(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic(replicas=(2, 1), leader=2)))
    leader_log = Log(tmp_path / "leader" / f"{TOPIC}-0")
    leader_log.append_as_leader(bytearray(batch(b"a", b"b")), 0)
    leader_log.append_as_leader(bytearray(batch(b"c", pid=5, epoch=0, seq=0)), 0)
    data = leader_log.read(0, 1 << 20).read()
    sent = rm.follower_fetch_state((TOPIC, 0))
    assert sent is not None
    code = await rm.process_follower_data((TOPIC, 0), sent, FollowerData(0, 2, 0, data))
    h = rm.partition(TOPIC, 0)
    assert code == 0 and h is not None
    assert (h.log.log_end_offset, h.core.high_watermark) == (3, 2)
    retry = headers(batch(b"c", pid=5, epoch=0, seq=0))
    assert h.producers.check(retry) is not None  # producer 5's batch is known: a retry
    st = rm.follower_fetch_state((TOPIC, 0))
    assert st is not None and (st.fetch_offset, st.last_fetched_epoch) == (3, 0)
    # an answer to a fetch from a state we left (offset 0) is dropped
    await rm.process_follower_data((TOPIC, 0), sent, FollowerData(0, 1, 0, None, (0, 1)))
    assert h.log.log_end_offset == 3
    # the leader says epoch 0 ended at 1: our tail after it diverges
    await rm.process_follower_data((TOPIC, 0), st, FollowerData(0, 1, 0, None, (0, 1)))
    assert h.log.log_end_offset == 0  # the batch holding offset 1 went whole
    assert h.core.high_watermark == 0 and h.producers.check(retry) is None  # forgotten


@run
async def test_deleted_and_recreated_topics_lose_their_replicas(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(*md.update(*topic()))
    await rm.produce(TOPIC, 0, checked(batch(b"old")), 1, 1000)
    old_dir = rm.partition(TOPIC, 0).log.dir  # type: ignore[union-attr]
    await rm.on_metadata_update(*md.update(RemoveTopicRecord(TID)))
    assert rm.partition(TOPIC, 0) is None and not old_dir.exists()
    assert rm.fetch(fp(0), -1, 0).error_code == 3
    await rm.on_metadata_update(*md.update(*topic(topic_id=TID2)))
    assert rm.partition(TOPIC, 0).log.log_end_offset == 0  # type: ignore[union-attr]
    # a broker that slept through a delete + recreate learns it from a snapshot
    await rm.produce(TOPIC, 0, checked(batch(b"x")), 1, 1000)
    md.update(RemoveTopicRecord(TID2))
    md.update(*topic(topic_id=TID))
    await rm.on_metadata_update(*md.snapshot())
    h = rm.partition(TOPIC, 0)
    assert h is not None and h.core.topic_id == TID and h.log.log_end_offset == 0


@run
async def test_topic_config_changes_reach_the_log(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(
        *md.update(*topic(), ConfigRecord(2, TOPIC, "retention.ms", "1234"))
    )
    assert rm.partition(TOPIC, 0).log.config.retention_ms == 1234  # type: ignore[union-attr]
    await rm.on_metadata_update(*md.update(ConfigRecord(2, TOPIC, "retention.ms", None)))
    assert rm.partition(TOPIC, 0).log.config.retention_ms == 604800000  # type: ignore[union-attr]
    # Broker-level configs (the cluster default, this broker's) change every log's
    # defaults at once; a topic override still wins.
    await rm.on_metadata_update(*md.update(ConfigRecord(4, "", "log.retention.ms", "777")))
    assert rm.partition(TOPIC, 0).log.config.retention_ms == 777  # type: ignore[union-attr]
    await rm.on_metadata_update(*md.update(ConfigRecord(4, "1", "log.segment.bytes", "4096")))
    cfg = rm.partition(TOPIC, 0).log.config  # type: ignore[union-attr]
    assert (cfg.retention_ms, cfg.segment_bytes) == (777, 4096)
    await rm.on_metadata_update(*md.update(ConfigRecord(2, TOPIC, "retention.ms", "5")))
    assert rm.partition(TOPIC, 0).log.config.retention_ms == 5  # type: ignore[union-attr]


# -- partition reassignment (KIP-455) ----------------------------------------------------------


@run
async def test_reassignment_adds_a_follower_and_the_removed_replica_deletes_its_log(
    tmp_path: Path,
) -> None:
    md = Metadata()
    rm1, rm2, rm3 = (manager(tmp_path, b) for b in (1, 2, 3))

    async def update(*records: Record) -> None:
        u = md.update(*records)
        for rm in (rm1, rm2, rm3):
            await rm.on_metadata_update(*u)

    await update(*topic(replicas=(1, 2)))
    await rm1.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)
    rm1.fetch(fp(1), 2, 0)
    old_dir = rm2.partition(TOPIC, 0).log.dir  # type: ignore[union-attr]
    assert rm3.partition(TOPIC, 0) is None
    # Moving from [1, 2] to [1, 3]: 3 is added and follows; 2 stays until completion.
    await update(
        PartitionChangeRecord(
            TID, 0, (1, 2), 1, 0, 1, replicas=(1, 3, 2), removing_replicas=(2,),
            adding_replicas=(3,),
        )
    )  # fmt: skip
    h3 = rm3.partition(TOPIC, 0)
    assert h3 is not None and not h3.core.is_leader and h3.log.dir.exists()
    h1 = rm1.partition(TOPIC, 0)
    assert h1 is not None and h1.core.replicas == (1, 3, 2)
    # The leader counts the adding replica: once it caught up, it may join the ISR.
    assert h1.core.maybe_expand_isr(3, 3) is None  # it has not fetched yet
    rm1.fetch(fp(1), 3, 0)
    proposal = h1.core.maybe_expand_isr(3, 3)
    assert proposal is not None and proposal.new_isr == (1, 2, 3)
    # Completion (the ISR grew): replicas [1, 3]; broker 2 deletes its copy.
    await update(
        PartitionChangeRecord(
            TID, 0, (1, 3), 1, 1, 2, replicas=(1, 3), removing_replicas=(), adding_replicas=()
        )
    )
    assert rm2.partition(TOPIC, 0) is None and not old_dir.exists()
    assert rm3.partition(TOPIC, 0) is not None and h1.core.replicas == (1, 3)
    assert rm1.fetch(fp(0, epoch=1), -1, 0).error_code == 0


@run
async def test_a_stray_replica_found_at_startup_is_deleted(tmp_path: Path) -> None:
    md = Metadata()
    rm3 = manager(tmp_path, 3)
    await rm3.on_metadata_update(*md.update(*topic(replicas=(1, 3))))
    stray_dir = rm3.partition(TOPIC, 0).log.dir  # type: ignore[union-attr]
    rm3.shutdown()
    # While broker 3 is down the partition moves to [1, 2] (3 never heard of it).
    md.update(PartitionChangeRecord(TID, 0, (1, 2), 1, 1, 1, replicas=(1, 2)))
    restarted = manager(tmp_path, 3)
    assert stray_dir.exists() and (TOPIC, 0) in restarted.log_manager.logs
    await restarted.on_metadata_update(*md.snapshot())
    assert not stray_dir.exists() and (TOPIC, 0) not in restarted.log_manager.logs
    assert restarted.partition(TOPIC, 0) is None


@run
async def test_a_snapshot_older_than_our_replicas_deletes_none_of_them(tmp_path: Path) -> None:
    """After a whole-cluster restart a lagging controller may serve a snapshot from before
    the topic existed: its word that our replica is stray must not delete live data
    (broker/stray_guard.py; the fault campaign lost acknowledged records this way)."""
    md = Metadata()
    md.update(
        *topic(name="other", replicas=(1, 2), topic_id="00000000-0000-0000-0000-0000000000aa")
    )
    stale = md.snapshot()  # before our topic
    rm3 = manager(tmp_path, 3)
    await rm3.on_metadata_update(*md.update(*topic(replicas=(3, 1), leader=3)))
    await rm3.produce(TOPIC, 0, checked(batch(b"a")), 1, 1000)
    kept_dir = rm3.partition(TOPIC, 0).log.dir  # type: ignore[union-attr]
    rm3.shutdown()
    restarted = manager(tmp_path, 3)
    await restarted.on_metadata_update(*stale)
    assert kept_dir.exists() and (TOPIC, 0) in restarted.log_manager.logs
    await restarted.on_metadata_update(*md.snapshot())  # the current one: still ours
    h = restarted.partition(TOPIC, 0)
    assert h is not None and h.log.log_end_offset == 1


def test_replication_quota_measures_a_rate_over_its_windows() -> None:
    q = ReplicationQuota(1000, window_ms=1000, windows=3)
    assert not q.is_exceeded(0)
    q.record(1000, 0)
    # Kafka's rule: at least windows - 1 whole windows have passed, so a burst after a
    # quiet spell is spread over them.
    assert q.rate(0) == 500 and not q.is_exceeded(0)
    q.record(2000, 500)  # the same sample (window)
    assert q.rate(500) == 1200 and q.is_exceeded(500)  # 3000 B over 0.5 s + 2 windows
    assert q.is_exceeded(2900)  # 3000 B over 2.9 s
    assert not q.is_exceeded(3000) and q.rate(3000) == 0  # the sample expired
    assert not ReplicationQuota(None).is_exceeded(0)


@run
async def test_a_replica_being_added_fetches_throttled_at_the_dynamic_rate(
    tmp_path: Path,
) -> None:
    md = Metadata()
    rm3 = manager(tmp_path, 3, **{"follower.replication.throttled.rate": "5000"})
    assert rm3.follower_quota.rate_bytes_per_s == 5000  # the static property
    await rm3.on_metadata_update(*md.update(*topic(replicas=(1, 3))))
    state = rm3.follower_fetch_state((TOPIC, 0))
    assert state is not None and not state.throttled  # a settled replica is not
    await rm3.on_metadata_update(
        *md.update(
            *topic(replicas=(1, 2), name="moving", topic_id=TID2),
            PartitionChangeRecord(
                TID2, 0, (1, 2), 1, 0, 1, replicas=(1, 3, 2), removing_replicas=(2,),
                adding_replicas=(3,),
            ),
            ConfigRecord(BROKER_RESOURCE, "", "follower.replication.throttled.rate", "700"),
        )
    )  # fmt: skip
    state = rm3.follower_fetch_state(("moving", 0))
    assert state is not None and state.throttled
    assert rm3.follower_quota.rate_bytes_per_s == 700  # the cluster-wide dynamic config
    await rm3.on_metadata_update(
        *md.update(ConfigRecord(BROKER_RESOURCE, "3", "follower.replication.throttled.rate", "9"))
    )
    assert rm3.follower_quota.rate_bytes_per_s == 9  # this broker's own wins
