"""Power loss, simulated on a stopped controller's data directory.

A machine that loses power keeps what was fsynced and may lose everything else. The
controllers' journal (kraft/raft_journal.py) writes its durable points to a ledger when
KRAFT_DURABILITY_LEDGER=1: the journal's inode and synced length after each fdatasync,
and a hard link `<file>.durable` to each file it replaced durably (term and vote,
snapshot, a rewritten journal). `lose_power` drops the rest, the worst case a disk may
legally present after the crash: the journal cut to its last synced length, every
replaced file back at its last durable version (or gone), temporary files gone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPLACED = ("raft.journal.state", "raft.dump")


@dataclass
class PowerLoss:
    journal_bytes_lost: int
    files_reverted: list[str]


def _last_journal_point(ledger: Path) -> tuple[int, int] | None:
    point = None
    if ledger.exists():
        for line in ledger.read_text(encoding="ascii").splitlines():
            kind, *fields = line.split()
            if kind == "journal":
                point = (int(fields[0]), int(fields[1]))
    return point


def lose_power(data_dir: Path) -> PowerLoss:
    """Apply a power loss to `data_dir` (the controller must not be running)."""
    journal = data_dir / "raft.journal"
    durable_journal = data_dir / "raft.journal.durable"
    point = _last_journal_point(data_dir / "durability.ledger")
    lost = journal.stat().st_size if journal.exists() else 0
    if point is None:
        journal.unlink(missing_ok=True)
    else:
        inode, length = point
        if journal.exists() and journal.stat().st_ino == inode:
            pass
        elif durable_journal.exists() and durable_journal.stat().st_ino == inode:
            # The journal was rewritten after its last durable point: the rename is lost.
            os.replace(durable_journal, journal)
            lost = journal.stat().st_size
        else:
            raise AssertionError(f"{data_dir}: the ledger names journal inode {inode}, not found")
        with open(journal, "r+b") as f:
            f.truncate(length)
        lost -= length
    reverted = []
    for name in REPLACED:
        target, durable = data_dir / name, data_dir / (name + ".durable")
        if durable.exists():
            if not target.exists() or target.stat().st_ino != durable.stat().st_ino:
                reverted.append(name)
            os.replace(durable, target)
        elif target.exists():
            target.unlink()
            reverted.append(name)
    for tmp in data_dir.glob("*.tmp"):
        tmp.unlink()
    return PowerLoss(max(lost, 0), reverted)
