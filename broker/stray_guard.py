"""When a metadata snapshot may decide that a replica on disk is stray.

A snapshot replaces the broker's image wholesale, and a log the image does not assign to
this broker is stray (Kafka's LogManager.findStrayReplicas): deleted, as the partition was
reassigned away or its topic deleted while the broker was down or behind. That is only
true of a snapshot that is at least as new as what the broker already knew. Controllers
serve what they have applied, and after a whole-cluster restart a controller may serve a
snapshot from before the topic existed: the fault campaign saw a broker delete two live
replicas as stray, come back with empty logs, and lose 167 acknowledged records.

So the broker writes down the metadata offset of every update that gives it a replica it
did not host (`replica-metadata-offset` in each log dir, fsynced: rare, only when
replicas are created), and a snapshot older than that deletes nothing. A log dir without
the file (written before this check existed) lets no snapshot delete anything: stray logs
then stay on disk, which costs space, never data.
"""

from __future__ import annotations

import logging
from pathlib import Path

from storage.checkpoint import write_atomically

log = logging.getLogger("broker.replica_manager")

FILE = "replica-metadata-offset"


class StrayGuard:
    def __init__(self, log_dirs: list[Path]) -> None:
        self.log_dirs = log_dirs
        self.offset = -1  # newest update that created a replica here; -1: none known
        self.known = True  # False: logs exist that no recorded offset covers
        found = []
        for d in log_dirs:
            try:
                found.append(int((d / FILE).read_text(encoding="ascii").strip()))
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as exc:
                log.warning("%s unreadable (%r): stray replicas will be kept", d / FILE, exc)
                self.known = False
        if found:
            self.offset = max(found)
        elif any(self._has_logs(d) for d in log_dirs):
            self.known = False

    @staticmethod
    def _has_logs(d: Path) -> bool:
        return d.is_dir() and any(p.is_dir() and "-" in p.name for p in d.iterdir())

    def may_delete_strays(self, snapshot_offset: int) -> bool:
        return self.known and snapshot_offset >= self.offset

    def record(self, offset: int) -> None:
        """An update at `offset` gives us new replicas: before their logs exist."""
        if offset <= self.offset:
            return
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            write_atomically(d / FILE, f"{offset}\n")
        self.offset = offset
