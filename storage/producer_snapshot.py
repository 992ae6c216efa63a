"""Producer-state snapshots: `<20-digit offset>.snapshot`, Kafka's format (version 1).

Kafka's ProducerStateManager.writeSnapshot/readSnapshot with the ProducerSnapshot
schema: version int16 (= 1), crc uint32 (CRC32C of every byte after it), then an array
(int32 count) of 46-byte entries: producerId int64, epoch int16, lastSequence int32,
lastOffset int64, offsetDelta int32, timestamp int64, coordinatorEpoch int32,
currentTxnFirstOffset int64 (-1: no ongoing transaction). The offset in the name is the
log end offset the state is valid at: recovery replays the log from there.

This module only reads and writes the files; which snapshots to keep is `Log`'s.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from crc32c import crc32c

from storage.checkpoint import fsync_dir

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
_HEAD = struct.Struct(">hIi")  # version, crc, entry count
_CRC_END = 6  # the CRC covers bytes [6, end): the count and the entries
_ENTRY = struct.Struct(">qhiqiqiq")
ENTRY_SIZE = _ENTRY.size  # 46
assert ENTRY_SIZE == 46


class CorruptSnapshotError(ValueError):
    """A snapshot file that cannot be trusted (Kafka's CorruptSnapshotException)."""


@dataclass(frozen=True, slots=True)
class SnapshotEntry:
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int = -1  # -1: none


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset:020d}{SNAPSHOT_SUFFIX}"


def snapshot_offset(path: Path) -> int | None:
    """The offset a snapshot file is named after, or None for any other file."""
    name = path.name
    if not name.endswith(SNAPSHOT_SUFFIX):
        return None
    stem = name[: -len(SNAPSHOT_SUFFIX)]
    return int(stem) if stem.isdigit() else None


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file in `directory`, oldest first."""
    found = []
    for path in directory.iterdir():
        offset = snapshot_offset(path)
        if offset is not None and path.is_file():
            found.append((offset, path))
    found.sort()
    return found


def encode_snapshot(entries: Iterable[SnapshotEntry]) -> bytes:
    body = bytearray()
    count = 0
    for e in entries:
        body += _ENTRY.pack(
            e.producer_id,
            e.epoch,
            e.last_sequence,
            e.last_offset,
            e.offset_delta,
            e.timestamp,
            e.coordinator_epoch,
            e.current_txn_first_offset,
        )
        count += 1
    counted = struct.pack(">i", count) + bytes(body)
    return struct.pack(">hI", SNAPSHOT_VERSION, crc32c(counted)) + counted


def decode_snapshot(data: bytes, name: str = "<bytes>") -> list[SnapshotEntry]:
    if len(data) < _HEAD.size:
        raise CorruptSnapshotError(f"{name}: {len(data)} bytes is shorter than the header")
    version, crc, count = _HEAD.unpack_from(data)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{name}: unknown snapshot version {version}")
    if count < 0 or len(data) != _HEAD.size + count * ENTRY_SIZE:
        raise CorruptSnapshotError(
            f"{name}: {len(data)} bytes do not hold the {count} entries the header claims"
        )
    computed = crc32c(memoryview(data)[_CRC_END:])
    if computed != crc:
        raise CorruptSnapshotError(
            f"{name}: CRC mismatch (stored {crc:#010x}, computed {computed:#010x})"
        )
    return [
        SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * ENTRY_SIZE)) for i in range(count)
    ]


def write_snapshot(path: Path, entries: Iterable[SnapshotEntry]) -> None:
    """Write atomically: a temp file, fsync, rename over `path`, fsync the directory.

    A crash leaves either the old file or the new one, never a torn one under the name.
    """
    data = encode_snapshot(entries)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def read_snapshot(path: Path) -> list[SnapshotEntry]:
    """The entries of a snapshot file; CorruptSnapshotError on bad version, size or CRC."""
    return decode_snapshot(path.read_bytes(), str(path))
