"""DeleteRecords' core logic through a real replica manager and real logs: the leader's
rules (-1 = HW, past the HW, the cleanup policy), the wait for the ISR's log start
offsets (the low watermark, fed by follower fetches), the follower moving its own start
from the leader's answer, and the checkpoint; plus the produce-side checks built beside
it (keys on compacted topics, record errors on the wire) and DescribeProducers' state.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.codec import encode_produce_response
from broker.fetcher import FollowerData
from broker.hosted import check_keys
from broker.partition import Partition
from broker.producer_state import BatchHeader, ProducerStateManager
from broker.record_deletion import delete_records
from broker.replica_manager import ReplicaManager
from broker.results import FetchPartition, ProduceResult, RecordError
from common.errors import Errors
from metadata_log.records import ConfigRecord
from storage.checkpoint import LOG_START_OFFSET_CHECKPOINT, read_offsets
from storage.log_manager import LogManager
from storage.record_batch import RecordBatchView
from storage.records import Record, build_batch
from tests.harness.raw_protocol import decode_response
from tests.harness.replicas import TOPIC, Metadata, batch, broker_config, checked, run, topic


def manager(tmp_path: Path, node_id: int = 1) -> ReplicaManager:
    cfg = broker_config(tmp_path, node_id)
    lm = LogManager(cfg.log_dirs, cfg.log_config, cfg.log_manager_config)
    lm.startup()
    return ReplicaManager(cfg, lm)


def follower_fetch(rm: ReplicaManager, replica: int, offset: int, log_start: int) -> int:
    """A follower's fetch at `offset` naming its log start; the log start it is told."""
    p = FetchPartition(TOPIC, 0, offset, 1 << 20, -1, -1, -1, log_start)
    r = rm.fetch(p, replica, 0)
    assert r.error_code == Errors.NONE, r
    return r.log_start_offset


async def leader_with_records(tmp_path: Path, n: int = 10) -> ReplicaManager:
    """Broker 1 leads orders-0 (ISR 1, 2, 3) holding n records, all replicated."""
    rm = manager(tmp_path)
    await rm.on_metadata_update(*Metadata().update(*topic(replicas=(1, 2, 3))))
    values = [b"v%d" % i for i in range(n)]
    assert (await rm.produce(TOPIC, 0, checked(batch(*values)), 1, 1000)).error_code == 0
    for replica in (2, 3):
        follower_fetch(rm, replica, n, 0)
    assert rm.high_watermark((TOPIC, 0)) == n
    return rm


def checkpointed(rm: ReplicaManager) -> dict[tuple[str, int], int]:
    return read_offsets(rm.log_manager.log_dirs[0] / LOG_START_OFFSET_CHECKPOINT)


# -- the low watermark --------------------------------------------------------------------------


def test_low_watermark_is_the_smallest_log_start_in_the_isr() -> None:
    core: Partition[object] = Partition(TOPIC, 0, "tid", 1)
    core.make_leader((1, 2, 3), (1, 2), 0, 0, 10, 0)
    assert core.low_watermark(5) == -1  # follower 2 has not fetched in this epoch
    core.on_follower_fetch(2, 10, 10, 1, log_start_offset=3)
    assert core.low_watermark(5) == 3
    core.on_follower_fetch(2, 10, 10, 2, log_start_offset=7)
    assert core.low_watermark(5) == 5  # ours is now the smallest
    core.on_follower_fetch(3, 10, 10, 3, log_start_offset=0)
    assert core.low_watermark(5) == 5  # 3 is not in the ISR: it does not hold deletion up


# -- DeleteRecords on the leader ----------------------------------------------------------------


@run
async def test_delete_waits_for_every_isr_replica_then_checkpoints(tmp_path: Path) -> None:
    rm = await leader_with_records(tmp_path)
    loop = asyncio.get_running_loop()
    task = asyncio.create_task(delete_records(rm, TOPIC, 0, 4, loop.time() + 10))
    h = rm.partition(TOPIC, 0)
    assert h is not None
    # The checkpoint is written in a thread: wait for it (under load it takes a while).
    deadline = loop.time() + 5
    while checkpointed(rm).get((TOPIC, 0)) != 4 and loop.time() < deadline:
        await asyncio.sleep(0.01)
    assert checkpointed(rm).get((TOPIC, 0)) == 4  # durable before any answer
    assert not task.done()  # followers still start at 0
    assert h.log.log_start_offset == 4
    assert follower_fetch(rm, 2, 10, 0) == 4  # the leader tells followers its start
    follower_fetch(rm, 2, 10, 4)
    await asyncio.sleep(0.05)
    assert not task.done()
    follower_fetch(rm, 3, 10, 4)  # the last ISR member: the fetch wakes the request
    result = await asyncio.wait_for(task, 5)
    assert (result.error_code, result.low_watermark) == (Errors.NONE, 4)
    # Consumers below the start are out of range; at it they read.
    below = rm.fetch(FetchPartition(TOPIC, 0, 3, 1 << 20), -1, 0)
    assert (below.error_code, below.log_start_offset) == (Errors.OFFSET_OUT_OF_RANGE, 4)
    assert rm.fetch(FetchPartition(TOPIC, 0, 4, 1 << 20), -1, 0).error_code == Errors.NONE
    assert rm.list_offset(TOPIC, 0, -2, -1).offset == 4
    assert rm.list_offset(TOPIC, 0, -4, -1).offset == 4  # earliest local: the same here
    assert rm.list_offset(TOPIC, 0, -5, -1).offset == -1  # latest tiered: nothing tiered


@run
async def test_delete_rules_on_the_leader(tmp_path: Path) -> None:
    rm = await leader_with_records(tmp_path)
    loop = asyncio.get_running_loop()

    async def delete(offset: int, wait_s: float = 5.0) -> tuple[int, int]:
        r = await delete_records(rm, TOPIC, 0, offset, loop.time() + wait_s)
        return r.error_code, r.low_watermark

    assert await delete(11) == (Errors.OFFSET_OUT_OF_RANGE, -1)  # past the HW (10)
    assert await delete(-7) == (Errors.OFFSET_OUT_OF_RANGE, -1)
    # -1: the high watermark; followers never follow here, so the wait times out.
    assert await delete(-1, 0.1) == (Errors.REQUEST_TIMED_OUT, -1)
    assert rm.partition(TOPIC, 0).log.log_start_offset == 10  # type: ignore[union-attr]
    missing = await delete_records(rm, "nope", 0, 1, loop.time() + 1)
    assert missing.error_code == Errors.UNKNOWN_TOPIC_OR_PARTITION


@run
async def test_delete_refused_on_compact_only_topics_and_followers(tmp_path: Path) -> None:
    md = Metadata()
    rm = manager(tmp_path)
    await rm.on_metadata_update(
        *md.update(*topic(), ConfigRecord(2, TOPIC, "cleanup.policy", "compact"))
    )
    loop = asyncio.get_running_loop()
    r = await delete_records(rm, TOPIC, 0, 0, loop.time() + 1)
    assert r.error_code == Errors.POLICY_VIOLATION
    follower = manager(tmp_path, node_id=2)
    await follower.on_metadata_update(*Metadata().update(*topic(replicas=(1, 2))))
    r = await delete_records(follower, TOPIC, 0, 0, loop.time() + 1)
    assert r.error_code == Errors.NOT_LEADER_OR_FOLLOWER


@run
async def test_a_follower_moves_its_log_start_with_the_leader_and_checkpoints(
    tmp_path: Path,
) -> None:
    rm = manager(tmp_path, node_id=2)
    await rm.on_metadata_update(*Metadata().update(*topic(replicas=(1, 2))))
    records = build_batch([Record(b"v%d" % i) for i in range(6)])
    sent = rm.follower_fetch_state((TOPIC, 0))
    assert sent is not None
    assert await rm.process_follower_data((TOPIC, 0), sent, FollowerData(0, 6, 0, records)) == 0
    sent = rm.follower_fetch_state((TOPIC, 0))
    assert sent is not None and sent.log_start_offset == 0
    await rm.process_follower_data((TOPIC, 0), sent, FollowerData(0, 6, 4, None))
    state = rm.follower_fetch_state((TOPIC, 0))
    assert state is not None and state.log_start_offset == 4  # named in its next fetch
    await rm.log_start_checkpointer.request()
    assert checkpointed(rm)[(TOPIC, 0)] == 4


# -- produce checks and DescribeProducers' state -----------------------------------------------


def test_keyless_records_on_a_compacted_topic_are_record_errors() -> None:
    records = build_batch([Record(b"1", key=b"a"), Record(b"2"), Record(b"3", key=b"c")])
    refused = check_keys(checked(records), "t-0")
    assert refused is not None and refused.error_code == Errors.INVALID_RECORD
    why = "Compacted topic cannot accept message without key in topic partition t-0"
    assert refused.record_errors == (RecordError(1, why),)
    assert refused.error_message == (
        "One or more records have been rejected due to 1 record errors in total, and only "
        f"showing the first three errors at most: [RecordError(batchIndex=1, message='{why}')]"
    )
    assert check_keys(checked(build_batch([Record(b"x", key=b"k")])), "t-0") is None


def test_produce_v8_plus_carries_record_errors() -> None:
    result = ProduceResult(
        Errors.INVALID_RECORD,
        error_message="bad",
        record_errors=(RecordError(1, "no key"), RecordError(3, None)),
    )
    for version in (8, 9):
        frame = encode_produce_response(version, 7, [("t", [(0, result)])])
        cid, resp = decode_response(0, version, frame[4:])
        part = resp.responses[0].partition_responses[0]
        assert cid == 7 and part.error_code == Errors.INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
            (1, "no key"),
            (3, None),
        ]
        assert part.error_message == "bad"


def test_producer_state_keeps_each_producers_last_timestamp() -> None:
    ps = ProducerStateManager()
    first = build_batch([Record(b"a", timestamp=100), Record(b"b", timestamp=300)],
                        producer_id=9, producer_epoch=1, base_sequence=0)  # fmt: skip
    later = build_batch([Record(b"c", timestamp=200)],
                        producer_id=9, producer_epoch=1, base_sequence=2)  # fmt: skip
    other = build_batch([Record(b"d", timestamp=50)],
                        producer_id=4, producer_epoch=0, base_sequence=0)  # fmt: skip
    for b in (first, later, other):
        ps.record([BatchHeader.of(RecordBatchView(b))], first_offset=0)
    got = [(pid, e.epoch, e.last_seq, e.last_timestamp) for pid, e in ps.active_producers()]
    assert got == [(4, 0, 0, 50), (9, 1, 2, 200)]
