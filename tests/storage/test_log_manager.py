"""LogManager: log dirs, start-up, crash recovery, checkpoints, retention, background work."""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from common.clock import SYSTEM_CLOCK
from storage.checkpoint import read_offsets
from storage.config import LogConfig
from storage.log import Log
from storage.log_manager import CLEAN_SHUTDOWN_FILE, LogDirError, LogManager, LogManagerConfig
from storage.record_batch import iter_batches
from storage.records import Record, build_batch, decode_batch
from storage.segment import LogSegment

RECOVERY = "recovery-point-offset-checkpoint"
LOG_START = "log-start-offset-checkpoint"
HW_FILE = "replication-offset-checkpoint"
SMALL_SEGMENTS = LogConfig(segment_bytes=400)  # about four 2-record batches per segment


class FakeClock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def append(log: Log, values: list[bytes], timestamp: int | None = None) -> None:
    records = [Record(v, b"key", timestamp=timestamp) for v in values]
    log.append_as_leader(build_batch(records, now_ms=timestamp), leader_epoch=0)


def append_batches(log: Log, n: int, prefix: str, timestamp: int | None = None) -> list[bytes]:
    """`n` batches of two records each; returns the values in offset order."""
    values = []
    for i in range(n):
        pair = [f"{prefix}-{i}-a".encode(), f"{prefix}-{i}-b".encode()]
        append(log, pair, timestamp)
        values += pair
    return values


def read_values(log: Log) -> list[bytes | None]:
    """Every record value from the log start to the LEO, checking the offsets are dense."""
    out: list[bytes | None] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20).read()
        views = list(iter_batches(data))
        assert views, f"nothing readable at {offset}"
        for view in views:
            for rec in decode_batch(view).records:
                if rec.offset >= offset:
                    assert rec.offset == log.log_start_offset + len(out)
                    out.append(rec.value)
            offset = view.last_offset + 1
    return out


def manager(
    dirs: list[Path],
    default_config: LogConfig | None = None,
    config: LogManagerConfig | None = None,
    clock: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
) -> LogManager:
    mgr = LogManager(dirs, default_config, config, clock=clock)
    mgr.startup()
    return mgr


@pytest.fixture
def dirs(tmp_path: Path) -> list[Path]:
    return [tmp_path / "d0", tmp_path / "d1", tmp_path / "d2"]


# -- placement and partition.metadata ----------------------------------------------------------


def test_new_logs_go_to_the_dir_with_the_fewest_partitions(dirs: list[Path]) -> None:
    mgr = manager(dirs)
    counts = dict.fromkeys(dirs, 0)
    for p in range(7):
        chosen = mgr.get_or_create_log("t", p).dir.parent
        assert counts[chosen] == min(counts.values()), (p, chosen, counts)
        counts[chosen] += 1
    assert sorted(counts.values()) == [2, 2, 3]
    assert mgr.get_or_create_log("t", 0) is mgr.get_log("t", 0)  # no second log


def test_placement_counts_partitions_found_at_startup(dirs: list[Path]) -> None:
    for p in range(3):
        Log(dirs[0] / f"old-{p}").close()
    Log(dirs[1] / "old-3").close()
    mgr = manager(dirs)
    assert len(mgr.logs) == 4
    assert mgr.get_or_create_log("new", 0).dir.parent == dirs[2]
    assert mgr.get_or_create_log("new", 1).dir.parent == dirs[1]
    assert mgr.get_or_create_log("new", 2).dir.parent in (dirs[1], dirs[2])


def test_partition_metadata_holds_the_topic_id_in_kafkas_format(dirs: list[Path]) -> None:
    topic_id = uuid.UUID("fbefff3e-1c2d-4b5a-9f00-0123456789ab")
    encoded = base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")
    assert len(encoded) == 22
    mgr = manager(dirs)
    log = mgr.get_or_create_log("orders", 0, topic_id=topic_id)
    text = (log.dir / "partition.metadata").read_text()
    assert text == f"version: 0\ntopic_id: {encoded}\n"
    assert mgr.topic_id("orders", 0) == topic_id
    plain = mgr.get_or_create_log("orders", 1)
    assert not (plain.dir / "partition.metadata").exists()
    assert mgr.topic_id("orders", 1) is None
    mgr.shutdown()
    assert manager(dirs).topic_id("orders", 0) == topic_id


# -- clean shutdown and restart ----------------------------------------------------------------


def test_the_marker_names_the_broker_epoch_for_the_next_registration(dirs: list[Path]) -> None:
    """KIP-966: a restart after a clean shutdown knows the epoch it ran with (sent as
    PreviousBrokerEpoch); after a crash (no marker, or one dir without it) it is -1."""
    first = manager(dirs)  # started
    assert first.previous_broker_epoch == -1  # never ran
    first.shutdown(broker_epoch=42)
    assert json.loads((dirs[0] / CLEAN_SHUTDOWN_FILE).read_text())["brokerEpoch"] == 42
    second = manager(dirs)  # started
    assert second.previous_broker_epoch == 42
    assert not (dirs[0] / CLEAN_SHUTDOWN_FILE).exists()  # a crash from here is unclean
    second.shutdown(broker_epoch=43)
    (dirs[1] / CLEAN_SHUTDOWN_FILE).unlink()
    third = manager(dirs)  # started
    assert third.previous_broker_epoch == -1
    third.shutdown()


def test_shutdown_writes_marker_and_checkpoints_in_kafkas_format(dirs: list[Path]) -> None:
    mgr = manager(dirs)
    logs = [mgr.get_or_create_log("t", p) for p in range(4)]  # d0, d1, d2, d0
    assert [lg.dir.parent for lg in logs] == [dirs[0], dirs[1], dirs[2], dirs[0]]
    for p, lg in enumerate(logs):
        append(lg, [b"v%d" % i for i in range(p + 3)])
    assert logs[3].delete_records_before(2)
    mgr.delete_log("t", 2)  # d2 now holds no partition
    mgr.shutdown()
    assert all((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)
    assert (dirs[0] / RECOVERY).read_text() == "0\n2\nt 0 3\nt 3 6\n"
    assert (dirs[0] / LOG_START).read_text() == "0\n2\nt 0 0\nt 3 2\n"
    assert (dirs[1] / RECOVERY).read_text() == "0\n1\nt 1 4\n"
    assert (dirs[1] / LOG_START).read_text() == "0\n1\nt 1 0\n"
    assert (dirs[2] / RECOVERY).read_text() == "0\n0\n"
    assert (dirs[2] / LOG_START).read_text() == "0\n0\n"


def test_startup_removes_the_marker_and_reports_it(dirs: list[Path]) -> None:
    mgr = manager(dirs)
    assert mgr.had_clean_shutdown == {d: False for d in dirs}
    mgr.shutdown()
    (dirs[1] / CLEAN_SHUTDOWN_FILE).unlink()  # as if this dir's marker never got written
    again = manager(dirs)
    assert again.had_clean_shutdown == {dirs[0]: True, dirs[1]: False, dirs[2]: True}
    assert not any((d / CLEAN_SHUTDOWN_FILE).exists() for d in dirs)


def test_clean_restart_reopens_logs_without_recovery(
    dirs: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    mgr = manager(dirs, SMALL_SEGMENTS)
    logs = {p: mgr.get_or_create_log("t", p) for p in range(3)}
    values = {p: append_batches(log, 6 + p, f"p{p}") for p, log in logs.items()}
    assert len(logs[0].segments) > 1
    logs[1].delete_records_before(5)  # a log start inside a segment
    before = {p: (log.log_end_offset, log.log_start_offset) for p, log in logs.items()}
    mgr.shutdown()

    def no_recovery(self: LogSegment, *args: object, **kwargs: object) -> int:
        raise AssertionError(f"{self} was recovered after a clean shutdown")

    monkeypatch.setattr(LogSegment, "recover", no_recovery)
    again = manager(dirs, SMALL_SEGMENTS)
    assert set(again.logs) == {("t", 0), ("t", 1), ("t", 2)}
    for p, (leo, start) in before.items():
        log = again.get_log("t", p)
        assert log is not None
        assert (log.log_end_offset, log.log_start_offset) == (leo, start)
        assert log.recovery_point == leo
        assert read_values(log) == values[p][start:]


# -- crash recovery ----------------------------------------------------------------------------

GARBAGE = {
    "text": b"this is not a record batch" * 4,
    "zeros": b"\x00" * 100,
    "huge length": b"\x00" * 8 + b"\x7f\xff\xff\xff" + b"\x01" * 60,
}


def copy_of_last_batch(log: Log, kind: str) -> bytes:
    """The last batch again: replayed as is, or at the next offset but torn or corrupt."""
    data = log.read(log.log_end_offset - 1, 1 << 20).read()
    batch = bytearray(list(iter_batches(data))[-1].memory())
    if kind == "replayed batch":
        return bytes(batch)  # valid CRC, but its offsets do not continue the segment
    batch[0:8] = log.log_end_offset.to_bytes(8, "big")
    if kind == "torn batch":
        return bytes(batch[:-5])
    batch[-1] ^= 0xFF  # "bad crc"
    return bytes(batch)


@pytest.mark.parametrize("checkpointed", [False, True], ids=["no-checkpoint", "checkpointed"])
@pytest.mark.parametrize("garbage", [*GARBAGE, "torn batch", "bad crc", "replayed batch"])
def test_crash_recovery_truncates_garbage_and_keeps_flushed_batches(
    dirs: list[Path], garbage: str, checkpointed: bool
) -> None:
    crashed = manager(dirs[:1], SMALL_SEGMENTS)
    log = crashed.get_or_create_log("t", 0)
    flushed = append_batches(log, 9, "flushed")
    log.flush()
    if checkpointed:
        crashed.checkpoint_recovery_points()
        crashed.checkpoint_log_start_offsets()
    unflushed = append_batches(log, 2, "late")
    assert len(log.segments) >= 3
    active = log.active_segment.log_path
    valid_size = active.stat().st_size
    assert valid_size > 0
    tail = GARBAGE[garbage] if garbage in GARBAGE else copy_of_last_batch(log, garbage)
    with open(active, "ab") as f:
        f.write(tail)
    # No shutdown(): the process died here.

    again = manager(dirs[:1], SMALL_SEGMENTS)
    assert again.had_clean_shutdown == {dirs[0]: False}
    recovered = again.get_log("t", 0)
    assert recovered is not None
    assert active.stat().st_size == valid_size
    assert recovered.log_end_offset == len(flushed) + len(unflushed)
    # What was flushed survives; the rest was in the page cache, so it is whole too.
    assert read_values(recovered) == flushed + unflushed
    append(recovered, [b"after"])
    assert read_values(recovered)[-1] == b"after"
    assert recovered.log_end_offset == len(flushed) + len(unflushed) + 1


@pytest.mark.parametrize("crash", [False, True], ids=["clean", "crash"])
def test_corrupt_checkpoint_files_do_not_stop_startup_or_lose_data(
    dirs: list[Path], crash: bool
) -> None:
    mgr = manager(dirs[:1], SMALL_SEGMENTS)
    log = mgr.get_or_create_log("t", 0)
    values = append_batches(log, 8, "v")
    leo = log.log_end_offset
    if crash:
        log.flush()
        mgr.checkpoint_recovery_points()
        mgr.checkpoint_log_start_offsets()
        with open(log.active_segment.log_path, "ab") as f:
            f.write(b"junk" * 30)
    else:
        mgr.shutdown()
    (dirs[0] / RECOVERY).write_text("0\n7\nthis is\nnot a checkpoint\n")
    (dirs[0] / LOG_START).write_bytes(b"\xff\xfe garbage")
    again = manager(dirs[:1], SMALL_SEGMENTS)
    assert again.had_clean_shutdown == {dirs[0]: not crash}
    reopened = again.get_log("t", 0)
    assert reopened is not None
    assert (reopened.log_end_offset, reopened.log_start_offset) == (leo, 0)
    assert read_values(reopened) == values
    again.shutdown()
    assert read_offsets(dirs[0] / RECOVERY) == {("t", 0): leo}  # rewritten whole


# -- layout errors and leftovers ---------------------------------------------------------------


def test_the_same_partition_in_two_log_dirs_is_refused(dirs: list[Path]) -> None:
    mgr = manager(dirs[:1])
    append(mgr.get_or_create_log("t", 3), [b"v"])
    mgr.shutdown()
    shutil.copytree(dirs[0] / "t-3", dirs[1] / "t-3")
    with pytest.raises(LogDirError, match="t-3"):
        LogManager(dirs[:2]).startup()


def test_a_leftover_delete_directory_is_removed_at_startup(dirs: list[Path]) -> None:
    mgr = manager(dirs[:1])
    append(mgr.get_or_create_log("t", 0), [b"keep"])
    mgr.shutdown()
    leftover = dirs[0] / f"t-1.{uuid.uuid4().hex}-delete"
    leftover.mkdir()
    (leftover / "00000000000000000000.log").write_bytes(b"old data")
    again = manager(dirs[:1])
    assert not leftover.exists()
    assert set(again.logs) == {("t", 0)}
    kept = again.get_log("t", 0)
    assert kept is not None and read_values(kept) == [b"keep"]


def test_delete_log_removes_the_directory_and_the_log(dirs: list[Path]) -> None:
    mgr = manager(dirs[:2])
    path = mgr.get_or_create_log("t", 0).dir
    append(mgr.get_or_create_log("t", 1), [b"c"])
    append(mgr.get_or_create_log("t", 0), [b"a", b"b"])
    assert mgr.delete_log("t", 0)
    assert not path.exists()
    assert [p.name for p in path.parent.iterdir() if p.is_dir()] == []  # no -delete left
    assert mgr.get_log("t", 0) is None and ("t", 0) not in mgr.logs
    assert not mgr.delete_log("t", 0)
    mgr.shutdown()
    again = manager(dirs[:2])
    assert set(again.logs) == {("t", 1)}
    assert read_offsets(path.parent / RECOVERY) == {}


# -- high watermarks ---------------------------------------------------------------------------


def test_high_watermarks_round_trip(dirs: list[Path]) -> None:
    mgr = manager(dirs[:2])
    for p in (0, 1):
        mgr.get_or_create_log("t", p)
    mgr.write_high_watermarks({("t", 0): 2, ("t", 1): 4, ("unknown", 0): 9})
    assert (dirs[0] / HW_FILE).read_text() == "0\n1\nt 0 2\n"
    assert (dirs[1] / HW_FILE).read_text() == "0\n1\nt 1 4\n"
    assert mgr.read_high_watermarks() == {("t", 0): 2, ("t", 1): 4}
    mgr.write_high_watermarks({("t", 0): 3, ("t", 1): 4})
    mgr.shutdown()
    again = manager(dirs[:2])
    assert again.read_high_watermarks() == {("t", 0): 3, ("t", 1): 4}
    (dirs[0] / HW_FILE).write_text("garbage")  # a corrupt file reads as empty
    assert again.read_high_watermarks() == {("t", 1): 4}


# -- retention ---------------------------------------------------------------------------------

RETENTION_MS = 1000
OLD_TS = 5000


def retention_setup(dirs: list[Path]) -> tuple[LogManager, FakeClock, Log, Log]:
    """Two logs of four one-batch segments: offsets [0,2) [2,4) [4,6) [6,8)."""
    clock = FakeClock(OLD_TS)
    mgr = manager(dirs[:1], clock=clock)
    cfg = LogConfig(retention_ms=RETENTION_MS)
    old = mgr.get_or_create_log("old", 0, cfg)
    new = mgr.get_or_create_log("new", 0, cfg)
    for log, ts in ((old, OLD_TS), (new, OLD_TS + 5000)):
        for i in range(4):
            if i:
                log.roll()
            append(log, [b"%d-a" % i, b"%d-b" % i], timestamp=ts)
        assert [s.base_offset for s in log.segments] == [0, 2, 4, 6]
    return mgr, clock, old, new


def test_retention_uses_the_injected_clock(dirs: list[Path]) -> None:
    mgr, clock, old, new = retention_setup(dirs)
    clock.now = OLD_TS + RETENTION_MS  # exactly at the limit: kept (Kafka uses >)
    assert mgr.cleanup_logs() == 0
    assert len(old.segments) == 4
    clock.now = OLD_TS + RETENTION_MS + 1
    assert mgr.cleanup_logs(lambda tp: 4) == 2
    assert [s.base_offset for s in old.segments] == [4, 6]
    assert old.log_start_offset == 4
    assert read_values(old) == [b"2-a", b"2-b", b"3-a", b"3-b"]
    assert [s.base_offset for s in new.segments] == [0, 2, 4, 6]  # too young


@pytest.mark.parametrize("hw", [0, 1, 2, 3, 5, 7, 8, None])
def test_retention_never_deletes_segments_at_or_above_the_high_watermark(
    dirs: list[Path], hw: int | None
) -> None:
    mgr, clock, old, new = retention_setup(dirs)
    clock.now = OLD_TS + 10 * RETENTION_MS  # everything has expired
    mgr.cleanup_logs(lambda tp: hw)  # None: bounded by the LEO
    bound = 8 if hw is None else hw
    everything = [b"%d-%s" % (i, ab) for i in range(4) for ab in (b"a", b"b")]
    expected_start = bound - bound % 2  # the segment holding the HW stays
    for log in (old, new):
        assert log.log_start_offset == expected_start
        assert all(s.base_offset + 2 > bound or s.size == 0 for s in log.segments)
        assert read_values(log) == everything[expected_start:]
        append(log, [b"next"], timestamp=clock.now)
        assert read_values(log) == [*everything[expected_start:], b"next"]


# -- background work ---------------------------------------------------------------------------

FAST = LogManagerConfig(
    flush_check_interval_ms=10, retention_check_interval_ms=10, checkpoint_interval_ms=10
)


async def wait_for(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "condition not reached before the deadline"
        await asyncio.sleep(0.01)


def test_run_flushes_rolled_segments_and_writes_checkpoints(dirs: list[Path]) -> None:
    mgr = manager(dirs[:1], SMALL_SEGMENTS, FAST)
    log = mgr.get_or_create_log("t", 0)
    values = append_batches(log, 10, "v")
    log.delete_records_before(3)
    active_base = log.active_segment.base_offset
    assert active_base > 0 and log.recovery_point == 0
    assert not (dirs[0] / RECOVERY).exists()

    def done() -> bool:
        return (
            log.recovery_point == active_base
            and read_offsets(dirs[0] / RECOVERY) == {("t", 0): active_base}
            and read_offsets(dirs[0] / LOG_START) == {("t", 0): 3}
        )

    async def scenario() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(mgr.run(stop))
        try:
            await wait_for(done)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
        assert task.done() and task.exception() is None

    asyncio.run(scenario())
    assert log.recovery_point == active_base  # the active segment is left to flush.ms
    assert read_values(log) == values[3:]  # retention (7 days) left the fresh data alone


def test_checkpoints_survive_a_log_deleted_while_they_run(tmp_path: Path) -> None:
    """Maintenance runs in a worker thread: a deletion landing mid-checkpoint must not
    raise (it stopped the background task with a KeyError)."""
    mgr = LogManager([tmp_path / "d"])
    mgr.startup()
    first = mgr.get_or_create_log("t", 0)
    mgr.get_or_create_log("t", 1)

    def value(lg: Log) -> int:
        if lg is first:
            mgr.delete_log("t", 1)
        return lg.recovery_point

    assert mgr._by_dir(value) == {tmp_path / "d": {("t", 0): 0}}
