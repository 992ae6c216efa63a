"""Opening a partition directory: find the segments, recover what a crash may have torn.

Mirrors Kafka's LogLoader. Segments past the recovery point are rescanned batch by batch
(CRC included) unless the last shutdown was clean; the first bad batch cuts the log
there. Segments are contiguous (each starts where the previous one ends), so a segment
that ends short of the next one's base lost its tail, and everything after it goes too:
the log that remains is always a prefix of what was written.

A swap the log cleaner had committed (a `.log.swap` file exists) is completed first, as
Kafka's LogLoader does; files of an unfinished cleaning (`.cleaned`) are deleted. The
cleaner keeps segments contiguous too: a cleaned segment ends where its originals did.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from storage.epoch_cache import LeaderEpochCache
from storage.record_batch import RecordBatchView
from storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    LogSegment,
    check_index_or_none,
)

log = logging.getLogger(__name__)

CLEANED_SUFFIX = ".cleaned"  # a segment the cleaner is still writing
SWAP_SUFFIX = ".swap"  # a cleaned segment, whole and fsynced, committed to replace others
LEFTOVER_SUFFIXES = (".tmp", ".deleted", CLEANED_SUFFIX, SWAP_SUFFIX)


@dataclass(slots=True)
class LoadedLog:
    segments: list[LogSegment]
    log_end_offset: int
    recovery_point: int


def load_log(
    directory: Path,
    new_segment: Callable[..., LogSegment],
    *,
    recovery_point: int,
    had_clean_shutdown: bool,
    max_batch_size: int,
    epoch_cache: LeaderEpochCache,
) -> LoadedLog:
    """`new_segment(base, suffix="")` opens (or creates) one segment's files."""
    complete_swaps(directory, lambda base: new_segment(base, SWAP_SUFFIX), max_batch_size)
    segments = [new_segment(base) for base in _segment_bases(directory)]
    if not segments:
        segments.append(new_segment(max(0, recovery_point)))

    def note_epoch(view: RecordBatchView) -> None:
        # As Kafka's recovery does: every rescanned batch re-asserts its epoch.
        epoch = view.partition_leader_epoch
        if epoch > epoch_cache.latest_epoch:
            epoch_cache.assign(epoch, view.base_offset, flush=False)

    recovered_from = _first_segment_to_recover(segments, recovery_point, had_clean_shutdown)
    if recovered_from is not None:
        _recover_from(segments, recovered_from, max_batch_size, note_epoch)
    leo = segments[-1].next_offset()
    recovery_point = leo if recovered_from is not None else min(recovery_point, leo)
    if epoch_cache.needs_rebuild or recovered_from is not None:
        epoch_cache.truncate_from_end(leo)
        if epoch_cache.needs_rebuild and leo > segments[0].base_offset:
            epoch_cache.clear()
            for seg in segments:
                for view in seg.iter_headers():
                    note_epoch(view)
        epoch_cache.flush()
    return LoadedLog(segments, leo, recovery_point)


def complete_swaps(
    directory: Path, open_swap: Callable[[int], LogSegment], max_batch_size: int
) -> None:
    """Finish swaps a crash cut short. A `<base>.log.swap` was written whole and fsynced
    before it got that name, so it replaces every segment whose base offset lies in
    [base, its next offset): those files go, then the .swap files take their final names.
    Each step can be repeated, so a crash in here is finished by the next load."""
    tail = LOG_SUFFIX + SWAP_SUFFIX
    for path in sorted(directory.glob(f"*{tail}")):
        stem = path.name[: -len(tail)]
        if not stem.isdigit():
            continue
        swap = open_swap(int(stem))
        try:
            if swap.offset_index.was_missing or swap.time_index.was_missing:
                swap.recover(max_batch_size)  # its indexes were not renamed yet: rebuild
            first, end = swap.base_offset, swap.next_offset()
            for old in directory.iterdir():
                base = _segment_file_base(old.name)
                if base is not None and first <= base < end:
                    old.unlink(missing_ok=True)
            log.warning(
                "completing the swap of cleaned segment %s (offsets %d to %d)",
                path,
                first,
                end,
                extra={"segment": str(path), "base_offset": first, "end_offset": end},
            )
            swap.change_suffix("")
        finally:
            swap.close()


def _segment_file_base(name: str) -> int | None:
    """The base offset of a segment's `.log`, `.index`, `.timeindex` or `.txnindex` file."""
    for suffix in (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):
        if name.endswith(suffix) and name[: -len(suffix)].isdigit():
            return int(name[: -len(suffix)])
    return None


def _segment_bases(directory: Path) -> list[int]:
    bases = []
    for path in directory.iterdir():
        name = path.name
        if name.endswith(LEFTOVER_SUFFIXES):
            path.unlink(missing_ok=True)  # leftovers of an interrupted operation
        elif name.endswith(LOG_SUFFIX) and name[: -len(LOG_SUFFIX)].isdigit():
            bases.append(int(name[: -len(LOG_SUFFIX)]))
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX):  # indexes whose log is gone
        for path in directory.glob(f"*{suffix}"):
            stem = path.name[: -len(suffix)]
            if stem.isdigit() and int(stem) not in bases:
                path.unlink(missing_ok=True)
    return sorted(bases)


def _first_segment_to_recover(
    segments: list[LogSegment], recovery_point: int, had_clean_shutdown: bool
) -> int | None:
    for i, seg in enumerate(segments):
        next_base = segments[i + 1].base_offset if i + 1 < len(segments) else None
        unflushed = next_base is None or next_base > recovery_point
        if not had_clean_shutdown and unflushed:
            return i
        # Below the recovery point (or after a clean stop) the files were flushed whole:
        # a cheap index check suffices, and a missing or broken index is rebuilt.
        problem = check_index_or_none(seg, full=unflushed)
        missing = seg.offset_index.was_missing or seg.time_index.was_missing
        if problem is not None or (missing and seg.size > 0):
            log.warning(
                "rebuilding the indexes of %s", seg.log_path, extra={"segment": str(seg.log_path)}
            )
            return i
    return None


def _recover_from(
    segments: list[LogSegment],
    first: int,
    max_batch_size: int,
    on_batch: Callable[[RecordBatchView], None],
) -> None:
    """Rescan segments from index `first`; after a bad batch or a hole, later ones go."""
    for i in range(first, len(segments)):
        seg = segments[i]
        truncated = seg.recover(max_batch_size, on_batch)
        seg.flush()
        hole = i + 1 < len(segments) and seg.next_offset() != segments[i + 1].base_offset
        if truncated or hole:
            log.warning(
                "recovery cut %s at byte %d (%d bytes torn or corrupt%s)",
                seg.log_path,
                seg.size,
                truncated,
                "; later segments dropped: a hole" if hole else "",
                extra={"segment": str(seg.log_path), "bytes": truncated, "hole": hole},
            )
            for later in segments[i + 1 :]:
                later.close()
                later.delete()
            del segments[i + 1 :]
            return
