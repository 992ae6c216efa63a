"""Anomalies the fault campaign found, frozen as small tests (the broker code is others'
to fix; these are marked xfail(strict) until it is, so the fix turns them into passes).

Disk full (campaign seeds 103 and 1480372880, profile full, 2026-11-27): a leader's append
that hit ENOSPC part-way left the written part of the batch in the segment file, and the
next append (same offset, the LEO had not moved) landed after those bytes while the
segment's size and index said it starts where the torn one does. Reads from that
position return a batch with a bad CRC: the followers refused it and left the ISR, the
leader alone advanced the high watermark, and a consumer (librdkafka does not check CRCs
by default) read offset 221 as a record with an empty value. Kafka takes the log dir
offline on an IOException in append; at least the segment must be cut back to its size.
"""

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


def batch(value: str) -> bytes:
    return bytes(build_batch([Record(value.encode())], producer_id=7, producer_epoch=0,
                             base_sequence=0))  # fmt: skip


_TORN = "ENOSPC part-way through an append leaves a torn batch that later reads return"


@pytest.mark.xfail(strict=True, reason=f"{_TORN} (found by the fault campaign, seed 103)")
def test_append_failing_with_enospc_part_way_leaves_no_torn_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = Log(tmp_path / "t-0", fresh=True)
    log.append_as_leader(bytearray(batch("a")), 0)
    real_writev = os.writev

    def half_then_enospc(fd: int, parts: Any) -> int:
        data = b"".join(bytes(p) for p in parts)
        os.write(fd, data[: len(data) // 2])  # the disk fills part-way
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage.segment.os, "writev", half_then_enospc)
    with pytest.raises(OSError):
        log.append_as_leader(bytearray(batch("b")), 0)
    monkeypatch.setattr(storage.segment.os, "writev", real_writev)
    log.append_as_leader(bytearray(batch("c")), 0)  # the disk has room again

    data = log.read(0, 1 << 20).read()
    values = []
    for view in iter_batches(data):
        checked = validate_batch(data, view.pos)  # raises on a bad CRC
        values.append(checked.base_offset)
    assert values == list(range(log.log_end_offset)), values
    log.close()
