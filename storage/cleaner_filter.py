"""Which records of a batch the log cleaner keeps (Kafka's Cleaner.shouldRetainRecord and
the cleaner's RecordFilter), and the bytes to write for them: see storage/cleaner.py for
the rules on keys and tombstones, storage/cleaner_txn.py for transactions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from storage.cleaner_txn import CleanerTxnState
from storage.record_batch import DELETE_HORIZON_MASK, RecordBatchView
from storage.records import Record, decode_batch, rebuild_batch

if TYPE_CHECKING:
    from storage.log import Log


@dataclass(slots=True)
class CleanerStats:
    """Figures of one pass, for the log line."""

    topic_partition: tuple[str, int]
    first_dirty_offset: int
    end_offset: int  # the new first dirty offset when the pass completed
    bytes_read: int = 0  # the cleaned range before
    bytes_after: int = 0  # and after
    records_read: int = 0
    records_removed: int = 0
    aborted_records_removed: int = 0
    markers_removed: int = 0
    tombstones_removed: int = 0
    keyless_removed: int = 0
    batches_rebuilt: int = 0
    segments_before: int = 0
    segments_after: int = 0
    completed: bool = False  # False: stopped, or the log changed under the pass


class RecordFilter:
    """Which records of a batch stay (Kafka's Cleaner.shouldRetainRecord and the
    cleaner's RecordFilter), and the batch to write for them."""

    def __init__(
        self,
        offset_map: dict[bytes, int],
        map_end: int,
        now_ms: int,
        log: Log,
        stats: CleanerStats,
        txns: CleanerTxnState | None,
    ) -> None:
        self.txns = txns
        self.offset_map = offset_map
        self.map_end = map_end  # records at or above it are always kept
        self.now_ms = now_ms
        self.new_horizon_ms = now_ms + log.config.delete_retention_ms
        self.stats = stats

    def __call__(self, view: RecordBatchView, must_keep: bool) -> tuple[bytes | None, bool]:
        """(bytes to write or None, whether they differ from the original). `must_keep`:
        a batch that would lose every record is kept whole instead."""
        original = bytes(view.memory())
        txns = self.txns
        if txns is None:
            if view.is_control or view.is_transactional:
                return original, False
        elif view.is_control:
            return self._control(view, original, must_keep)
        elif txns.on_batch(view):  # a batch of an aborted transaction
            count = view.record_count
            self.stats.records_read += count
            if must_keep:
                return original, False
            self.stats.records_removed += count
            self.stats.aborted_records_removed += count
            return None, True
        records = decode_batch(view).records
        has_horizon = bool(view.attributes & DELETE_HORIZON_MASK)
        horizon_passed = has_horizon and self.now_ms >= view.base_timestamp
        retained: list[Record] = []
        keyless = tombstones = 0
        for rec in records:
            if rec.offset < self.map_end:
                if rec.key is None:
                    keyless += 1
                    continue
                if self.offset_map.get(rec.key, -1) > rec.offset:
                    continue  # a later record has this key
                if rec.value is None and horizon_passed:
                    tombstones += 1
                    continue
            retained.append(rec)
        stats = self.stats
        stats.records_read += len(records)
        if not retained and must_keep:
            return original, False
        stats.records_removed += len(records) - len(retained)
        stats.keyless_removed += keyless
        stats.tombstones_removed += tombstones
        if not retained:
            return None, True
        # KIP-534: the first pass that keeps a tombstone starts its delete.retention.ms.
        set_horizon = not has_horizon and any(r.value is None for r in retained)
        if len(retained) == len(records) and not set_horizon:
            return original, False
        horizon = (
            self.new_horizon_ms if set_horizon else view.base_timestamp if has_horizon else None
        )
        stats.batches_rebuilt += 1
        return rebuild_batch(view, retained, horizon), True

    def _control(
        self, view: RecordBatchView, original: bytes, must_keep: bool
    ) -> tuple[bytes | None, bool]:
        """A marker stays while its transaction has data left; then, like a tombstone,
        it gets a delete horizon, and a pass after the horizon removes it."""
        assert self.txns is not None
        self.stats.records_read += view.record_count
        if not self.txns.on_control(view):
            return original, False
        if view.attributes & DELETE_HORIZON_MASK:
            if self.now_ms < view.base_timestamp or must_keep:
                return original, False
            self.stats.records_removed += view.record_count
            self.stats.markers_removed += 1
            return None, True
        self.stats.batches_rebuilt += 1
        return rebuild_batch(view, decode_batch(view).records, self.new_horizon_ms), True
