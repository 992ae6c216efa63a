"""Log compaction (storage/cleaner.py): what survives, how reads cross the gaps, tombstones,
the cleanable range, replication and recovery of a compacted log, the policy and
dirty-ratio rules, and the LogManager's cleaner. Real files in tmp_path; a fake clock.
Crash safety: test_log_cleaner_crash.py; the property test: test_log_cleaner_stateful.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, read_offsets
from storage.cleaner import clean_log, plan_cleaning
from storage.compression import Compression
from storage.config import LogConfig
from storage.log import Log
from storage.log_manager import LogManager, LogManagerConfig
from storage.record_batch import DELETE_HORIZON_MASK, iter_batches, validate_records
from storage.records import decode_batch
from storage.segment import LogSegment
from tests.harness.compaction import (
    T0,
    Clock,
    Rec,
    append,
    clean,
    compact_config,
    latest,
    new_log,
    pairs_for,
    read_all,
)

DAY = 86_400_000


def check_compacted(before: list[Rec], after: list[Rec], bound: int) -> None:
    """Below `bound`: exactly the latest record of each key, offsets and values as they
    were; at or above it: everything unchanged. Offsets strictly increase."""
    offsets = [o for o, _k, _v in after]
    assert offsets == sorted(set(offsets))
    last_below = {k: o for o, k, _v in before if o < bound and k is not None}
    expected = [r for r in before if r[0] >= bound or last_below.get(r[1]) == r[0]]
    assert after == expected


# -- what survives ----------------------------------------------------------------------------


def test_latest_value_per_key_survives_with_its_offset_and_value(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, pairs_for(300, keys=10), per_batch=3)
    before = read_all(log)
    stats = clean(log)
    bound = log.active_segment.base_offset
    assert stats.completed and stats.end_offset == bound == log.cleaner_checkpoint
    check_compacted(before, read_all(log), bound)
    assert latest(read_all(log)) == latest(before)
    assert stats.records_removed == len(before) - len(read_all(log))
    assert stats.bytes_after < stats.bytes_read
    assert (log.log_start_offset, log.log_end_offset) == (0, 300)


def test_batches_keep_their_offsets_and_producer_fields(tmp_path: Path) -> None:
    """Kafka's rebuilt batch keeps base and last offsets, producer id/epoch/sequence,
    leader epoch and codec, so producer state survives compaction."""
    log = new_log(tmp_path, compact_config(segment_bytes=4096))
    append(
        log,
        [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")],
        per_batch=3,
        epoch=7,
        producer_id=42,
        producer_epoch=3,
        base_sequence=10,
        codec=Compression.LZ4,
    )
    append(log, [(b"c", b"4"), (b"d", b"5")], per_batch=2, epoch=7)
    append(log, [(b"d", b"6")], epoch=7)
    log.roll()
    append(log, [(b"e", b"7")], epoch=7)
    clean(log)
    first, second, *_ = iter_batches(log.read(0, 1 << 20).read())
    assert (first.base_offset, first.last_offset, first.record_count) == (0, 2, 2)
    assert (first.producer_id, first.producer_epoch, first.base_sequence) == (42, 3, 10)
    assert (first.partition_leader_epoch, first.compression) == (7, Compression.LZ4)
    assert [(r.offset, r.value) for r in decode_batch(first).records] == [(1, b"2"), (2, b"3")]
    # Its last record went, yet the batch still ends at offset 4 (the producer's sequence).
    assert (second.base_offset, second.last_offset, second.record_count) == (3, 4, 1)


def test_records_without_a_key_are_dropped(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, [(None, b"x"), (b"k", b"1"), (None, b"y"), (b"k", b"2")] * 20, per_batch=2)
    log.roll()
    before = read_all(log)
    stats = clean(log)
    after = read_all(log)
    assert [r for r in after if r[1] is None] == []
    assert after == [r for r in before if r[1] == b"k"][-1:]
    assert stats.keyless_removed == 40


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_compressed_batches_are_rebuilt_with_their_codec(
    tmp_path: Path, codec: Compression
) -> None:
    log = new_log(tmp_path, compact_config(segment_bytes=2048))
    append(log, pairs_for(120, keys=7), per_batch=6, codec=codec)
    log.roll()
    before = read_all(log)
    clean(log)
    check_compacted(before, read_all(log), log.log_end_offset)
    for v in validate_records(log.read(0, 1 << 20).read(), compacted=True):  # CRCs hold
        assert v.compression == codec


def test_a_batch_that_keeps_every_record_is_copied_byte_for_byte(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, [(b"a", b"1"), (b"b", b"2")], per_batch=2)
    untouched = log.read(0, 1 << 20).read()
    append(log, [(b"c", b"3"), (b"c", b"4")])
    log.roll()
    clean(log)
    assert log.read(0, 1 << 20).read().startswith(untouched)
    assert [v for _o, _k, v in read_all(log)] == [b"1", b"2", b"4"]


# -- reads across gaps -------------------------------------------------------------------------


def test_reads_at_a_cleaned_offset_return_the_next_batch(tmp_path: Path) -> None:
    log = new_log(tmp_path, compact_config(index_interval_bytes=0))
    append(log, pairs_for(200, keys=5), per_batch=2)
    clean(log)
    after = read_all(log)
    for offset in range(log.log_start_offset, log.log_end_offset):
        first = next(iter_batches(log.read(offset, 1).read()), None)
        following = [r for r in after if r[0] >= offset]
        assert first is not None and first.last_offset >= offset
        got = [
            (r.offset, r.key, r.value) for r in decode_batch(first).records if r.offset >= offset
        ]
        assert got == following[: len(got)] and got, offset
        assert read_all(log, offset, max_bytes=1) == following
    # A read bounded by a max offset (the HW) inside a gap stops before it.
    hw = after[1][0] + 1 if after[1][0] + 1 not in {o for o, _k, _v in after} else after[1][0]
    bounded = list(iter_batches(log.read(0, 1 << 20, max_offset=hw).read()))
    assert all(v.base_offset < hw for v in bounded)


def test_timestamp_lookups_work_after_cleaning(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, pairs_for(100, keys=4), per_batch=1)
    clean(log)
    survivors = read_all(log)
    found = log.offset_for_timestamp(T0 + 50)
    assert found is not None
    assert found.offset == min(o for o, _k, _v in survivors if o >= 50)


# -- tombstones --------------------------------------------------------------------------------


def test_tombstones_survive_delete_retention_after_the_first_pass(tmp_path: Path) -> None:
    cfg = compact_config(delete_retention_ms=DAY)
    log = new_log(tmp_path, cfg)
    append(log, [(b"gone", b"1"), (b"stay", b"2"), (b"gone", b"3")])
    append(log, [(b"gone", None)])
    log.roll()
    clean(log, now=T0)
    assert read_all(log) == [(1, b"stay", b"2"), (3, b"gone", None)]
    horizon_batch = [v for v in iter_batches(log.read(3, 1 << 20).read())][0]
    assert horizon_batch.attributes & DELETE_HORIZON_MASK
    assert horizon_batch.base_timestamp == T0 + DAY  # KIP-534: the horizon in the header
    assert [r.timestamp for r in decode_batch(horizon_batch).records] == [T0]  # unchanged
    # Passes before the horizon keep it; the first pass after it removes it.
    for now, kept in ((T0 + DAY - 1, True), (T0 + DAY, False)):
        append(log, [(b"other", b"x")])
        log.roll()
        stats = clean(log, now=now)
        assert ((3, b"gone", None) in read_all(log)) == kept
    assert stats.tombstones_removed == 1
    assert b"gone" not in latest(read_all(log))


def test_a_tombstone_at_the_end_of_the_range_keeps_the_segments_contiguous(
    tmp_path: Path,
) -> None:
    """The range's final batch holds only an expired tombstone: kept whole, so the cleaned
    segment still ends where the next begins and a full recovery keeps everything."""
    cfg = compact_config(delete_retention_ms=0)
    log = new_log(tmp_path, cfg)
    append(log, [(b"a", b"1"), (b"b", b"2"), (b"b", None)])
    log.roll()
    append(log, [(b"c", b"3")])
    clean(log, now=T0)  # keeps the tombstone and stamps its horizon (T0)
    # A lost cleaner checkpoint: the next pass maps the whole range again.
    stats = clean_log(plan_cleaning(log, None, None, T0 + 1), T0 + 1)
    assert stats.completed
    assert read_all(log) == [(0, b"a", b"1"), (2, b"b", None), (3, b"c", b"3")]
    segs = log.segments
    assert segs[0].next_offset() == segs[1].base_offset == 3
    log.roll()
    stats = clean(log, now=T0 + 1)  # no longer the final batch: now it goes
    assert stats.completed and stats.tombstones_removed == 1
    before = read_all(log)
    assert before == [(0, b"a", b"1"), (3, b"c", b"3")]
    log.close()
    reopened = Log(log.dir, cfg, recovery_point=0, had_clean_shutdown=False, clock=Clock())
    assert read_all(reopened) == before


# -- the cleanable range -----------------------------------------------------------------------


def test_active_segment_and_records_at_or_above_the_hw_are_untouched(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, pairs_for(200, keys=3), per_batch=2)
    segs = log.segments
    hw = segs[-3].base_offset + 3  # inside the third segment from the end
    files_before = {s.base_offset: s.log_path.read_bytes() for s in segs[-3:]}
    before = read_all(log)
    stats = clean(log, upper_bound=hw)
    # Kafka rounds the bound down to the base of the segment that holds it.
    assert stats.end_offset == segs[-3].base_offset
    for base, data in files_before.items():
        assert (log.dir / f"{base:020d}.log").read_bytes() == data
    check_compacted(before, read_all(log), segs[-3].base_offset)


def test_min_compaction_lag_keeps_young_segments_dirty(tmp_path: Path) -> None:
    clock = Clock()
    log = new_log(tmp_path, compact_config(min_compaction_lag_ms=1000), clock)
    append(log, pairs_for(60, keys=3), per_batch=2)  # record timestamps T0..T0+59
    plan = plan_cleaning(log, None, None, now_ms=T0 + 1000 + 30)
    # Segments whose newest record is younger than the lag are not cleanable.
    young = [s for s in log.segments[:-1] if s.max_timestamp_so_far > T0 + 30]
    assert young and plan.first_uncleanable_offset == young[0].base_offset
    assert plan_cleaning(log, None, None, now_ms=T0 + 10**6).first_uncleanable_offset == (
        log.active_segment.base_offset
    )


def test_dirty_ratio_gates_cleaning_and_the_checkpoint_moves(tmp_path: Path) -> None:
    log = new_log(tmp_path, compact_config(min_cleanable_dirty_ratio=0.5))
    append(log, pairs_for(100, keys=50), per_batch=2)
    plan = plan_cleaning(log, log.cleaner_checkpoint, None, T0)
    assert plan.cleanable_ratio == 1.0 and plan.needs_cleaning
    clean_log(plan, T0)
    assert log.cleaner_checkpoint == plan.first_uncleanable_offset
    after = plan_cleaning(log, log.cleaner_checkpoint, None, T0)
    assert after.cleanable_bytes == 0 and not after.needs_cleaning
    # Dirty bytes must exceed half the cleanable log (Kafka: strictly above the ratio).
    while True:
        append(log, pairs_for(4, keys=50, offset=1000))
        plan = plan_cleaning(log, log.cleaner_checkpoint, None, T0)
        assert plan.needs_cleaning == (plan.cleanable_ratio > 0.5)
        if plan.needs_cleaning:
            break
    assert 0 < plan.clean_bytes < plan.cleanable_bytes


def test_max_compaction_lag_forces_a_clean_below_the_ratio(tmp_path: Path) -> None:
    log = new_log(
        tmp_path, compact_config(min_cleanable_dirty_ratio=1.0, max_compaction_lag_ms=DAY)
    )
    append(log, pairs_for(50, keys=5), per_batch=2)
    assert not plan_cleaning(log, None, None, T0 + DAY).needs_cleaning
    late = plan_cleaning(log, None, None, T0 + DAY + 10)
    assert late.needs_cleaning and late.max_compaction_delay_ms > 0


@pytest.mark.parametrize("when", ["before the pass", "before the swap"])
def test_a_log_truncated_under_the_pass_keeps_the_truncation(tmp_path: Path, when: str) -> None:
    """A follower's truncation while the cleaner works, inside the last planned segment
    (which stays, shorter): what the cleaner read of it must not come back."""
    log = new_log(tmp_path)
    append(log, pairs_for(100, keys=5), per_batch=2)
    plan = plan_cleaning(log, None, None, T0)
    last = plan.segments[-1][0]
    target = last.base_offset + 4
    if when == "before the pass":
        log.truncate_to(target)
    else:
        real = log.replace_segments

        def truncating(old: list[tuple[LogSegment, int]], new: LogSegment) -> bool:
            if any(seg is last for seg, _ in old):
                log.truncate_to(target)
            return real(old, new)

        log.replace_segments = truncating  # type: ignore[method-assign]
    before = read_all(log)
    stats = clean_log(plan, T0)
    assert not stats.completed and log.cleaner_checkpoint is None
    assert log.log_end_offset == target
    assert set(read_all(log)) <= set(before) and latest(read_all(log)) == latest(
        [r for r in before if r[0] < target]
    )
    assert not [p for p in log.dir.iterdir() if p.name.endswith((".cleaned", ".swap"))]
    after = read_all(log)
    log.close()
    reopened = Log(log.dir, log.config, clock=Clock())
    assert read_all(reopened) == after and reopened.log_end_offset == target


# -- policy ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("policy", "deletes"), [("compact", False), ("compact,delete", True)])
def test_compact_alone_stops_time_and_size_retention(
    tmp_path: Path, policy: str, deletes: bool
) -> None:
    clock = Clock(T0 + 10 * DAY)
    cfg = compact_config(cleanup_policy=policy, retention_ms=1000, retention_bytes=100)
    log = new_log(tmp_path, cfg, clock)
    append(log, pairs_for(100, keys=5))
    segments = len(log.segments)
    assert (log.delete_old_segments() > 0) == deletes
    assert (len(log.segments) < segments) == deletes
    if not deletes:  # only the log start offset (DeleteRecords) removes segments then
        log.delete_records_before(log.segments[1].base_offset)
        assert len(log.segments) == segments - 1


# -- replication and recovery ------------------------------------------------------------------


def test_a_follower_replicates_a_compacted_leader_across_the_gaps(tmp_path: Path) -> None:
    """Kafka accepts a follower append whose base offset is above the LEO; compacted
    batches hold fewer records than their offset range."""
    leader = Log(tmp_path / "leader" / "t-0", compact_config(), clock=Clock())
    append(leader, pairs_for(150, keys=4), per_batch=3, epoch=2)
    clean(leader)
    follower = Log(tmp_path / "follower" / "t-0", LogConfig(), clock=Clock())
    while follower.log_end_offset < leader.log_end_offset:
        chunk = leader.read(follower.log_end_offset, 300).read()
        info = follower.append_as_follower(chunk)
        assert info is not None
    assert read_all(follower) == read_all(leader)
    # The follower's epoch starts at the first batch it got (the leader's first went).
    assert follower.leader_epoch_cache.latest_epoch == 2
    follower.close()
    again = Log(follower.dir, LogConfig(), recovery_point=0, clock=Clock())  # full rescan
    assert read_all(again) == read_all(leader)


def test_a_cleaned_log_survives_a_full_recovery(tmp_path: Path) -> None:
    log = new_log(tmp_path)
    append(log, pairs_for(300, keys=6), per_batch=3)
    clean(log)
    append(log, pairs_for(100, keys=6, offset=300), per_batch=2)
    log.roll()
    clean(log)
    before, leo = read_all(log), log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    for index in log.dir.glob("*.index"):  # lost indexes force a rescan of everything
        index.unlink()
    reopened = Log(log.dir, log.config, recovery_point=0, clock=Clock())
    assert (read_all(reopened), reopened.log_end_offset) == (before, leo)
    assert [s.base_offset for s in reopened.segments] == bases


def test_segments_are_grouped_up_to_segment_bytes(tmp_path: Path) -> None:
    log = new_log(tmp_path, compact_config(segment_bytes=2048))
    append(log, pairs_for(400, keys=3), per_batch=2)
    n = len(log.segments)
    stats = clean(log)
    assert stats.segments_before == n - 1
    assert len(log.segments) < n
    for seg in log.segments[:-1]:
        assert seg.size <= 2048
    names = sorted(p.name for p in log.dir.glob("*.log"))
    assert names == [f"{s.base_offset:020d}.log" for s in log.segments]


def test_merging_unchanged_segments_moves_the_checkpoint(tmp_path: Path) -> None:
    """The property test's find: a group of segments that lost nothing is still merged,
    and the checkpoint was then checked against the segments it replaced."""
    log = new_log(tmp_path)
    append(log, [(b"a", b"1")])
    log.roll()
    append(log, [(b"b", b"2")])
    log.roll()
    stats = clean(log)
    assert stats.completed and log.cleaner_checkpoint == 2
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert read_all(log) == [(0, b"a", b"1"), (1, b"b", b"2")]


# -- the log manager ---------------------------------------------------------------------------


def test_log_manager_cleans_compacted_logs_and_checkpoints_the_first_dirty_offset(
    tmp_path: Path,
) -> None:
    clock = Clock()
    manager = LogManager([tmp_path], clock=clock)
    manager.startup()
    compacted = manager.get_or_create_log("offsets", 0, compact_config())
    plain = manager.get_or_create_log("plain", 0, LogConfig(segment_bytes=1024))
    for lg in (compacted, plain):
        append(lg, pairs_for(100, keys=3), per_batch=2)
    plain_bytes = read_all(plain)
    hws = {("offsets", 0): compacted.log_end_offset}
    results = manager.clean_compacted_logs(hws.get)
    assert [r.topic_partition for r in results] == [("offsets", 0)]
    assert read_all(plain) == plain_bytes  # cleanup.policy=delete: never compacted
    checkpoint = read_offsets(tmp_path / CLEANER_OFFSET_CHECKPOINT)
    assert checkpoint == {("offsets", 0): compacted.active_segment.base_offset}
    assert manager.clean_compacted_logs(hws.get) == []  # nothing dirty any more
    assert manager.clean_compacted_logs(lambda tp: None) == []  # unknown HW: skipped
    manager.shutdown()
    again = LogManager([tmp_path], clock=clock)
    again.startup({"offsets": compact_config()})
    reopened = again.get_log("offsets", 0)
    assert reopened is not None
    assert reopened.cleaner_checkpoint == checkpoint[("offsets", 0)]
    # A truncation below the checkpoint pulls it down (Kafka's maybeTruncateCheckpoint).
    reopened.truncate_to(10)
    assert reopened.cleaner_checkpoint == reopened.log_end_offset <= 10
    again.shutdown()


def test_log_manager_run_cleans_in_the_background_and_stops(tmp_path: Path) -> None:
    config = LogManagerConfig(cleaner_backoff_ms=10, retention_check_interval_ms=10**6)
    manager = LogManager([tmp_path], config=config)
    manager.startup()
    lg = manager.get_or_create_log("offsets", 0, compact_config())
    append(lg, pairs_for(100, keys=3), per_batch=2)
    expected = latest(read_all(lg))

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(manager.run(stop, lambda tp: lg.log_end_offset))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 30
        try:
            while lg.cleaner_checkpoint is None:  # waits on the worker thread, no timing
                assert loop.time() < deadline, "the cleaner never ran"
                await asyncio.sleep(0.01)
        finally:
            stop.set()
            await asyncio.wait_for(task, 30)

    asyncio.run(scenario())
    assert lg.cleaner_checkpoint == lg.active_segment.base_offset
    assert latest(read_all(lg)) == expected and len(read_all(lg)) < 100
    assert read_offsets(tmp_path / CLEANER_OFFSET_CHECKPOINT) == {
        ("offsets", 0): lg.cleaner_checkpoint
    }
    manager.shutdown()
