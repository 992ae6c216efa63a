"""Leader epoch cache: which leader epoch started at which offset (KIP-101).

Mirrors Kafka's LeaderEpochFileCache. Persisted as `leader-epoch-checkpoint`.
"""

from __future__ import annotations

import bisect
import logging
from pathlib import Path
from typing import NamedTuple

from storage.checkpoint import CheckpointError, read_leader_epochs, write_leader_epochs

log = logging.getLogger(__name__)

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Epochs in increasing order with strictly increasing start offsets."""

    def __init__(self, checkpoint_path: Path | None) -> None:
        self._path = checkpoint_path
        self._entries: list[EpochEntry] = []
        self.needs_rebuild = False  # the file was missing or corrupt: rebuild from the log
        # A brand-new log's cache: its first write needs no fsync. Lost or torn by a
        # crash, the file reads as missing or corrupt, and the cache is rebuilt from the
        # log's batch headers (needs_rebuild). Every later write is durable.
        self.lazy_first_flush = False
        if checkpoint_path is not None:
            self._load(checkpoint_path)

    def _load(self, path: Path) -> None:
        try:
            loaded = read_leader_epochs(path)
            self.needs_rebuild = loaded is None
            raw = loaded or []
        except CheckpointError as exc:
            self.needs_rebuild = True
            # Rebuildable from the log's batch headers: the Log does that when the cache
            # comes back empty, so a corrupt file costs a scan, never data.
            log.warning(
                "ignoring corrupt leader epoch checkpoint: %s", exc, extra={"error": str(exc)}
            )
            raw = []
        entries = [EpochEntry(e, o) for e, o in raw]
        ok = all(
            a.epoch < b.epoch and a.start_offset <= b.start_offset
            for a, b in zip(entries, entries[1:], strict=False)
        )
        if not ok:
            log.warning(
                "ignoring out-of-order leader epoch checkpoint %s", path, extra={"path": str(path)}
            )
            entries = []
            self.needs_rebuild = True
        self._entries = entries

    @property
    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    @property
    def earliest_entry(self) -> EpochEntry | None:
        return self._entries[0] if self._entries else None

    def is_empty(self) -> bool:
        return not self._entries

    def assign(self, epoch: int, start_offset: int, *, flush: bool = True) -> bool:
        """Record that `epoch` starts at `start_offset`; returns True when the cache changed.

        As in Kafka, a new entry removes any entry with an epoch >= it or a start offset
        >= its own, so the cache stays monotonic in both.
        """
        if epoch < 0 or start_offset < 0:
            return False
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and last.start_offset <= start_offset:
                return False
        self._entries = [
            e for e in self._entries if e.epoch < epoch and e.start_offset < start_offset
        ]
        self._entries.append(EpochEntry(epoch, start_offset))
        if flush:
            self.flush()
        return True

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, with Kafka's exact semantics."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        epochs = [e.epoch for e in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(self._entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher].start_offset
        if higher == 0:
            # Older than anything we know: the data is gone; point the follower at the
            # first epoch we have so it can replicate from there.
            return requested_epoch, higher_start
        return self._entries[higher - 1].epoch, higher_start

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch that was current at `offset` (UNDEFINED_EPOCH when unknown)."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, offset) - 1
        return self._entries[i].epoch if i >= 0 else UNDEFINED_EPOCH

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs that start at or after `end_offset` (log truncated to it).

        A negative offset means "unknown" and changes nothing, as in Kafka."""
        if end_offset < 0:
            return
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if kept != self._entries:
            self._entries = kept
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: the epoch current there starts there."""
        starts = [e.start_offset for e in self._entries]
        i = bisect.bisect_right(starts, start_offset) - 1
        if i < 0 or (i == 0 and self._entries[0].start_offset == start_offset):
            return
        first = EpochEntry(self._entries[i].epoch, start_offset)
        self._entries = [first, *self._entries[i + 1 :]]
        self.flush()

    def clear(self) -> None:
        self._entries = []
        self.flush()

    def flush(self) -> None:
        if self._path is not None:
            durable = not self.lazy_first_flush
            self.lazy_first_flush = False
            write_leader_epochs(self._path, self._entries, durable=durable)
