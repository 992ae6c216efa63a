"""Producer state across restarts and truncations (Kafka's loadProducerState and
truncateAndReload): snapshots of it (`<offset>.snapshot`, taken at each segment roll and
at a clean shutdown) and replays of the log's batch headers after them. When the
transaction index fails its sanity check or no snapshot can be read, the index is
emptied and rebuilt with the producer state from the whole log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from broker.producer_state import CompletedTxn, ProducerStateManager
from storage.log import Log
from storage.producer_snapshot import CorruptSnapshotError
from storage.record_batch import HEADER_SIZE, RecordBatchView
from storage.txn_index import AbortedTxn

log = logging.getLogger("broker.replica_manager")


def log_headers(lg: Log, start: int = 0) -> Iterator[RecordBatchView]:
    """Every batch header of a log from the batch holding `start`, oldest first (for
    producer state rebuilds). Control batches come whole: their marker type is in the
    first record's key."""
    segments = lg.segments
    for i, seg in enumerate(segments):
        if i + 1 < len(segments) and segments[i + 1].base_offset <= start:
            continue
        for view in seg.iter_headers():
            if view.last_offset < start:
                continue
            if view.is_control and view.size > HEADER_SIZE:
                yield _whole_batch(seg, view)
            else:
                yield view


def _whole_batch(seg: object, view: RecordBatchView) -> RecordBatchView:
    """The whole control batch at the header `view` (a few dozen bytes): found again by
    its offset, since `iter_headers` gives views without their file position."""
    data = seg.read(view.base_offset, view.size, None, True)  # type: ignore[attr-defined]
    if data is None:
        return view
    raw = data[0].read()
    return RecordBatchView(raw) if len(raw) >= view.size else view


def restore_producer_state(lg: Log, name: str) -> ProducerStateManager:
    """Producer state of a log being opened (Kafka's loadProducerState): the newest
    snapshot plus the batches after it. When the transaction index fails its sanity
    check (or no snapshot can be used), the index is emptied and rebuilt, with the
    producer state, from the whole log."""
    producers = ProducerStateManager()
    rebuild_index = not lg.txn_indexes_ok()
    snap = None
    if not rebuild_index:
        try:
            snap = lg.latest_producer_snapshot(lg.log_end_offset)
        except (CorruptSnapshotError, OSError) as exc:
            log.warning("%s: producer snapshot unreadable (%s); rebuilding", name, exc)
            rebuild_index = True
    if rebuild_index:
        log.warning("%s: transaction index unusable; rebuilding it from the log", name)
        lg.reset_txn_indexes()
        for txn in producers.rebuild(log_headers(lg)):
            lg.add_aborted_txn(aborted_entry(txn))
    elif snap is not None:
        offset, entries = snap
        producers.load_snapshot(entries)
        producers.replay(log_headers(lg, offset))
    else:
        producers.rebuild(log_headers(lg))
    lg.on_roll = lambda offset: take_snapshot(lg, producers, offset)
    return producers


def take_snapshot(lg: Log, producers: ProducerStateManager, offset: int) -> None:
    """Snapshot producer state as of `offset` (the LEO: a roll's new base, or shutdown)."""
    try:
        lg.take_producer_snapshot(producers.snapshot_entries(), offset)
    except OSError as exc:  # a later restore replays more of the log: never fatal
        log.warning("%s: producer snapshot at %d failed: %r", lg.dir.name, offset, exc)


def aborted_entry(txn: CompletedTxn) -> AbortedTxn:
    return AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, txn.last_stable_offset)


def reload_producers(lg: Log, producers: ProducerStateManager) -> None:
    """After a truncation: the newest snapshot at or below the LEO plus the batches
    after it (the truncation dropped later snapshots and transaction index entries)."""
    snap = lg.latest_producer_snapshot(lg.log_end_offset)
    if snap is None:
        producers.rebuild(log_headers(lg))
    else:
        producers.load_snapshot(snap[1])
        producers.replay(log_headers(lg, snap[0]))
