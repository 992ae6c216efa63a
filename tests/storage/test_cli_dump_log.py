"""`kraft dump-log` on segments written by storage.log.Log, and the not-yet-built commands."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from kraft.tools.cli import main
from storage.compression import Compression
from storage.log import Log
from storage.record_batch import HEADER_SIZE
from storage.records import Record, build_batch

EPOCH = 5


def write_segment(tmp_path: Path) -> tuple[Path, list[int]]:
    """A closed log with three batches (3, 2 and 1 records); returns its segment file and
    each batch's size."""
    log = Log(tmp_path / "orders-0")
    sizes = []
    specs = [
        (Compression.NONE, [("k0", "v0"), ("k1", "v1"), ("k2", "v2")]),
        (Compression.GZIP, [("k3", "hello"), ("k4", "world")]),
        (Compression.NONE, [("k5", "last")]),
    ]
    for codec, pairs in specs:
        records = [Record(v.encode(), k.encode(), timestamp=1000 + int(k[1:])) for k, v in pairs]
        batch = build_batch(records, compression=codec, now_ms=1000)
        sizes.append(len(batch))
        log.append_as_leader(batch, leader_epoch=EPOCH)
    assert log.log_end_offset == 6
    path = log.active_segment.log_path
    log.flush()
    log.close()
    assert path.stat().st_size == sum(sizes)
    return path, sizes


def batch_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("baseOffset:")]


def record_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("| offset:")]


def test_dump_log_prints_every_batch_and_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, sizes = write_segment(tmp_path)
    assert main(["dump-log", str(path), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"Dumping {path}"

    batches = batch_lines(out)
    assert len(batches) == 3
    positions = [0, sizes[0], sizes[0] + sizes[1]]
    expected = [(0, 2, 3, 0), (3, 4, 2, 1), (5, 5, 1, 0)]
    for line, (base, last, count, codec), pos, size in zip(
        batches, expected, positions, sizes, strict=True
    ):
        assert line.startswith(f"baseOffset: {base} lastOffset: {last} count: {count} "), line
        assert f" partitionLeaderEpoch: {EPOCH} " in line
        assert f" position: {pos} " in line
        assert f" size: {size} " in line
        assert f" compresscodec: {codec} " in line
        assert " isTransactional: false isControl: false " in line
        assert line.endswith("isvalid: true")
        assert re.search(r" crc: \d+ ", line)

    assert record_lines(out) == [
        "| offset: 0 CreateTime: 1000 key: k0 payload: v0",
        "| offset: 1 CreateTime: 1001 key: k1 payload: v1",
        "| offset: 2 CreateTime: 1002 key: k2 payload: v2",
        "| offset: 3 CreateTime: 1003 key: k3 payload: hello",
        "| offset: 4 CreateTime: 1004 key: k4 payload: world",
        "| offset: 5 CreateTime: 1005 key: k5 payload: last",
    ]
    # Records follow their batch.
    lines = out.splitlines()
    assert lines.index(batches[1]) < lines.index(record_lines(out)[3]) < lines.index(batches[2])


def test_dump_log_without_print_data_log_prints_only_batches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = write_segment(tmp_path)
    assert main(["dump-log", str(path)]) == 0
    out = capsys.readouterr().out
    assert len(batch_lines(out)) == 3
    assert record_lines(out) == []


def test_dump_log_of_an_empty_segment(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = Log(tmp_path / "empty-0")
    path = log.active_segment.log_path
    log.close()
    assert main(["dump-log", str(path), "--print-data-log"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [f"Dumping {path}"]


def _flip_payload_byte(data: bytearray, sizes: list[int]) -> None:
    data[sizes[0] + HEADER_SIZE + 2] ^= 0x40  # inside the second batch: CRC mismatch


def _cut_second_batch(data: bytearray, sizes: list[int]) -> None:
    del data[sizes[0] + sizes[1] - 3 :]  # a torn write in the second batch


def _bad_magic(data: bytearray, sizes: list[int]) -> None:
    data[sizes[0] + 16] = 1  # magic byte of the second batch


def _garbage_header(data: bytearray, sizes: list[int]) -> None:
    data[sizes[0] :] = b"\x00" * 8 + b"\xff\xff\xff\xff" + b"garbage" * 20


@pytest.mark.parametrize(
    "corrupt", [_flip_payload_byte, _cut_second_batch, _bad_magic, _garbage_header]
)
def test_dump_log_stops_at_a_corrupt_batch(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    corrupt: Callable[[bytearray, list[int]], None],
) -> None:
    path, sizes = write_segment(tmp_path)
    data = bytearray(path.read_bytes())
    corrupt(data, sizes)
    bad = tmp_path / "corrupt.log"
    bad.write_bytes(bytes(data))

    assert main(["dump-log", str(bad), "--print-data-log"]) == 1
    out = capsys.readouterr().out
    batches = batch_lines(out)
    assert len(batches) == 1 and batches[0].startswith("baseOffset: 0 lastOffset: 2 ")
    assert len(record_lines(out)) == 3  # only the first batch's records
    assert re.search(rf"^invalid batch at position {sizes[0]}\b", out, re.MULTILINE), out


def test_dump_log_reports_a_corrupt_first_batch_at_position_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "00000000000000000000.log"
    bad.write_bytes(b"not a kafka log segment at all, sorry" * 3)
    assert main(["dump-log", str(bad)]) == 1
    out = capsys.readouterr().out
    assert batch_lines(out) == []
    assert "invalid batch at position 0" in out


def test_dump_log_of_a_missing_file_returns_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope.log"
    assert main(["dump-log", str(missing)]) == 2
    captured = capsys.readouterr()
    assert str(missing) in captured.err
    assert batch_lines(captured.out) == []


def test_dev_and_broker_take_their_own_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # `kraft dev` and `kraft broker` are wired to kraft/tools/dev.py and broker/main.py; running
    # them is tested in tests/cluster/test_dev_cluster.py. Here: their options reach them.
    with pytest.raises(SystemExit) as exc:
        main(["dev", "--help"])
    assert exc.value.code == 0
    assert "--data-dir" in capsys.readouterr().out
    assert main(["broker", "--config", str(tmp_path / "missing.properties")]) == 2
    assert "cannot read config file" in capsys.readouterr().err


def test_dump_log_refuses_unknown_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = write_segment(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["dump-log", str(path), "--no-such-option"])
    assert info.value.code == 2
    assert "--no-such-option" in capsys.readouterr().err


def test_controller_needs_a_config(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["controller"])
    assert exc.value.code == 2
    assert "--config" in capsys.readouterr().err
