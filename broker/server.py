"""One broker, assembled: storage, the controller channel, the broker lifecycle, the
metadata loader and its publishers, the replica manager, the follower fetchers, the group
coordinator, the admin facade and the Kafka listener, whose handlers (`KafkaApis`) call
those parts directly; all on one clock.

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

from broker.admin import Admin
from broker.alter_partition import AlterPartitionManager
from broker.apis import KafkaApis
from broker.config import BrokerConfig
from broker.controller_channel import ControllerChannel
from broker.fetcher import FetcherConfig, FetcherManager
from broker.group.manager import GroupCoordinator
from broker.lifecycle import BrokerLifecycleManager
from broker.metadata_loader import MetadataLoader
from broker.network import KafkaServer
from broker.replica_manager import ReplicaManager
from broker.security.authorizer import StandardAuthorizer
from common.clock import SYSTEM_CLOCK, Clock
from metadata_log.records import Endpoint
from storage.log_manager import LogManager

log = logging.getLogger("broker.server")


class BrokerServer:
    def __init__(self, config: BrokerConfig, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.broker_id = config.node_id
        self.cluster_id = config.cluster_id
        self.clock = clock  # the one clock every asyncio shell below reads and sleeps on
        self.log_manager = LogManager(config.log_dirs, config.log_config, config.log_manager_config)
        self.channel = ControllerChannel(
            config.node_id,
            list(config.controller_endpoints.values()),
            request_timeout_ms=config.request_timeout_ms,
            clock=clock,
        )
        self.lifecycle = BrokerLifecycleManager(
            self.channel,
            [
                Endpoint(x.name, x.host, x.port, x.security_protocol)
                for x in config.advertised_listeners
            ],
            rack=config.rack,
            heartbeat_interval_ms=config.heartbeat_interval_ms,
            clock=clock,
        )
        self.loader = MetadataLoader(self.channel, clock=clock)
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
            broker_epoch=lambda: self.lifecycle.broker_epoch,
            clock=clock,
        )
        self.alter_partitions = AlterPartitionManager(
            config.node_id, self.channel.alter_partition, lambda: self.lifecycle.broker_epoch
        )
        self.replica_manager = ReplicaManager(
            config,
            self.log_manager,
            fetchers=self.fetchers,
            alter_partitions=self.alter_partitions,
            clock=clock,
        )
        self.fetchers.target = self.replica_manager
        self.admin = Admin(
            self.channel,
            config,
            self.replica_manager.topic_configs,
            lambda: self.lifecycle.broker_epoch,
        )
        self.groups = GroupCoordinator(
            config.group_config,
            self.replica_manager,
            self.admin.create_offsets_topic,
            config.offsets_commit_timeout_ms,
            clock=clock,
        )
        # None: authorization off (authorizer.class.name unset), everything allowed.
        self.authorizer = (
            StandardAuthorizer(config.super_users, config.allow_everyone_if_no_acl_found)
            if config.authorizer_enabled
            else None
        )
        # Who sees each applied metadata batch, in this order (one line per publisher).
        self.loader.publishers += [
            self.replica_manager,  # first: the others read the replicas it made or dropped
            *([self.authorizer] if self.authorizer is not None else []),  # the ACL bindings
            self.groups,  # loads or drops the groups of the offsets partitions we lead
            # (to come: dynamic configs)
            self.lifecycle,  # last: "caught up" must mean every publisher above applied it
        ]
        own = config.advertised(config.listener.name)
        self.apis = KafkaApis(
            config.node_id,
            config.cluster_id,
            config.listener.name,
            self.replica_manager,
            self.groups,
            self.admin,
            None if own is None else (own.host, own.port),
            authorizer=self.authorizer,
        )
        self.listener: KafkaServer | None = None
        self._stop_tasks = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._logs_open = False

    # -- lifecycle ---------------------------------------------------------------------------

    async def startup(self) -> None:
        """Returns once unfenced; waits as long as it takes (the caller bounds it)."""
        await asyncio.to_thread(self.log_manager.startup)
        self._logs_open = True
        await self.channel.start()
        self.loader.start()
        self.lifecycle.start()
        await self.lifecycle.wait_until_caught_up(float("inf"))
        x = self.config.listener
        self.listener = KafkaServer(
            self.apis.handle,
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
        self.lifecycle.ready_to_unfence()
        await self.lifecycle.wait_until_unfenced(float("inf"))

    async def controlled_shutdown(self) -> None:
        """Hand our leaderships over (the listener keeps serving meanwhile)."""
        timeout = self.config.controlled_shutdown_timeout_ms / 1000
        if await self.lifecycle.controlled_shutdown(timeout):
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
        await self.loader.stop()
        await self.lifecycle.stop()
        await self.channel.close()
        await self.replica_manager.wait_file_work()
        if self._logs_open:
            with contextlib.suppress(OSError):
                await self.replica_manager.checkpoint_high_watermarks()
            await asyncio.to_thread(self.log_manager.shutdown)
            self._logs_open = False
