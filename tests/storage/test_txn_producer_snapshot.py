"""storage.producer_snapshot: Kafka's ProducerSnapshot v1 file, byte for byte, and the
corruptions a reader must refuse (version, CRC, size)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from crc32c import crc32c

from storage.producer_snapshot import (
    CorruptSnapshotError,
    SnapshotEntry,
    list_snapshots,
    read_snapshot,
    snapshot_offset,
    snapshot_path,
    write_snapshot,
)

E1 = SnapshotEntry(1000, 3, 41, 500, 4, 1_700_000_000_000, 7, -1)
E2 = SnapshotEntry(1001, 0, 9, 510, 0, 1_700_000_000_123, 2, 505)


def kafka_bytes(entries: list[SnapshotEntry]) -> bytes:
    """The ProducerSnapshot.json v1 schema written out by hand."""
    body = struct.pack(">i", len(entries))
    for e in entries:
        body += struct.pack(">q", e.producer_id)
        body += struct.pack(">h", e.epoch)
        body += struct.pack(">i", e.last_sequence)
        body += struct.pack(">q", e.last_offset)
        body += struct.pack(">i", e.offset_delta)
        body += struct.pack(">q", e.timestamp)
        body += struct.pack(">i", e.coordinator_epoch)
        body += struct.pack(">q", e.current_txn_first_offset)
    return struct.pack(">hI", 1, crc32c(body)) + body


def test_file_is_byte_for_byte_kafkas_and_reads_back(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 512)
    assert path.name == "00000000000000000512.snapshot"
    write_snapshot(path, [E1, E2])
    assert path.read_bytes() == kafka_bytes([E1, E2])
    assert read_snapshot(path) == [E1, E2]
    assert not list(tmp_path.glob("*.tmp"))


def test_empty_snapshot(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 0)
    write_snapshot(path, [])
    assert path.read_bytes() == kafka_bytes([])
    assert read_snapshot(path) == []


def test_rewrite_replaces_the_file(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 5)
    write_snapshot(path, [E1, E2])
    write_snapshot(path, [E2])
    assert read_snapshot(path) == [E2]


def test_bad_crc_is_refused(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 1)
    data = bytearray(kafka_bytes([E1]))
    data[20] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSnapshotError, match="CRC mismatch"):
        read_snapshot(path)


def test_unknown_version_is_refused(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 1)
    path.write_bytes(struct.pack(">h", 2) + kafka_bytes([E1])[2:])
    with pytest.raises(CorruptSnapshotError, match="version 2"):
        read_snapshot(path)


@pytest.mark.parametrize("cut", [0, 1, 5, 10, 50])
def test_truncated_file_is_refused(tmp_path: Path, cut: int) -> None:
    path = snapshot_path(tmp_path, 1)
    path.write_bytes(kafka_bytes([E1, E2])[:cut])
    with pytest.raises(CorruptSnapshotError):
        read_snapshot(path)


def test_trailing_bytes_are_refused(tmp_path: Path) -> None:
    path = snapshot_path(tmp_path, 1)
    path.write_bytes(kafka_bytes([E1]) + b"\x00")
    with pytest.raises(CorruptSnapshotError, match="do not hold"):
        read_snapshot(path)


def test_listing_snapshots(tmp_path: Path) -> None:
    for off in (30, 4, 100):
        write_snapshot(snapshot_path(tmp_path, off), [])
    (tmp_path / "00000000000000000000.log").touch()
    (tmp_path / "junk.snapshot").touch()
    assert [o for o, _ in list_snapshots(tmp_path)] == [4, 30, 100]
    assert snapshot_offset(tmp_path / "x.log") is None
