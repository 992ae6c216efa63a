"""The admin facade the API handlers call: what a broker asks of the active controller
on a client's behalf (CreateTopics, DeleteTopics, CreatePartitions, CreateAcls,
DeleteAcls, AlterUserScramCredentials, and the topics it creates itself: auto-created
ones and `__consumer_offsets`), the producer-id block that InitProducerId draws from,
and config changes (AlterConfigs, IncrementalAlterConfigs).

As Kafka's ForwardingManager, AutoTopicCreationManager and ProducerIdManager, in one
small room: a controller that cannot be reached becomes a Kafka error code in the
answer (REQUEST_TIMED_OUT, or the controller's own code), never an exception, so a
handler answers every topic of a request.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

from broker.config import BrokerConfig
from broker.controller_channel import ControllerError, ControllerUnavailable
from common.errors import Errors
from common.topics import GROUP_METADATA_TOPIC_NAME, TRANSACTION_STATE_TOPIC_NAME
from metadata_log.controller_api import (  # elections and quorum status
    AclCreationResult,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
    CreatableTopic,
    CreatableTopicResult,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    PartitionResult,
    QuorumStatus,
    TopicResult,
)

log = logging.getLogger(__name__)


class ActiveController(Protocol):
    """The admin calls of the broker's channel to the active controller."""

    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse: ...
    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse: ...
    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse: ...
    async def allocate_producer_ids(self, broker_epoch: int) -> AllocateProducerIdsResponse: ...
    async def create_acls(self, req: CreateAclsRequest) -> CreateAclsResponse: ...
    async def delete_acls(self, req: DeleteAclsRequest) -> DeleteAclsResponse: ...
    async def alter_user_scram_credentials(
        self, req: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse: ...
    async def elect_leaders(self, req: ElectLeadersRequest) -> ElectLeadersResponse: ...
    async def alter_partition_reassignments(
        self, req: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse: ...
    async def list_partition_reassignments(
        self, req: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse: ...
    async def quorum_status(self) -> QuorumStatus: ...
    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> None: ...


class Admin:
    def __init__(
        self,
        controller: ActiveController,
        config: BrokerConfig,
        broker_epoch: Callable[[], int],  # named in producer-id requests (as Kafka's)
    ) -> None:
        self.controller = controller
        self._broker_epoch = broker_epoch
        self.config = config
        self.auto_create_topics_enable = config.auto_create_topics_enable
        self._pid_lock = asyncio.Lock()
        self._pid_next = 0
        self._pid_end = 0

    # -- forwarded to the active controller --------------------------------------------------

    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse:
        try:
            return await self.controller.create_topics(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return CreateTopicsResponse(
                [CreatableTopicResult(t.name, code, error_message=msg) for t in req.topics]
            )

    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse:
        try:
            return await self.controller.delete_topics(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return DeleteTopicsResponse([TopicResult(n, code, msg) for n in req.names])

    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse:
        try:
            return await self.controller.create_partitions(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return CreatePartitionsResponse([TopicResult(t.name, code, msg) for t in req.topics])

    async def create_acls(self, req: CreateAclsRequest) -> CreateAclsResponse:
        try:
            return await self.controller.create_acls(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return CreateAclsResponse([AclCreationResult(code, msg) for _ in req.creations])

    async def delete_acls(self, req: DeleteAclsRequest) -> DeleteAclsResponse:
        try:
            return await self.controller.delete_acls(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return DeleteAclsResponse([DeleteAclsFilterResult(code, msg) for _ in req.filters])

    async def alter_user_scram_credentials(
        self, req: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse:
        try:
            return await self.controller.alter_user_scram_credentials(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            users = sorted({x.name for x in req.deletions} | {x.name for x in req.upsertions})
            return AlterUserScramCredentialsResponse(
                [AlterUserScramCredentialsResult(u, code, msg) for u in users]
            )

    async def elect_leaders(self, req: ElectLeadersRequest) -> ElectLeadersResponse:
        try:
            return await self.controller.elect_leaders(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return ElectLeadersResponse(
                [PartitionResult(tp.topic, tp.partition, code, msg) for tp in req.partitions or []]
            )

    async def alter_partition_reassignments(
        self, req: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse:
        try:
            return await self.controller.alter_partition_reassignments(req)
        except (ControllerError, ControllerUnavailable) as exc:
            code, msg = _failure(exc)
            return AlterPartitionReassignmentsResponse(
                [PartitionResult(p.topic, p.partition, code, msg) for p in req.partitions]
            )

    async def list_partition_reassignments(
        self, req: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse | tuple[int, str]:
        """The ongoing reassignments, or (error code, message) when the controller
        could not answer."""
        try:
            return await self.controller.list_partition_reassignments(req)
        except (ControllerError, ControllerUnavailable) as exc:
            return _failure(exc)

    async def quorum_status(self) -> QuorumStatus:
        """The active controller's view of the quorum (DescribeQuorum); raises
        ControllerError or ControllerUnavailable."""
        return await self.controller.quorum_status()

    async def create_offsets_topic(self) -> None:
        """__consumer_offsets on first use, compacted, as Kafka creates it."""
        cfg = self.config
        topic = CreatableTopic(
            name=GROUP_METADATA_TOPIC_NAME,
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
                    GROUP_METADATA_TOPIC_NAME,
                    cfg.offsets_topic_replication_factor,
                    r.error_code,
                    r.error_message or "",
                )

    async def create_txn_state_topic(self, live_brokers: int) -> None:
        """__transaction_state on first use (FindCoordinator for a transactional id),
        compacted, its replication factor capped at the brokers there are (so a small
        cluster gets a coordinator) and min ISR at that factor."""
        cfg = self.config
        rf = max(1, min(cfg.txn_topic_replication_factor, live_brokers))
        topic = CreatableTopic(
            name=TRANSACTION_STATE_TOPIC_NAME,
            num_partitions=cfg.txn_config.num_partitions,
            replication_factor=rf,
            configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(cfg.txn_topic_segment_bytes),
                "min.insync.replicas": str(min(cfg.txn_topic_min_isr, rf)),
                "unclean.leader.election.enable": "false",
                "compression.type": "uncompressed",
            },
        )
        resp = await self.create_topics(CreateTopicsRequest(topics=[topic]))
        for r in resp.topics:
            if r.error_code not in (Errors.NONE, Errors.TOPIC_ALREADY_EXISTS):
                log.warning(
                    "cannot create %s (replication factor %d): error %d %s",
                    TRANSACTION_STATE_TOPIC_NAME,
                    rf,
                    r.error_code,
                    r.error_message or "",
                )

    # -- producer ids ------------------------------------------------------------------------

    async def init_producer_id(self) -> tuple[int, int, int]:
        """(error code, producer id, epoch 0) from the block the controller gave us; while
        there is none, COORDINATOR_LOAD_IN_PROGRESS (what Kafka answers then)."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                try:
                    resp = await self.controller.allocate_producer_ids(self._broker_epoch())
                except (ControllerError, ControllerUnavailable) as exc:
                    log.info("no producer id block: %s", exc)
                    return Errors.COORDINATOR_LOAD_IN_PROGRESS, -1, -1
                if resp.error_code != Errors.NONE or resp.producer_id_len <= 0:
                    return Errors.COORDINATOR_LOAD_IN_PROGRESS, -1, -1
                self._pid_next = resp.producer_id_start
                self._pid_end = resp.producer_id_start + resp.producer_id_len
            pid = self._pid_next
            self._pid_next += 1
            return Errors.NONE, pid, 0

    # -- configs ---------------------------------------------------------------------------

    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> tuple[int, str | None]:
        """One resource's config change: (error code, message)."""
        try:
            await self.controller.alter_configs(req)
        except (ControllerError, ControllerUnavailable) as exc:
            return _failure(exc)
        return Errors.NONE, None


def _failure(exc: Exception) -> tuple[int, str]:
    if isinstance(exc, ControllerError):
        return exc.error_code, exc.message
    return Errors.REQUEST_TIMED_OUT, f"the controller did not answer in time: {exc}"
