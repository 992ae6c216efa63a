"""Every failure the property tests or reviews found, frozen as a plain test, plus the
exact edges of retention that random search reaches only by luck."""

from __future__ import annotations

import os
from pathlib import Path

from storage.config import LogConfig
from storage.log import Log
from storage.record_batch import iter_batches, validate_records
from storage.records import Record, build_batch, decode_batch

T0 = 1_700_000_000_000


class Clock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def batch(value: bytes, ts: int = T0, n: int = 1) -> bytes:
    return build_batch([Record(value=value + b"%d" % i, timestamp=ts) for i in range(n)])


def leader_batch_at(base: int, value: bytes, epoch: int = 0, ts: int = T0) -> bytes:
    buf = bytearray(batch(value, ts))
    buf[0:8] = base.to_bytes(8, "big")
    buf[12:16] = epoch.to_bytes(4, "big")
    return bytes(buf)


def values(log: Log, start: int) -> list[bytes | None]:
    out = []
    offset = start
    while offset < log.log_end_offset:
        views = list(iter_batches(log.read(offset, 1 << 20).read()))
        for v in views:
            out += [r.value for r in decode_batch(v).records if r.offset >= offset]
        offset = views[-1].next_offset
    return out


def test_read_below_the_first_segment_reads_the_first_not_the_last(tmp_path: Path) -> None:
    """bisect gave -1 for an offset below the first segment's base (a follower's gap)."""
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append_as_follower(leader_batch_at(1, b"a"))
    log.roll()
    log.append_as_leader(batch(b"b"), 0)
    assert log.segments[0].base_offset == 0 and len(log.segments) == 2
    first = list(iter_batches(log.read(0, 1 << 20).read()))
    assert [v.base_offset for v in first] == [1]


def test_a_truncated_index_reaches_the_file(tmp_path: Path) -> None:
    """The index kept stale entries on disk after truncate_to, then served wrong positions."""
    cfg = LogConfig(index_interval_bytes=0)
    log = Log(tmp_path / "t-0", cfg, clock=Clock())
    for i in range(5):
        log.append_as_leader(batch(b"v%d-" % i), 0)
    log.close()
    log = Log(tmp_path / "t-0", cfg, had_clean_shutdown=True, clock=Clock())
    log.truncate_to(2)
    log.append_as_leader(batch(b"new", n=3), 0)
    log.roll()
    log.close()
    log = Log(tmp_path / "t-0", cfg, recovery_point=5, had_clean_shutdown=True, clock=Clock())
    assert values(log, 0) == [b"v0-0", b"v1-0", b"new0", b"new1", b"new2"]
    found = log.offset_for_timestamp(T0)
    assert found is not None and found.offset == 0


def test_a_rebuilt_index_reaches_the_file(tmp_path: Path) -> None:
    """After recovery reset an index, flush thought the old bytes were current."""
    cfg = LogConfig(index_interval_bytes=0)
    log = Log(tmp_path / "t-0", cfg, clock=Clock())
    log.append_as_leader(batch(b"a", ts=T0 + 5), 0)
    log.roll()
    del log  # crash: recovery rescans segment 0 and rewrites its time index
    log = Log(tmp_path / "t-0", cfg, clock=Clock())
    log.close()
    log = Log(tmp_path / "t-0", cfg, recovery_point=1, had_clean_shutdown=True, clock=Clock())
    assert log.segments[0].max_timestamp_so_far == T0 + 5
    found = log.offset_for_timestamp(T0)
    assert found is not None and (found.timestamp, found.offset) == (T0 + 5, 0)


def test_an_empty_epoch_checkpoint_is_not_rebuilt_from_the_log(tmp_path: Path) -> None:
    """A legitimately empty cache (all epochs truncated away) was refilled at open."""
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append_as_leader(batch(b"a"), 0)
    log.append_as_leader(batch(b"b"), 0)
    log.delete_records_before(1)
    log.truncate_to(1)
    assert log.leader_epoch_cache.entries == []
    log.close()
    log = Log(tmp_path / "t-0", log_start_offset=1, had_clean_shutdown=True, clock=Clock())
    assert log.leader_epoch_cache.entries == []


def test_a_lost_epoch_checkpoint_is_rebuilt_from_batch_headers(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append_as_leader(batch(b"a"), 3)
    log.append_as_leader(batch(b"b"), 5)
    log.close()
    (tmp_path / "t-0" / "leader-epoch-checkpoint").unlink()
    log = Log(tmp_path / "t-0", recovery_point=2, had_clean_shutdown=True, clock=Clock())
    assert [(e.epoch, e.start_offset) for e in log.leader_epoch_cache.entries] == [(3, 0), (5, 1)]


def test_a_rolled_segment_losing_its_tail_drops_everything_after(tmp_path: Path) -> None:
    """No torn batch shows this loss: only segment contiguity does."""
    log = Log(tmp_path / "t-0", clock=Clock())
    log.append_as_leader(batch(b"a"), 0)
    size_after_first = log.active_segment.size
    log.append_as_leader(batch(b"b"), 0)
    log.roll()
    log.append_as_leader(batch(b"c"), 0)
    first_segment = log.segments[0].log_path
    del log  # crash before anything was flushed; the first segment loses batch "b"
    os.truncate(first_segment, size_after_first)
    log = Log(tmp_path / "t-0", clock=Clock())
    assert log.log_end_offset == 1
    assert values(log, 0) == [b"a0"]
    assert len(log.segments) == 1


def test_follower_gap_rolls_keep_segments_contiguous(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(segment_bytes=200), clock=Clock())
    log.append_as_follower(leader_batch_at(0, b"a"))
    log.append_as_follower(leader_batch_at(7, b"b"))  # forces a roll: rolls at the LEO
    log.append_as_follower(leader_batch_at(20, b"c"))
    bases = [s.base_offset for s in log.segments]
    nexts = [s.next_offset() for s in log.segments]
    assert bases[1:] == nexts[:-1], (bases, nexts)


def test_retention_ms_boundary_is_exclusive(tmp_path: Path) -> None:
    """Kafka deletes a segment when now - its newest timestamp > retention.ms."""
    clock = Clock()
    log = Log(tmp_path / "t-0", LogConfig(retention_ms=1000), clock=clock)
    log.append_as_leader(batch(b"old", ts=T0), 0)
    log.roll()
    log.append_as_leader(batch(b"new", ts=T0 + 500), 0)
    clock.now = T0 + 1000
    assert log.delete_old_segments() == 0
    clock.now = T0 + 1001
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 1


def test_retention_never_passes_the_high_watermark(tmp_path: Path) -> None:
    clock = Clock()
    log = Log(tmp_path / "t-0", LogConfig(retention_ms=10), clock=clock)
    for v in (b"a", b"b", b"c"):
        log.append_as_leader(batch(v), 0)
        log.roll()
    clock.now = T0 + 10_000
    assert log.delete_old_segments(high_watermark=1) == 1
    assert log.log_start_offset == 1
    assert log.delete_old_segments(high_watermark=3) == 2
    assert log.log_start_offset == 3 and log.log_end_offset == 3


def test_retention_bytes_keeps_the_log_at_or_under_the_limit(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", LogConfig(retention_bytes=0), clock=Clock())
    log.append_as_leader(batch(b"a"), 0)
    size = log.active_segment.size
    log.roll()
    log.append_as_leader(batch(b"b"), 0)
    log.roll()
    log.close()
    log = Log(tmp_path / "t-0", LogConfig(retention_bytes=size), clock=Clock())
    # Deleting one segment brings the log to exactly the limit: that one goes, no more.
    assert log.delete_old_segments() == 1
    assert log.size_in_bytes == size


def test_one_append_of_many_batches_never_overfills_an_index(tmp_path: Path) -> None:
    """Found by the benchmark review: fullness was checked once per append."""
    cfg = LogConfig(segment_index_bytes=16, index_interval_bytes=0)  # 2 offset entries
    log = Log(tmp_path / "t-0", cfg, clock=Clock())
    for _ in range(4):
        log.append_as_leader(b"".join(batch(b"x%d" % i) for i in range(6)), 0)
    for seg in log.segments:
        assert seg.offset_index.entries <= seg.offset_index.max_entries
        assert seg.offset_index.path.stat().st_size <= 16 or seg is log.active_segment
    assert values(log, 0) == [b"x%d0" % i for i in range(6)] * 4


def test_log_append_time_stamps_batches_and_keeps_crc_valid(tmp_path: Path) -> None:
    clock = Clock(T0 + 99)
    log = Log(tmp_path / "t-0", LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append_as_leader(batch(b"a", ts=5, n=2), 0)
    assert info.log_append_time_ms == T0 + 99
    (view,) = validate_records(log.read(0, 1 << 20).read())  # its CRC holds
    assert view.is_log_append_time
    assert [r.timestamp for r in decode_batch(view).records] == [T0 + 99, T0 + 99]


def test_truncating_at_the_leo_drops_an_epoch_started_there(tmp_path: Path) -> None:
    """A leader that started epoch 1 at its LEO and appended nothing, then follows: the
    new leader's divergence answer truncates to the LEO, which removes no batch but must
    remove epoch 1 (found by tests/broker/test_replication_model.py; Kafka does the same)."""
    log = Log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a"), 0)
    log.leader_epoch_cache.assign(1, log.log_end_offset)
    assert log.latest_epoch == 1
    assert log.truncate_to(log.log_end_offset) is False
    assert log.latest_epoch == 0
    log.close()
    assert Log(tmp_path / "t-0").latest_epoch == 0


def test_truncating_an_empty_log_at_its_leo_drops_an_epoch_started_there(tmp_path: Path) -> None:
    """An empty log (start == LEO == 0) whose replica led epoch 1 without appending, then
    follows: the truncation to the LEO must drop epoch 1 too (found by the replication
    model: the follower named epoch 1 forever and never caught up). Kafka's truncateTo
    truncates the epoch cache at the LEO whatever the log holds."""
    log = Log(tmp_path / "t-0")
    log.leader_epoch_cache.assign(1, 0)
    assert log.truncate_to(0) is False
    assert log.latest_epoch == -1 and log.leader_epoch_cache.entries == []


def test_truncating_an_emptied_log_at_its_leo_drops_the_moved_epoch(tmp_path: Path) -> None:
    """All records deleted (start == LEO == 7): the entry moved to 7 goes too, as in
    Kafka (UnifiedLog.truncateTo); the next fetch names no epoch, which a leader does not
    check."""
    log = Log(tmp_path / "t-0")
    log.append_as_leader(batch(b"a", n=2), 0)
    log.append_as_leader(batch(b"b", n=5), 0)
    log.delete_records_before(7)
    assert log.truncate_to(7) is False
    assert log.leader_epoch_cache.entries == [] and log.log_start_offset == 7
