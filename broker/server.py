"""One broker, assembled: storage, the controller channel, the replica manager, the
follower fetchers and the Kafka listener. `BrokerServer` is the `BrokerRuntime` the
protocol handlers see.

Start-up (as Kafka's BrokerServer): open and recover the logs, register, catch up with
the metadata log up to our registration (which creates our replicas), open the Kafka
listener, then tell the controller we are ready to be unfenced and wait until it does.
Shutdown: a controlled shutdown first (the controller moves our leaderships while we
still serve the followers catching up), then the listener, the fetchers, the final
HW checkpoint and the logs (flushed, `.kafka_cleanshutdown` written).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from broker.alter_partition import AlterPartitionManager
from broker.apis import KafkaApis
from broker.config import BrokerConfig
from broker.controller_channel import (
    ControllerChannel,
    ControllerError,
    ControllerUnavailable,
    MetadataUpdate,
)
from broker.fetcher import FetcherConfig, FetcherManager
from broker.group.manager import OFFSETS_TOPIC, GroupCoordinator
from broker.network import KafkaServer
from broker.replica_manager import ReplicaManager
from broker.results import FetchPartition, FetchResult, ListOffsetResult, ProduceResult
from metadata_log.controller_api import (
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    Errors,
    TopicResult,
)
from metadata_log.image import MetadataImage
from metadata_log.records import Endpoint
from storage.log_manager import LogManager

log = logging.getLogger("broker.server")

COORDINATOR_LOAD_IN_PROGRESS = 14  # what Kafka answers while it has no producer id block


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.cluster_id = config.cluster_id
        self.log_manager = LogManager(config.log_dirs, config.log_config, config.log_manager_config)
        self.fetchers = FetcherManager(
            config.node_id,
            FetcherConfig(
                max_wait_ms=config.replica_fetch_wait_max_ms,
                min_bytes=config.replica_fetch_min_bytes,
                max_bytes=config.replica_fetch_response_max_bytes,
                partition_max_bytes=config.replica_fetch_max_bytes,
                backoff_ms=config.replica_fetch_backoff_ms,
                socket_timeout_ms=config.replica_socket_timeout_ms,
            ),
            broker_epoch=lambda: self.channel.broker_epoch,
        )
        self.channel = ControllerChannel(
            config.node_id,
            list(config.controller_endpoints.values()),
            [
                Endpoint(x.name, x.host, x.port, x.security_protocol)
                for x in config.advertised_listeners
            ],
            rack=config.rack,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            request_timeout_ms=config.request_timeout_ms,
        )
        self.alter_partitions = AlterPartitionManager(
            config.node_id, self.channel.alter_partition, lambda: self.channel.broker_epoch
        )
        self.replica_manager = ReplicaManager(
            config, self.log_manager, fetchers=self.fetchers, alter_partitions=self.alter_partitions
        )
        self.fetchers.target = self.replica_manager
        self.groups = GroupCoordinator(
            config.group_config,
            self.replica_manager,
            self._create_offsets_topic,
            config.offsets_commit_timeout_ms,
        )
        self.channel.set_on_update(self._apply_update)
        self.auto_create_topics_enable = config.auto_create_topics_enable
        self.listener: KafkaServer | None = None
        self._stop_tasks = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._pid_lock = asyncio.Lock()
        self._pid_next = 0
        self._pid_end = 0
        self._logs_open = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def startup(self) -> None:
        """Returns once unfenced; waits as long as it takes (the caller bounds it)."""
        await asyncio.to_thread(self.log_manager.startup)
        self._logs_open = True
        await self.channel.start()
        await self.channel.wait_until_caught_up(float("inf"))
        x = self.config.listener
        self.listener = KafkaServer(
            KafkaApis(self).handle,
            x.host,
            x.port,
            max_request_bytes=self.config.socket_request_max_bytes,
        )
        await self.listener.start()
        self.groups.start()
        self._tasks = [
            asyncio.create_task(
                self.log_manager.run(self._stop_tasks, self.replica_manager.high_watermark),
                name="log-maintenance",
            ),
            asyncio.create_task(
                self.replica_manager.run_checkpoints(self._stop_tasks), name="hw-checkpoints"
            ),
            asyncio.create_task(
                self.replica_manager.run_isr_expiration(self._stop_tasks), name="isr-expiration"
            ),
        ]
        self.channel.ready_to_unfence()
        await self.channel.wait_until_unfenced(float("inf"))

    async def controlled_shutdown(self) -> None:
        """Hand our leaderships over (the listener keeps serving meanwhile)."""
        timeout = self.config.controlled_shutdown_timeout_ms / 1000
        if await self.channel.controlled_shutdown(timeout):
            log.info("controlled shutdown complete broker=%d", self.broker_id)
        else:
            log.warning("controlled shutdown timed out after %.0fs; stopping", timeout)

    async def shutdown(self) -> None:
        """Stop everything; after `controlled_shutdown` for a clean handover."""
        if self.listener is not None:
            with contextlib.suppress(Exception):
                await self.listener.close()
            self.listener = None
        await self.groups.shutdown()
        await self.fetchers.shutdown()
        await self.alter_partitions.shutdown()
        self.replica_manager.shutdown()
        self._stop_tasks.set()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.channel.stop()
        await self.replica_manager.wait_file_work()
        if self._logs_open:
            with contextlib.suppress(OSError):
                await self.replica_manager.checkpoint_high_watermarks()
            await asyncio.to_thread(self.log_manager.shutdown)
            self._logs_open = False

    async def _apply_update(self, update: MetadataUpdate) -> None:
        await self.replica_manager.apply_update(update)
        self.groups.on_metadata()  # loads or drops the groups of offsets partitions

    async def _create_offsets_topic(self) -> None:
        """__consumer_offsets on first use, compacted, as Kafka creates it."""
        cfg = self.config
        topic = CreatableTopic(
            name=OFFSETS_TOPIC,
            num_partitions=cfg.group_config.num_partitions,
            replication_factor=cfg.offsets_topic_replication_factor,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(cfg.offsets_topic_segment_bytes),
            },
        )
        resp = await self.create_topics(CreateTopicsRequest(topics=[topic]))
        for r in resp.topics:
            if r.error_code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning(
                    "cannot create %s (offsets.topic.replication.factor=%d): error %d %s",
                    OFFSETS_TOPIC,
                    cfg.offsets_topic_replication_factor,
                    r.error_code,
                    r.error_message or "",
                )

    # -- BrokerRuntime: metadata -------------------------------------------------------------

    def image(self) -> MetadataImage:
        return self.replica_manager.image()

    def advertised_endpoint(self, broker_id: int) -> tuple[str, int] | None:
        name = self.config.listener.name
        if broker_id == self.broker_id:
            own = self.config.advertised(name)
            if own is not None:
                return own.host, own.port
        b = self.image().brokers.get(broker_id)
        if b is None:
            return None
        ep = b.endpoint(name)
        return None if ep is None else (ep.host, ep.port)

    # -- BrokerRuntime: data path --------------------------------------------------------------

    async def produce(
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> ProduceResult:
        return await self.replica_manager.produce(topic, partition, records, acks, timeout_ms)

    def fetch(self, p: FetchPartition, replica_id: int, isolation_level: int) -> FetchResult:
        return self.replica_manager.fetch(p, replica_id, isolation_level)

    async def wait_for_data(
        self,
        partitions: list[FetchPartition],
        min_bytes: int,
        max_wait_ms: int,
        replica_id: int = -1,
    ) -> None:
        await self.replica_manager.wait_for_data(partitions, min_bytes, max_wait_ms, replica_id)

    def list_offset(
        self, topic: str, partition: int, timestamp: int, current_leader_epoch: int
    ) -> ListOffsetResult:
        return self.replica_manager.list_offset(topic, partition, timestamp, current_leader_epoch)

    def offset_for_leader_epoch(
        self, topic: str, partition: int, leader_epoch: int, current_leader_epoch: int
    ) -> tuple[int, int, int]:
        return self.replica_manager.offset_for_leader_epoch(
            topic, partition, leader_epoch, current_leader_epoch
        )

    async def init_producer_id(self) -> tuple[int, int, int]:
        """A fresh producer id (epoch 0) from the block the controller gave us."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                try:
                    resp = await self.channel.allocate_producer_ids()
                except (ControllerError, ControllerUnavailable) as exc:
                    log.info("no producer id block: %s", exc)
                    return COORDINATOR_LOAD_IN_PROGRESS, -1, -1
                if resp.error_code != Errors.NONE or resp.producer_id_len <= 0:
                    return COORDINATOR_LOAD_IN_PROGRESS, -1, -1
                self._pid_next = resp.producer_id_start
                self._pid_end = resp.producer_id_start + resp.producer_id_len
            pid = self._pid_next
            self._pid_next += 1
            return Errors.NONE, pid, 0

    # -- BrokerRuntime: admin ------------------------------------------------------------------

    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        try:
            return await self.channel.create_topics(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return CreateTopicsResponse(
                [CreatableTopicResult(t.name, code, error_message=msg) for t in req.topics]
            )

    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        try:
            return await self.channel.delete_topics(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return DeleteTopicsResponse([TopicResult(n, code, msg) for n in req.names])

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        try:
            return await self.channel.create_partitions(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return CreatePartitionsResponse([TopicResult(t.name, code, msg) for t in req.topics])

    def broker_configs(self) -> dict[str, tuple[str, bool]]:
        return self.config.described_configs()

    def topic_configs(self, topic: str) -> dict[str, tuple[str, bool]] | None:
        return self.replica_manager.topic_configs(topic)


def _failure(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, ControllerError):
        return exc.error_code, exc.message
    return Errors.REQUEST_TIMED_OUT, f"the controller did not answer in time: {exc}"
