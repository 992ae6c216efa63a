"""One broker, assembled: storage, the controller channel, the broker lifecycle, the
metadata loader and its publishers, the replica manager, the follower fetchers, the group
coordinator, the admin facade and the Kafka listeners (one server per listener, each with
its TLS context and SASL mechanisms), whose handlers (`KafkaApis`) call those parts
directly; all on one clock. SCRAM logins are checked against the credentials of the
metadata image the broker has applied last.

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
from broker.dynamic_config import DynamicBrokerConfig, DynamicConfigPublisher, with_cleaner_backoff
from broker.fenced_brokers import RecentlyFencedBrokers
from broker.fetcher import FetcherConfig, FetcherManager
from broker.group.manager import GroupCoordinator
from broker.inter_broker_client import InterBrokerClient
from broker.lifecycle import BrokerLifecycleManager
from broker.metadata_loader import MetadataLoader
from broker.network import KafkaServer
from broker.replica_manager import ReplicaManager
from broker.security.authorizer import StandardAuthorizer
from broker.security.sasl_server import SaslServerFactory
from broker.txn.manager import TransactionCoordinator
from common.clock import SYSTEM_CLOCK, Clock
from common.controller_plane import plane_client
from common.scram import ScramMechanism
from common.topics import GROUP_METADATA_TOPIC_NAME
from metadata_log.image import ScramCredential
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
            # https and the token per the controller listener's settings (ConfigError if bad)
            security=plane_client(config.properties),
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
            previous_broker_epoch=lambda: self.log_manager.previous_broker_epoch,
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
            security=config.inter_broker_security,
        )
        self.alter_partitions = AlterPartitionManager(
            config.node_id, self.channel.alter_partitions, lambda: self.lifecycle.broker_epoch
        )
        # The configs now: server.properties under the dynamic broker configs.
        self.dynamic_config = DynamicBrokerConfig(
            config.node_id, config.properties, config.log_config
        )
        self.replica_manager = ReplicaManager(
            config,
            self.log_manager,
            fetchers=self.fetchers,
            alter_partitions=self.alter_partitions,
            clock=clock,
            dynamic=self.dynamic_config,
        )
        self.fetchers.target = self.replica_manager
        self.fetchers.on_refused = self.lifecycle.report_refused  # fast fencing of the dead
        self.admin = Admin(
            self.channel,
            config,
            lambda: self.lifecycle.broker_epoch,
        )
        self.groups = GroupCoordinator(
            config.group_config,
            self.replica_manager,
            self.admin.create_offsets_topic,
            config.offsets_commit_timeout_ms,
            clock=clock,
        )
        # Requests to other brokers' inter-broker listeners (WriteTxnMarkers, KIP-890
        # verification), with that listener's TLS and SASL settings.
        self.inter_broker = InterBrokerClient(
            config.node_id,
            self.replica_manager.leader_endpoint,
            config.inter_broker_security,
            config.request_timeout_ms,
        )
        self.txn = TransactionCoordinator(
            config.node_id,
            config.txn_config,
            self.replica_manager,
            self.replica_manager.image,
            self.inter_broker,
            self.admin.init_producer_id,
            lambda group: (GROUP_METADATA_TOPIC_NAME, self.groups.core.partition_for(group)),
            lambda: self.admin.create_txn_state_topic(len(self.replica_manager.image().brokers)),
            config.offsets_commit_timeout_ms,  # Kafka: transaction.state.log's own, same default
            clock=clock,
        )
        # KIP-890 part 1: the produce path asks the coordinator before the first
        # transactional batch of a producer on a partition, while
        # transaction.partition.verification.enable (a live config) says so.
        self._set_verifier(self.dynamic_config)
        # Markers on __consumer_offsets complete the groups' TxnOffsetCommits.
        self.replica_manager.marker_listeners.append(self.groups.on_txn_marker)
        # None: authorization off (authorizer.class.name unset), everything allowed.
        self.authorizer = (
            StandardAuthorizer(config.super_users, config.allow_everyone_if_no_acl_found)
            if config.authorizer_enabled
            else None
        )
        self.fenced_brokers = RecentlyFencedBrokers(clock=clock)
        # Who sees each applied metadata batch, in this order (one line per publisher).
        self.loader.publishers += [
            # first: the broker configs everything below reads (log defaults, min ISR)
            DynamicConfigPublisher(self.dynamic_config, self._apply_dynamic_config),
            self.replica_manager,  # the others read the replicas it made or dropped
            *([self.authorizer] if self.authorizer is not None else []),  # the ACL bindings
            self.groups,  # loads or drops the groups of the offsets partitions we lead
            self.txn,  # loads or drops the transactions of the __transaction_state we lead
            self.fenced_brokers,  # which fenced brokers Metadata answers still name
            self.lifecycle,  # last: "caught up" must mean every publisher above applied it
        ]
        self.apis = KafkaApis(
            config.node_id,
            config.cluster_id,
            self.replica_manager,
            self.groups,
            self.admin,
            {x.name: (x.host, x.port) for x in config.advertised_listeners},
            authorizer=self.authorizer,
            txn=self.txn,
            fenced_brokers=self.fenced_brokers,
        )
        self.listeners: list[KafkaServer] = []
        self._stop_tasks = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._logs_open = False

    def _apply_dynamic_config(self, dynamic: DynamicBrokerConfig) -> None:
        """Dynamic broker configs read outside the logs: the log cleaner's back-off and the
        defaults of logs created from now on (the replica manager reconfigures the rest)."""
        self.log_manager.config = with_cleaner_backoff(self.log_manager.config, dynamic.layers)
        self.log_manager.default_config = dynamic.log_config
        self._set_verifier(dynamic)

    def _set_verifier(self, dynamic: DynamicBrokerConfig) -> None:
        raw = dynamic.layers.merged().get("transaction.partition.verification.enable", "true")
        enabled = raw.strip().lower() != "false"
        self.replica_manager.verifier = self.txn.verify if enabled else None

    # -- lifecycle ---------------------------------------------------------------------------

    async def startup(self) -> None:
        """Returns once unfenced; waits as long as it takes (the caller bounds it)."""
        await asyncio.to_thread(self.log_manager.startup)
        self._logs_open = True
        await self.channel.start()
        self.loader.start()
        self.lifecycle.start()
        await self.lifecycle.wait_until_caught_up(float("inf"))
        for x in self.config.listeners:
            server = self._kafka_server(x.name, x.host, x.port)
            self.listeners.append(server)
            await server.start()
        self.groups.start()
        self.txn.start()
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

    def _kafka_server(self, name: str, host: str, port: int) -> KafkaServer:
        config = self.config
        security = config.security(name)
        sasl = None
        if security.sasl_mechanisms:
            sasl = SaslServerFactory(security, self.scram_credential).authenticator
        return KafkaServer(
            self.apis.handle,
            host,
            port,
            max_request_bytes=config.socket_request_max_bytes,
            idle_ms=config.connections_max_idle_ms,
            listener_name=name,
            security_protocol=security.security_protocol,
            ssl_context=security.ssl_context,
            ssl_handshake_timeout_s=config.ssl_handshake_timeout_ms / 1000,
            authenticator=sasl,
            sasl_max_receive_bytes=config.sasl_server_max_receive_size,
            failed_authentication_delay_ms=config.failed_authentication_delay_ms,
        )

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """`user`'s SCRAM credential for `mechanism` in the latest applied metadata."""
        return self.replica_manager.image().scram_credentials.get((user, int(mechanism)))

    async def controlled_shutdown(self) -> None:
        """Hand our leaderships over (the listener keeps serving meanwhile)."""
        timeout = self.config.controlled_shutdown_timeout_ms / 1000
        if await self.lifecycle.controlled_shutdown(timeout):
            log.info("controlled shutdown complete broker=%d", self.broker_id)
        else:
            log.warning("controlled shutdown timed out after %.0fs; stopping", timeout)

    async def shutdown(self) -> None:
        """Stop everything; after `controlled_shutdown` for a clean handover."""
        for server in self.listeners:
            with contextlib.suppress(Exception):
                await server.close()
        self.listeners = []
        await self.groups.shutdown()
        await self.txn.shutdown()
        await self.inter_broker.close()
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
            await asyncio.to_thread(self.replica_manager.snapshot_producer_states)
            await asyncio.to_thread(self.log_manager.shutdown, self.lifecycle.broker_epoch)
            self._logs_open = False
