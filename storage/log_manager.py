"""All partition logs of a broker across its `log.dirs`.

Opens (and, after a crash, recovers) every `<topic>-<partition>` directory at start-up,
in parallel per directory; creates and deletes logs; runs the periodic flush, retention,
checkpoint and log cleaner (compaction) work; writes `.kafka_cleanshutdown` on a clean
stop so the next start skips recovery. Checkpoint files are Kafka's, one set per log dir.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from common.clock import SYSTEM_CLOCK
from storage.checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    PARTITION_METADATA,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    CheckpointError,
    read_offsets,
    read_partition_metadata,
    write_atomically,
    write_offsets,
    write_partition_metadata,
)
from storage.cleaner import CleanerStats, clean_log, plan_cleaning
from storage.config import LogConfig
from storage.log import Log, parse_topic_partition
from storage.record_batch import RecordBatchError

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
DELETE_DIR_SUFFIX = "-delete"
TopicPartition = tuple[str, int]


class LogDirError(RuntimeError):
    """A log directory layout the broker must not start on (e.g. a partition twice)."""


@dataclass(frozen=True, slots=True)
class LogManagerConfig:
    """Kafka's broker properties for the log manager, with Kafka's defaults."""

    num_recovery_threads_per_data_dir: int = 2  # num.recovery.threads.per.data.dir
    retention_check_interval_ms: int = 300_000  # log.retention.check.interval.ms
    flush_check_interval_ms: int = 1_000  # how often flush.ms and rolled segments are checked
    checkpoint_interval_ms: int = 60_000  # log.flush.offset.checkpoint.interval.ms
    cleaner_enable: bool = True  # log.cleaner.enable
    cleaner_backoff_ms: int = 15_000  # log.cleaner.backoff.ms: pause when nothing to clean


def _read_offsets_or_empty(path: Path) -> dict[TopicPartition, int]:
    try:
        return read_offsets(path)
    except CheckpointError as exc:
        # Safe fallbacks: no recovery point means a full recovery; no log start offset
        # means the first segment's base offset. Nothing acknowledged is lost either way.
        log.warning("ignoring corrupt checkpoint: %s", exc, extra={"error": str(exc)})
        return {}


class LogManager:
    def __init__(
        self,
        log_dirs: Sequence[Path | str],
        default_config: LogConfig | None = None,
        config: LogManagerConfig | None = None,
        *,
        clock: Callable[[], int] = SYSTEM_CLOCK.wall_ms,
    ) -> None:
        if not log_dirs:
            raise ValueError("log.dirs must name at least one directory")
        self.log_dirs = [Path(d) for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self.config = config or LogManagerConfig()
        self._clock = clock
        self._logs: dict[TopicPartition, Log] = {}
        self._dir_of: dict[TopicPartition, Path] = {}
        self.had_clean_shutdown: dict[Path, bool] = {}
        # The broker epoch the clean-shutdown markers name (KIP-966's PreviousBrokerEpoch):
        # -1 unless every log dir was shut down cleanly by the same registration.
        self.previous_broker_epoch = -1
        # The periodic pass and DeleteRecords both write log-start-offset-checkpoint, from
        # worker threads: one at a time (they share the temporary file).
        self._log_start_lock = threading.Lock()

    # -- start-up ----------------------------------------------------------------------------

    def startup(self, topic_configs: dict[str, LogConfig] | None = None) -> None:
        """Open every log; recover those not cleanly shut down."""
        topic_configs = topic_configs or {}
        epochs = {_read_marker_epoch(d / CLEAN_SHUTDOWN_FILE) for d in self.log_dirs}
        self.previous_broker_epoch = epochs.pop() if len(epochs) == 1 else -1
        for d in self.log_dirs:
            d.mkdir(parents=True, exist_ok=True)
            clean = (d / CLEAN_SHUTDOWN_FILE).exists()
            self.had_clean_shutdown[d] = clean
            recovery = _read_offsets_or_empty(d / RECOVERY_POINT_CHECKPOINT)
            starts = _read_offsets_or_empty(d / LOG_START_OFFSET_CHECKPOINT)
            # Lost or corrupt, it only costs work: the next pass cleans from the log start.
            cleaned = _read_offsets_or_empty(d / CLEANER_OFFSET_CHECKPOINT)
            partition_dirs = []
            for entry in sorted(d.iterdir()):
                if not entry.is_dir():
                    continue
                if entry.name.endswith(DELETE_DIR_SUFFIX):
                    shutil.rmtree(entry, ignore_errors=True)  # a deletion cut short
                    continue
                try:
                    tp = parse_topic_partition(entry.name)
                except ValueError:
                    log.warning(
                        "skipping %s: not a partition directory", entry, extra={"dir": str(entry)}
                    )
                    continue
                if tp in self._logs or any(tp == p for p, _ in partition_dirs):
                    raise LogDirError(f"partition {tp[0]}-{tp[1]} is present in two log dirs")
                partition_dirs.append((tp, entry))

            workers = max(1, self.config.num_recovery_threads_per_data_dir)
            with ThreadPoolExecutor(max_workers=workers) as pool:
                jobs = [
                    (
                        tp,
                        path,
                        topic_configs.get(tp[0], self.default_config),
                        recovery.get(tp, 0),
                        starts.get(tp, 0),
                        clean,
                    )
                    for tp, path in partition_dirs
                ]
                for tp, opened in pool.map(self._open_log, jobs):
                    opened.cleaner_checkpoint = cleaned.get(tp)
                    self._logs[tp] = opened
                    self._dir_of[tp] = d
            # From here on a crash must lead to recovery: the marker goes.
            (d / CLEAN_SHUTDOWN_FILE).unlink(missing_ok=True)
        log.info(
            "log manager started with %d logs", len(self._logs), extra={"logs": len(self._logs)}
        )

    def _open_log(
        self, job: tuple[TopicPartition, Path, LogConfig, int, int, bool]
    ) -> tuple[TopicPartition, Log]:
        tp, path, cfg, recovery_point, log_start_offset, clean = job
        opened = Log(
            path,
            cfg,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            had_clean_shutdown=clean,
            clock=self._clock,
        )
        return tp, opened

    # -- logs --------------------------------------------------------------------------------

    @property
    def logs(self) -> dict[TopicPartition, Log]:
        return dict(self._logs)

    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(
        self,
        topic: str,
        partition: int,
        config: LogConfig | None = None,
        topic_id: uuid.UUID | None = None,
    ) -> Log:
        tp = (topic, partition)
        existing = self._logs.get(tp)
        if existing is not None:
            return existing
        # Kafka places a new log in the directory holding the fewest partitions (counted
        # only when there is a choice: 10,000 creations must not cost 10,000 scans).
        target = self.log_dirs[0]
        if len(self.log_dirs) > 1:
            counts = {d: 0 for d in self.log_dirs}
            for d in self._dir_of.values():
                counts[d] += 1
            target = min(self.log_dirs, key=lambda d: counts[d])
        path = target / f"{topic}-{partition}"
        # A directory we create ourselves holds nothing to recover, and its first files
        # need no fsync: a crash that loses them leaves an empty log whose missing or
        # torn partition.metadata / leader-epoch-checkpoint are rewritten or rebuilt.
        # (About 10 fsyncs, 20 ms, per new log otherwise: 200 s for 10,000 partitions.)
        fresh = not path.exists()
        created = Log(path, config or self.default_config, clock=self._clock, fresh=fresh)
        if topic_id is not None:
            write_partition_metadata(created.dir / PARTITION_METADATA, topic_id, durable=not fresh)
        self._logs[tp] = created
        self._dir_of[tp] = target
        return created

    def topic_id(self, topic: str, partition: int) -> uuid.UUID | None:
        opened = self._logs.get((topic, partition))
        if opened is None:
            return None
        return read_partition_metadata(opened.dir / PARTITION_METADATA)

    def delete_log(self, topic: str, partition: int) -> bool:
        """Remove a partition's log: renamed to `...-delete` first, so a crash finishes it."""
        tp = (topic, partition)
        removed = self._logs.pop(tp, None)
        if removed is None:
            return False
        self._dir_of.pop(tp, None)
        removed.close()
        doomed = removed.dir.with_name(f"{removed.dir.name}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
        removed.dir.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    # -- checkpoints -------------------------------------------------------------------------

    def _by_dir(self, value: Callable[[Log], int]) -> dict[Path, dict[TopicPartition, int]]:
        out: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, opened in list(self._logs.items()):
            d = self._dir_of.get(tp)
            if d is not None:  # deleted meanwhile (maintenance runs in a worker thread)
                out[d][tp] = value(opened)
        return out

    def checkpoint_recovery_points(self) -> None:
        for d, offsets in self._by_dir(lambda lg: lg.recovery_point).items():
            write_offsets(d / RECOVERY_POINT_CHECKPOINT, offsets)

    def checkpoint_log_start_offsets(self) -> None:
        """`log-start-offset-checkpoint`: every log's start offset (DeleteRecords moves
        it; a restart must not bring deleted records back). Callable from any thread."""
        with self._log_start_lock:
            for d, offsets in self._by_dir(lambda lg: lg.log_start_offset).items():
                write_offsets(d / LOG_START_OFFSET_CHECKPOINT, offsets)

    def checkpoint_cleaner_offsets(self) -> None:
        """`cleaner-offset-checkpoint`: each compacted log's first dirty offset."""
        out: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, opened in list(self._logs.items()):
            d, offset = self._dir_of.get(tp), opened.cleaner_checkpoint
            if d is not None and offset is not None:
                out[d][tp] = offset
        for d, offsets in out.items():
            write_offsets(d / CLEANER_OFFSET_CHECKPOINT, offsets)

    def write_high_watermarks(self, high_watermarks: dict[TopicPartition, int]) -> None:
        """`replication-offset-checkpoint`: the replica manager hands in the HWs."""
        per_dir: dict[Path, dict[TopicPartition, int]] = {d: {} for d in self.log_dirs}
        for tp, hw in high_watermarks.items():
            d = self._dir_of.get(tp)
            if d is not None:
                per_dir[d][tp] = hw
        for d, offsets in per_dir.items():
            write_offsets(d / REPLICATION_OFFSET_CHECKPOINT, offsets)

    def read_high_watermarks(self) -> dict[TopicPartition, int]:
        out: dict[TopicPartition, int] = {}
        for d in self.log_dirs:
            out.update(_read_offsets_or_empty(d / REPLICATION_OFFSET_CHECKPOINT))
        return out

    # -- periodic work -----------------------------------------------------------------------

    def flush_dirty_logs(self) -> None:
        """Flush segments rolled since the last flush (Kafka does this on roll) and apply
        `flush.ms`; both move recovery points forward."""
        for opened in list(self._logs.values()):
            try:
                if opened.recovery_point < opened.active_segment.base_offset:
                    opened.flush(opened.active_segment.base_offset)
                opened.flush_if_due()
            except RuntimeError:
                continue  # closed meanwhile (deleted)

    def cleanup_logs(
        self, high_watermark: Callable[[TopicPartition], int | None] | None = None
    ) -> int:
        """Retention for every log; segments at or above a partition's HW are kept."""
        deleted = 0
        for tp, opened in list(self._logs.items()):
            hw = high_watermark(tp) if high_watermark else None
            try:
                deleted += opened.delete_old_segments(hw)
            except RuntimeError:
                continue
        return deleted

    def clean_compacted_logs(
        self,
        high_watermark: Callable[[TopicPartition], int | None] | None = None,
        now_ms: int | None = None,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> list[CleanerStats]:
        """One round of the log cleaner: every log with cleanup.policy=compact whose dirty
        ratio (or max.compaction.lag.ms) calls for it is cleaned, the filthiest first, and
        the cleaner checkpoints are written. Returns the figures of each pass.

        Nothing at or above a partition's high watermark is cleaned; a log whose HW the
        callable does not know (None) is skipped; without a callable the bound is the
        active segment. Long-running and thread-safe: call it from a worker thread
        (asyncio.to_thread), as `run` does. Each swap takes only the log's lock, briefly.
        """
        now = self._clock() if now_ms is None else now_ms
        plans = []
        for tp, opened in list(self._logs.items()):
            if not opened.config.compact:
                continue
            hw = high_watermark(tp) if high_watermark else None
            if high_watermark is not None and hw is None:
                continue
            try:
                plan = plan_cleaning(opened, opened.cleaner_checkpoint, hw, now)
            except (RuntimeError, ValueError):
                continue  # closed meanwhile (deleted)
            if plan.needs_cleaning:
                plans.append(plan)
        plans.sort(key=lambda p: p.cleanable_ratio, reverse=True)
        results = []
        for plan in plans:
            if should_stop():
                break
            try:
                results.append(clean_log(plan, now, should_stop))
            except RuntimeError:
                continue  # the log was closed or deleted under the pass
            except (OSError, RecordBatchError) as exc:
                log.error(
                    "log cleaner failed on %s: %r",
                    plan.log.dir.name,
                    exc,
                    extra={"log": plan.log.dir.name, "error": repr(exc)},
                )
        if results:
            self.checkpoint_cleaner_offsets()
        return results

    async def _run_cleaner(
        self, stop: asyncio.Event, high_watermark: Callable[[TopicPartition], int | None] | None
    ) -> None:
        """Kafka's cleaner thread: clean while there is work, else back off (read each
        round: log.cleaner.backoff.ms is a dynamic broker config)."""
        while not stop.is_set():
            backoff = self.config.cleaner_backoff_ms / 1000
            try:
                results = await asyncio.to_thread(
                    self.clean_compacted_logs, high_watermark, None, stop.is_set
                )
            except Exception as exc:  # one failed round must not stop the cleaner
                log.error("log cleaner round failed: %r", exc, extra={"error": repr(exc)})
                results = []
            for r in results:
                log.info(
                    "cleaned %s-%d: %d to %d bytes, %d of %d records removed, offsets %d..%d",
                    *r.topic_partition,
                    r.bytes_read,
                    r.bytes_after,
                    r.records_removed,
                    r.records_read,
                    r.first_dirty_offset,
                    r.end_offset,
                    extra={"partition": "{}-{}".format(*r.topic_partition)},
                )
            if not any(r.completed for r in results):
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)

    async def run(
        self,
        stop: asyncio.Event,
        high_watermark: Callable[[TopicPartition], int | None] | None = None,
    ) -> None:
        """Run flush, retention, checkpoint and (with log.cleaner.enable) cleaner tasks
        until `stop` is set.

        The file work runs in worker threads; the Log's lock keeps it consistent.
        """
        cleaner = None
        if self.config.cleaner_enable:
            cleaner = asyncio.create_task(self._run_cleaner(stop, high_watermark))
        try:
            await self._run_maintenance(stop, high_watermark)
        finally:
            if cleaner is not None:
                if not stop.is_set():
                    cleaner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await cleaner

    async def _run_maintenance(
        self,
        stop: asyncio.Event,
        high_watermark: Callable[[TopicPartition], int | None] | None,
    ) -> None:
        cfg = self.config
        due = {"flush": 0, "retention": 0, "checkpoint": 0}
        intervals = {
            "flush": cfg.flush_check_interval_ms,
            "retention": cfg.retention_check_interval_ms,
            "checkpoint": cfg.checkpoint_interval_ms,
        }
        work = {
            "flush": self.flush_dirty_logs,
            "retention": lambda: self.cleanup_logs(high_watermark),
            "checkpoint": self._checkpoint_all,
        }
        now = self._clock()
        for name in due:
            due[name] = now + intervals[name]
        while not stop.is_set():
            wait_ms = max(0, min(due.values()) - self._clock())
            try:
                await asyncio.wait_for(stop.wait(), wait_ms / 1000)
                break
            except TimeoutError:
                pass
            now = self._clock()
            for name, at in due.items():
                if now >= at:
                    try:
                        await asyncio.to_thread(work[name])
                    except Exception as exc:  # one failed round must not stop maintenance
                        log.error(
                            "log maintenance task %s failed: %r",
                            name,
                            exc,
                            extra={"task": name, "error": repr(exc)},
                        )
                    due[name] = now + intervals[name]

    def _checkpoint_all(self) -> None:
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        self.checkpoint_cleaner_offsets()

    # -- shutdown ----------------------------------------------------------------------------

    def shutdown(self, broker_epoch: int = -1) -> None:
        """Flush and close every log, write checkpoints, then the clean-shutdown marker,
        naming the broker epoch this process ran with (Kafka's CleanShutdownFileHandler
        format) so the next registration can say its shutdown was clean (KIP-966)."""
        for opened in self._logs.values():
            opened.flush()
        self._checkpoint_all()
        for opened in self._logs.values():
            opened.close()
        marker = json.dumps({"version": 0, "brokerEpoch": broker_epoch})
        for d in self.log_dirs:
            write_atomically(d / CLEAN_SHUTDOWN_FILE, marker)
        log.info("log manager stopped cleanly", extra={"logs": len(self._logs)})


def _read_marker_epoch(path: Path) -> int:
    """The broker epoch a clean-shutdown marker names; -1 without one (an unclean
    shutdown), or for an empty or unreadable marker (older versions wrote it empty)."""
    try:
        return int(json.loads(path.read_bytes())["brokerEpoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return -1
