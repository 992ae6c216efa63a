"""Applying metadata to the hosted replicas (a mixin of `ReplicaManager`, its metadata
publisher side; the data path stays in broker/replica_manager.py).

Each metadata update is applied in three steps so that file work never runs on the
event loop and no request sees a half-made change:
1. (loop) partitions whose role or leader epoch changes are marked `transitioning`
   (requests get the retriable NOT_LEADER_OR_FOLLOWER) and leave their fetcher;
2. (thread) logs are created, opened, checked against the topic id, deleted; new logs'
   producer state is rebuilt from batch headers; new leader epochs enter the epoch
   cache at the LEO;
3. (loop) the sans-I/O `Partition` cores take their new role; followers join fetchers.
Topic and broker config records reconfigure the logs they concern.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from broker.change_feed import ChangeFeed
from broker.config import BrokerConfig
from broker.dynamic_config import DynamicBrokerConfig
from broker.fetcher import FetcherManager
from broker.hosted import HostedPartition, finish, start_leader_epoch
from broker.metadata_publisher import LoaderManifest
from broker.partition import NO_LEADER, Partition
from broker.producer_recovery import restore_producer_state
from broker.producer_state import ProducerStateManager
from broker.replication_quota import ReplicationQuota
from broker.stray_guard import StrayGuard
from common.errors import Errors
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import BROKER_RESOURCE, TOPIC_RESOURCE
from storage.checkpoint import PARTITION_METADATA, CheckpointError, write_partition_metadata
from storage.config import ConfigError, LogConfig
from storage.log import Log
from storage.log_manager import LogManager

log = logging.getLogger("broker.replica_manager")

# A metadata update's file work (new logs, new leader epochs, deletions) runs on this
# many threads once it concerns this many partitions.
FILE_WORKERS = 16
PARALLEL_FILE_WORK_FROM = 32
TP = tuple[str, int]


@dataclass(eq=False)
class _Plan:
    tp: TP
    topic_id: str
    reg: PartitionRegistration
    leader: bool
    hosted: HostedPartition | None
    log: Log | None = None  # set by the file step for new partitions
    producers: ProducerStateManager | None = None


class ReplicaChangesMixin:
    """The state it changes is the manager's (set in `ReplicaManager.__init__`)."""

    config: BrokerConfig
    broker_id: int
    dynamic: DynamicBrokerConfig
    log_manager: LogManager
    fetchers: FetcherManager | None
    stray_guard: StrayGuard
    follower_quota: ReplicationQuota
    change_feed: ChangeFeed
    _clock_ms: Callable[[], int]
    _image: MetadataImage
    _partitions: dict[TP, HostedPartition]
    _file_work: asyncio.Future[int] | None
    _checkpointed_hw: dict[TP, int]

    if TYPE_CHECKING:

        def _min_isr(self, topic: str, image: MetadataImage | None = None) -> int: ...

    def _log_config(self, topic: str, image: MetadataImage) -> LogConfig:
        try:
            return self.dynamic.topic_log_config(image.topic_config(topic))
        except ConfigError as exc:  # the controller validates; never refuse to host data
            log.warning("topic %s has a bad config, using broker defaults: %s", topic, exc)
            return self.dynamic.log_config

    # -- metadata ----------------------------------------------------------------------------

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        """MetadataPublisher: apply one metadata update (the loader awaits it before the
        next, and before the publishers after us see it)."""
        old, new, snapshot = manifest.previous, image, manifest.snapshot
        changes = delta.local_changes(self.broker_id)
        targets = {**changes.leaders, **changes.followers}
        deletes = {tp for tp in changes.deletes if tp not in targets}
        # Work per change, not per hosted partition: outside a snapshot only the partitions
        # the delta names can have been recreated (10,000 hosted, a NoOp every 5 s).
        hosted = self._partitions
        candidates = hosted if snapshot else (tp for tp in targets if tp in hosted)
        for tp in candidates:
            h = hosted[tp]
            topic_id = targets[tp][0] if tp in targets else None
            if (snapshot and tp not in targets) or (topic_id and topic_id != h.core.topic_id):
                deletes.add(tp)  # gone while we were behind, or the topic was recreated
        if snapshot and not self.stray_guard.may_delete_strays(image.offset):
            log.warning(
                "metadata snapshot at offset %d is older than offset %d, where replicas were "
                "created here: not deleting stray replicas on its word",
                image.offset,
                self.stray_guard.offset,
            )
        elif snapshot:
            # Stray replicas (Kafka's LogManager.findStrayReplicas, KRaft): logs on disk,
            # e.g. found at startup, that the whole image no longer assigns to us; the
            # partition was reassigned away or deleted while we were down or behind.
            for tp in self.log_manager.logs:
                if tp not in targets and tp not in deletes:
                    log.info("deleting stray replica %s-%d: not assigned to us", *tp)
                    deletes.add(tp)
        plans = [
            _Plan(tp, topic_id, reg, tp in changes.leaders, self._partitions.get(tp))
            for tp, (topic_id, reg) in targets.items()
        ]
        for pl in plans:
            if pl.tp in deletes:
                pl.hosted = None  # recreated topic: a fresh log after the old one goes
        on_disk = self.log_manager.logs
        if any(pl.hosted is None and pl.tp not in on_disk for pl in plans):
            self.stray_guard.record(image.offset)  # new replicas: see broker/stray_guard.py
        heavy = [pl for pl in plans if self._needs_transition(pl)]
        # 1. fence requests and fetchers off the partitions that change
        for tp in deletes:
            if (h := self._partitions.get(tp)) is not None:
                h.transitioning = True
                h.wake()
        for pl in heavy:
            if pl.hosted is not None:
                pl.hosted.transitioning = True
                pl.hosted.wake()
        if self.fetchers is not None:
            await self.fetchers.remove_partitions(deletes | {pl.tp for pl in heavy})
        # 2. file work, in a thread
        failed = 0
        # Shielded: if the update is cancelled (shutdown), the thread still runs to the
        # end, and `wait_file_work` lets shutdown wait for it before closing the logs.
        try:
            if deletes or heavy:  # most updates (ISR changes, NoOps) have none: no thread
                work = asyncio.ensure_future(
                    asyncio.to_thread(self._prepare_files, deletes, heavy, new)
                )
                self._file_work = work
                failed = await asyncio.shield(work)
        finally:
            # 3. install the new roles
            self._install(deletes, plans, heavy, new)
        self._update_configs(old, new)
        rate = self._follower_throttle(new)
        if rate != self.follower_quota.rate_bytes_per_s:
            log.info("follower.replication.throttled.rate is now %s", rate or "unlimited")
            self.follower_quota.rate_bytes_per_s = rate
        if failed:
            # The loader retries the update (from a snapshot): the failed ones again.
            raise RuntimeError(f"{failed} replicas could not be prepared (see above)")

    def _needs_transition(self, pl: _Plan) -> bool:
        h = pl.hosted
        if h is None:
            return True
        core = h.core
        return (
            pl.leader != core.is_leader
            or pl.reg.leader_epoch != core.leader_epoch
            or pl.reg.leader != core.leader
        )

    def _prepare_files(self, deletes: set[TP], heavy: list[_Plan], image: MetadataImage) -> int:
        """Returns how many partitions failed (each is logged; the others go ahead).

        Each partition's files are its own, so a big update (10,000 new partitions, a
        failover making us leader of 3,000) spreads them over FILE_WORKERS threads: the
        time goes into fsyncs (a new leader epoch is fsynced, 2 per partition, ~3.5 ms
        here), which release the GIL and which the disk serves in parallel (16 threads:
        0.3 ms per file instead of 3.5)."""
        # Deletions first: a recreated topic's old log must be gone before the new one.
        failed = self._run_file_jobs([lambda tp=tp: self._delete_files(tp) for tp in deletes])
        return failed + self._run_file_jobs(
            [lambda pl=pl: self._prepare_one(pl, image) for pl in heavy]
        )

    @staticmethod
    def _run_file_jobs(jobs: list[Callable[[], bool]]) -> int:
        """Run independent per-partition jobs; how many failed."""
        if len(jobs) < PARALLEL_FILE_WORK_FROM:
            return sum(not job() for job in jobs)
        with ThreadPoolExecutor(FILE_WORKERS, thread_name_prefix="replica-files") as pool:
            return sum(not ok for ok in pool.map(lambda job: job(), jobs))

    def _delete_files(self, tp: TP) -> bool:
        try:
            if self.log_manager.delete_log(*tp):
                log.info("deleted replica %s-%d", *tp)
            return True
        except OSError as exc:
            log.error("deleting replica %s-%d failed: %r", *tp, exc)
            return False

    def _prepare_one(self, pl: _Plan, image: MetadataImage) -> bool:
        try:
            if pl.hosted is None:
                lg = self._open_log(pl.tp, pl.topic_id, image)
                pl.log, pl.producers = lg, restore_producer_state(lg, f"{pl.tp[0]}-{pl.tp[1]}")
            lg = pl.log if pl.hosted is None else pl.hosted.log
            assert lg is not None
            if pl.leader:
                start_leader_epoch(lg, pl.reg.leader_epoch)
            return True
        except (OSError, ValueError, RuntimeError) as exc:  # a bad disk, a bad log dir
            log.error("preparing replica %s-%d failed: %r", *pl.tp, exc)
            return False

    def _open_log(self, tp: TP, topic_id: str, image: MetadataImage) -> Log:
        topic, p = tp
        try:
            tid: uuid.UUID | None = uuid.UUID(topic_id)
        except ValueError:
            tid = None
        try:
            existing = self.log_manager.topic_id(topic, p)
        except CheckpointError:
            existing = None
        if existing is not None and tid is not None and existing != tid:
            # A log left from an earlier topic of the same name: it is not this topic's.
            log.info("replacing %s-%d of an older topic id %s", topic, p, existing)
            self.log_manager.delete_log(topic, p)
            self._checkpointed_hw.pop(tp, None)
        had_log = self.log_manager.get_log(topic, p) is not None
        lg = self.log_manager.get_or_create_log(topic, p, self._log_config(topic, image), tid)
        if had_log:
            lg.config = self._log_config(topic, image)
            if existing is None and tid is not None:
                write_partition_metadata(lg.dir / PARTITION_METADATA, tid)
        return lg

    def _install(
        self, deletes: set[TP], plans: list[_Plan], heavy: list[_Plan], image: MetadataImage
    ) -> None:
        now = self._clock_ms()
        for tp in deletes:
            h = self._partitions.pop(tp, None)
            if h is not None:
                finish(h.core.drain_pending(), Errors.NOT_LEADER_OR_FOLLOWER)
                h.wake()
        heavy_ids = {id(pl) for pl in heavy}
        new_followers: dict[TP, int] = {}
        for pl in plans:
            h = pl.hosted
            if h is None:
                if pl.log is None or pl.producers is None:
                    continue  # the file step failed for it; the next update retries
                core: Partition[asyncio.Future[int]] = Partition(
                    pl.tp[0], pl.tp[1], pl.topic_id, self.broker_id
                )
                core.high_watermark = min(
                    self._checkpointed_hw.get(pl.tp, 0), pl.log.log_end_offset
                )
                h = HostedPartition(core, pl.log, pl.producers, feed=self.change_feed)
                self._partitions[pl.tp] = h
            reg = pl.reg
            # KIP-966: the HW waits while the ISR is below min.insync.replicas.
            h.core.hw_min_isr = (
                self._min_isr(pl.tp[0], image) if self.config.eligible_leader_replicas_enable else 0
            )
            if h.install(reg, now):
                log.info(
                    "leader of %s-%d epoch=%d leo=%d hw=%d isr=%s",
                    *pl.tp,
                    reg.leader_epoch,
                    h.log.log_end_offset,
                    h.core.high_watermark,
                    list(reg.isr),
                )
            if not pl.leader and id(pl) in heavy_ids and reg.leader != NO_LEADER:
                new_followers[pl.tp] = reg.leader
            h.transitioning = False
            h.wake()
        self._image = image
        if self.fetchers is not None and new_followers:
            self.fetchers.add_partitions(new_followers)

    def _update_configs(self, old: MetadataImage, new: MetadataImage) -> None:
        """Topic config records reconfigure that topic's logs; broker-level ones (this
        broker's or the cluster default) change the defaults of every log."""
        if old.configs is new.configs:
            return
        broker_keys = [(BROKER_RESOURCE, ""), (BROKER_RESOURCE, str(self.broker_id))]
        if any(old.configs.get(k) != new.configs.get(k) for k in broker_keys):
            self.dynamic.update(new)  # the publisher did too; idempotent
            for topic in {t for t, _ in self._partitions}:
                self._reconfigure(topic, new)
            return
        for (rtype, name), values in new.configs.items():
            if rtype == TOPIC_RESOURCE and old.configs.get((rtype, name)) != values:
                self._reconfigure(name, new)
        for rtype, name in old.configs.keys() - new.configs.keys():
            if rtype == TOPIC_RESOURCE:
                self._reconfigure(name, new)

    def _follower_throttle(self, image: MetadataImage) -> int | None:
        """follower.replication.throttled.rate: this broker's dynamic config, else the
        cluster-wide dynamic default, else the static property (None: unlimited)."""
        name = "follower.replication.throttled.rate"
        rate = self.config.follower_replication_throttled_rate
        for key in ((BROKER_RESOURCE, str(self.broker_id)), (BROKER_RESOURCE, "")):
            value = image.configs.get(key, {}).get(name)
            if value is not None:
                try:
                    rate = int(value)
                except ValueError:
                    log.warning("ignoring %s=%r: not a number of bytes/s", name, value)
                    continue
                break
        return None if rate >= 2**63 - 1 or rate < 0 else rate

    def _reconfigure(self, topic: str, image: MetadataImage) -> None:
        cfg = self._log_config(topic, image)
        for (t, _p), h in self._partitions.items():
            if t == topic:
                h.log.config = cfg
