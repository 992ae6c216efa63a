"""The log start offset as DeleteRecords and restarts leave it: the retention pass
deletes every segment wholly below it whatever the cleanup policy (Kafka's
deleteLogStartOffsetBreachedSegments), and a log opened with a checkpointed start past
its first segment's base serves nothing below it."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.config import LogConfig
from storage.log import Log
from storage.log_types import OffsetOutOfRangeError
from storage.records import Record, build_batch


def fill(log: Log, n: int) -> None:
    for i in range(n):
        log.append_as_leader(build_batch([Record(b"v%03d" % i, key=b"k")]), 0)


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_retention_deletes_segments_below_a_checkpointed_log_start(
    tmp_path: Path, policy: str
) -> None:
    cfg = LogConfig.from_properties({"segment.bytes": "300", "cleanup.policy": policy})
    log = Log(tmp_path / "t-0", cfg)
    fill(log, 20)
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 3
    log.close()
    # Reopened with the start a restart reads from log-start-offset-checkpoint: inside
    # the third segment. Nothing below it is served, and retention drops the two below.
    start = bases[2] + 1
    log = Log(tmp_path / "t-0", cfg, log_start_offset=start, had_clean_shutdown=True)
    assert log.log_start_offset == start
    with pytest.raises(OffsetOutOfRangeError):
        log.read(bases[1], 1 << 20)
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments][0] == bases[2]
    assert log.log_start_offset == start  # a segment's base never lowers it
    assert log.read(start, 1 << 20).records is not None
