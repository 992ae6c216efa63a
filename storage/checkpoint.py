"""Kafka's checkpoint text files, written atomically (temp, fsync, rename, fsync dir).

Format (CheckpointFile.java): a version line, a count line, then one entry per line.
- offset checkpoints (`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
  `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`): "topic partition offset"
- `leader-epoch-checkpoint`: "epoch startOffset"
- `partition.metadata`: "version: 0" and "topic_id: <base64 uuid>"
"""

from __future__ import annotations

import base64
import os
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"  # first dirty offset per log
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
PARTITION_METADATA = "partition.metadata"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be parsed; the message names the file and the line."""


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: Path, text: str, *, durable: bool = True) -> None:
    """Replace `path` with `text` so that a crash leaves the old or the new file, whole.

    durable=False skips the fsyncs: only for a file whose loss or truncation by a crash
    is harmless (the first write of a brand-new log's files: a missing, empty or torn
    one is detected and rebuilt), where 10,000 new partitions would otherwise cost
    20,000 fsyncs."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        if durable:
            f.flush()
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fsync_dir(path.parent)


def write_checkpoint(
    path: Path, version: int, lines: Iterable[str], *, durable: bool = True
) -> None:
    body = list(lines)
    text = "".join(f"{line}\n" for line in [str(version), str(len(body)), *body])
    write_atomically(path, text, durable=durable)


def read_checkpoint(
    path: Path, expected_version: int, parse: Callable[[list[str]], T]
) -> list[T] | None:
    """Entries of a checkpoint file, None when it does not exist; CheckpointError if corrupt."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path}: cannot read: {exc}") from exc
    lines = text.splitlines()
    try:
        if len(lines) < 2:
            raise ValueError("missing version or count line")
        version = int(lines[0])
        if version != expected_version:
            raise ValueError(f"version {version}, expected {expected_version}")
        count = int(lines[1])
        if count < 0 or count != len(lines) - 2:
            raise ValueError(f"count line says {count} entries, file has {len(lines) - 2}")
        return [parse(line.split()) for line in lines[2:]]
    except (ValueError, IndexError) as exc:
        raise CheckpointError(f"{path}: malformed checkpoint: {exc}") from exc


def _offset_entry(fields: list[str]) -> tuple[str, int, int]:
    if len(fields) != 3:
        raise ValueError(f"expected 'topic partition offset', got {' '.join(fields)!r}")
    return fields[0], int(fields[1]), int(fields[2])


def write_offsets(path: Path, offsets: dict[tuple[str, int], int]) -> None:
    write_checkpoint(path, 0, (f"{t} {p} {o}" for (t, p), o in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    entries = read_checkpoint(path, 0, _offset_entry) or []
    return {(t, p): o for t, p, o in entries}


def _epoch_entry(fields: list[str]) -> tuple[int, int]:
    if len(fields) != 2:
        raise ValueError(f"expected 'epoch offset', got {' '.join(fields)!r}")
    return int(fields[0]), int(fields[1])


def write_leader_epochs(
    path: Path, entries: Iterable[tuple[int, int]], *, durable: bool = True
) -> None:
    write_checkpoint(path, 0, (f"{e} {o}" for e, o in entries), durable=durable)


def read_leader_epochs(path: Path) -> list[tuple[int, int]] | None:
    return read_checkpoint(path, 0, _epoch_entry)


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    """Kafka prints topic ids as URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))


def write_partition_metadata(path: Path, topic_id: uuid.UUID, *, durable: bool = True) -> None:
    text = f"version: 0\ntopic_id: {topic_id_to_str(topic_id)}\n"
    write_atomically(path, text, durable=durable)


def read_partition_metadata(path: Path) -> uuid.UUID | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    fields = dict(
        (k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in text.splitlines()) if k
    )
    try:
        if fields.get("version") != "0":
            raise ValueError(f"unsupported version {fields.get('version')!r}")
        return topic_id_from_str(fields["topic_id"])
    except (KeyError, ValueError) as exc:
        raise CheckpointError(f"{path}: malformed partition metadata: {exc}") from exc
