"""A log the LogManager creates in a new directory skips recovery and the fsyncs of its
first partition.metadata and leader-epoch-checkpoint writes (10,000 new partitions must
not cost 100,000 fsyncs). A crash may then lose or tear those files: reopening must
rewrite or rebuild them, never trust a stale one."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from storage.checkpoint import LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA
from storage.log import Log
from storage.log_manager import LogManager
from storage.records import Record, build_batch

TID = uuid.UUID(int=7)


def _batch(n: int = 3) -> bytes:
    return build_batch([Record(key=b"k", value=f"v{i}".encode(), headers=()) for i in range(n)])


def test_new_log_writes_no_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd)))
    lm = LogManager([tmp_path])
    lm.startup()
    lg = lm.get_or_create_log("t", 0, None, TID)
    lg.leader_epoch_cache.assign(0, 0)  # the first epoch of a new leader
    assert calls == []
    assert lm.topic_id("t", 0) == TID
    # Later writes are durable again.
    lg.leader_epoch_cache.assign(1, 0)
    assert calls


@pytest.mark.parametrize("damage", ["missing", "empty", "torn"])
def test_lost_first_files_are_rebuilt(tmp_path: Path, damage: str) -> None:
    lm = LogManager([tmp_path])
    lm.startup()
    lg = lm.get_or_create_log("t", 0, None, TID)
    lg.leader_epoch_cache.assign(3, 0)
    lg.append_as_leader(_batch(), leader_epoch=3)
    lg.flush()
    lg.close()
    # What a crash may leave of files written without fsync.
    for name in (LEADER_EPOCH_CHECKPOINT, PARTITION_METADATA):
        path = lg.dir / name
        if damage == "missing":
            path.unlink()
        elif damage == "empty":
            path.write_text("")
        else:
            path.write_text(path.read_text()[:3])
    reopened = Log(lg.dir, recovery_point=lg.log_end_offset)
    # The epoch cache came back from the batches, not from the damaged file.
    assert [(e.epoch, e.start_offset) for e in reopened.leader_epoch_cache.entries] == [(3, 0)]
    assert reopened.log_end_offset == 3
    reopened.close()


def test_existing_directory_is_not_fresh(tmp_path: Path) -> None:
    """A directory already on disk (e.g. left by a deletion cut short) is recovered as
    any other log, not trusted as empty."""
    first = Log(tmp_path / "t-0")
    first.append_as_leader(_batch(), leader_epoch=0)
    first.close()
    lm = LogManager([tmp_path])
    lm.get_or_create_log("t", 0)  # not loaded by startup: created over the directory
    assert lm.get_log("t", 0).log_end_offset == 3
