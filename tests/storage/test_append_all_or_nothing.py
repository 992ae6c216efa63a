"""An append that fails part-way (a full disk) leaves nothing behind: the segment is cut
back to where it was, so a retry lands where the indexes say and every batch read back
has a good CRC. Found by the fault campaign's disk-full fault (seed 103): the torn bytes
stayed, the retry landed after them, followers refused the bad CRC and a consumer read a
record with an empty value."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest

import storage.segment
from storage.log import Log
from storage.record_batch import iter_batches, validate_batch
from storage.records import Record, build_batch


def _batch(value: str, seq: int = 0) -> bytearray:
    return bytearray(
        build_batch([Record(value.encode())], producer_id=7, producer_epoch=0, base_sequence=seq)
    )


def _offsets(log: Log) -> list[int]:
    data = log.read(0, 1 << 20).read()
    return [validate_batch(data, v.pos).base_offset for v in iter_batches(data)]  # CRC checked


def _half_then_enospc(fd: int, parts: Any) -> int:
    data = b"".join(bytes(p) for p in parts)
    os.write(fd, data[: len(data) // 2])  # the disk fills part-way through
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("follower", [False, True])
def test_a_write_failing_part_way_is_cut_off_and_the_retry_lands_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, follower: bool
) -> None:
    log = Log(tmp_path / "t-0", fresh=True)
    log.append_as_leader(_batch("a"), 0)
    size = log.size_in_bytes
    second = _batch("b", 1)
    if follower:  # the leader's bytes, offsets already assigned
        leader = Log(tmp_path / "leader-0", fresh=True)
        leader.append_as_leader(_batch("a"), 0)
        leader.append_as_leader(second, 0)
        second = bytearray(leader.read(1, 1 << 20).read())
        leader.close()
    monkeypatch.setattr(storage.segment.os, "writev", _half_then_enospc)
    with pytest.raises(OSError):
        if follower:
            log.append_as_follower(second)
        else:
            log.append_as_leader(second, 0)
    assert log.size_in_bytes == size and log.log_end_offset == 1
    assert os.path.getsize(log.active_segment.log_path) == size  # nothing torn left
    monkeypatch.undo()
    if follower:
        log.append_as_follower(second)
    else:
        log.append_as_leader(second, 0)  # the disk has room again
    assert _offsets(log) == [0, 1]
    log.close()
    again = Log(tmp_path / "t-0")  # and the files on disk say the same
    assert _offsets(again) == [0, 1]
    again.close()


def test_a_segment_that_cannot_be_cut_back_refuses_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log(tmp_path / "t-0", fresh=True)
    log.append_as_leader(_batch("a"), 0)
    monkeypatch.setattr(storage.segment.os, "writev", _half_then_enospc)

    def eio(fd: int, length: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(storage.segment.os, "ftruncate", eio)
    with pytest.raises(OSError):
        log.append_as_leader(_batch("b", 1), 0)
    monkeypatch.undo()
    with pytest.raises(OSError, match="unusable since a failed write"):
        log.append_as_leader(_batch("c", 1), 0)
    log.close()
