"""A log read past its first batch ends on a batch boundary: a partial tail would be
dropped by the reader and sent again by the next fetch (wasted bytes at small messages).
The first batch still comes whole (min_one_message) or partial (without), as in Kafka."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.config import LogConfig
from storage.log import Log
from storage.records import Record, build_batch


def _log(tmp_path: Path, index_interval: int, batches: int, records: int) -> tuple[Log, list[int]]:
    lg = Log(tmp_path / "t-0", LogConfig(index_interval_bytes=index_interval))
    sizes = []
    for b in range(batches):
        batch = build_batch(
            [Record(key=None, value=b"x" * (50 + b), headers=()) for _ in range(records)]
        )
        sizes.append(len(batch))
        lg.append_as_leader(batch, leader_epoch=0)
    return lg, sizes


@pytest.mark.parametrize("index_interval", [0, 1, 4096, 1 << 30])
@pytest.mark.parametrize("records", [1, 20])
def test_read_ends_on_a_batch_boundary(tmp_path: Path, index_interval: int, records: int) -> None:
    lg, sizes = _log(tmp_path, index_interval, 40, records)
    bounds = [sum(sizes[:i]) for i in range(len(sizes) + 1)]
    total = bounds[-1]
    for max_bytes in (
        sizes[0] + 1,
        bounds[3] - 1,
        bounds[3],
        bounds[3] + 1,
        total - 1,
        total,
        total * 2,
    ):
        got = lg.read(0, max_bytes).records
        assert got is not None
        assert got.size in bounds  # whole batches only
        assert got.size == max(b for b in bounds if b <= max_bytes)
    # From a later offset (batch 5), the same rule.
    got = lg.read(5 * records, bounds[9] - bounds[5] - 1).records
    assert got is not None and got.position == bounds[5] and got.size == bounds[8] - bounds[5]


def test_first_batch_stays_whole_or_partial_as_in_kafka(tmp_path: Path) -> None:
    lg, sizes = _log(tmp_path, 4096, 3, 20)
    whole = lg.read(0, 10, min_one_message=True).records
    assert whole is not None and whole.size == sizes[0]
    partial = lg.read(0, 10, min_one_message=False).records
    assert partial is not None and partial.size == 10
