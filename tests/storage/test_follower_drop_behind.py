"""A follower's log lets the page cache go behind its end (LogSegment.drop_behind): the
advice never changes what the log holds, and truncation pulls its cursors back."""

from __future__ import annotations

from pathlib import Path

from storage.log import Log
from storage.record_batch import iter_batches
from storage.records import Record, build_batch, decode_batch

T0 = 1_700_000_000_000


def leader_batch_at(base: int, value: bytes) -> bytes:
    buf = bytearray(build_batch([Record(value=value, timestamp=T0)]))
    buf[0:8] = base.to_bytes(8, "big")
    return bytes(buf)


def first_value(log: Log, offset: int) -> bytes | None:
    view = next(iter_batches(log.read(offset, 1 << 20).read()))
    return decode_batch(view).records[0].value


def test_dropped_pages_read_back_whole(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", fresh=True, clock=lambda: T0)
    log.follower_page_cache_bytes = 1 << 20
    seg = log.active_segment
    values = [bytes([i % 251]) * 300_000 for i in range(80)]  # 24 MB: several 8 MiB steps
    for i, v in enumerate(values):
        log.append_as_follower(leader_batch_at(i, v))
    assert 0 < seg._dropped < seg._kicked < seg.size  # both steps ran, the tail is kept
    for i, v in enumerate(values):
        assert first_value(log, i) == v
    log.truncate_to(10)
    assert seg._kicked <= seg.size and seg._dropped <= seg.size
    log.append_as_follower(leader_batch_at(10, b"after"))
    assert first_value(log, 10) == b"after"
    log.close()


def test_off_keeps_everything(tmp_path: Path) -> None:
    log = Log(tmp_path / "t-0", fresh=True, clock=lambda: T0)
    log.follower_page_cache_bytes = 0
    for i in range(40):
        log.append_as_follower(leader_batch_at(i, b"x" * 300_000))
    seg = log.active_segment
    assert seg._kicked == seg._dropped == 0
    log.close()
