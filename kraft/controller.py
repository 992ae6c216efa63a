"""The quorum controller: a thin router over Kafka-shaped managers (as Kafka's
QuorumController), sans-I/O like them: an image, a request and `now_ms` in; a
`Decision` (records plus the response once they commit) out. No sockets, threads,
clocks or randomness: the node feeds time and gives the generators of topic ids and ACL
ids (a simulation gives seeded ones).

The managers, each in its own module:
- `ClusterControlManager` (kraft/cluster_control.py): registrations, sessions and
  heartbeats, fencing and unfencing, controlled shutdown;
- `ReplicationControlManager` (kraft/replication_control.py): topics, partitions, ISR
  changes (AlterPartition), elections, replica placement;
- `ConfigurationControlManager` (kraft/configuration_control.py): config records and
  their validation;
- `ProducerIdControlManager` (kraft/producer_id_control.py): producer id blocks;
- `AclControlManager` (kraft/acl_control.py): ACL bindings (CreateAcls, DeleteAcls);
- `ScramControlManager` (kraft/scram_control.py): SCRAM credentials
  (AlterUserScramCredentials);
- `ReassignmentControlManager` (kraft/reassignment.py): partition reassignments
  (AlterPartitionReassignments, ListPartitionReassignments, KIP-455).

The one decision that spans two managers is a broker's change of state: the cluster
manager writes the broker's record and says which brokers it makes (un)usable, and the
replication manager adds the partition changes that follow to the same batch, so no
committed image ever has a fenced leader. Any batch that changes partitions (an ISR
change, a fencing) is then given to the reassignment manager, which adds the changes
that complete reassignments the new ISRs allow (`_completing`).

Adding a manager: write it in its own
module, with one method `(image, request, now_ms) -> Decision` per request type; build it
in `__init__` (give it the managers it reads, never the other way round: the replication
manager reads the cluster and configuration managers); add one row per request type to
`self._routes`. Then give `ControllerService` (kraft/service.py) and `ControllerNode` one
method per request (each is `await self._call(req)`, which runs `decide`), and the HTTP
API (kraft/http_api.py) one row per request in `make_app`'s route table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kraft.acl_control import AclControlManager
from kraft.cluster_control import BrokerTransition, ClusterControlManager
from kraft.configuration_control import ConfigurationControlManager
from kraft.decision import ControllerConfig, Decision
from kraft.leader_balance import LeaderBalanceConfig, LeaderBalancer
from kraft.partition_index import PartitionIndex
from kraft.producer_id_control import ProducerIdControlManager
from kraft.reassignment import ReassignmentControlManager
from kraft.replication_control import ReplicationControlManager
from kraft.scram_control import ScramControlManager
from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AlterPartitionReassignmentsRequest,
    AlterPartitionRequest,
    AlterPartitionsRequest,
    AlterUserScramCredentialsRequest,
    BrokerHeartbeatRequest,
    BrokerRegistrationRequest,
    BrokerUnreachableRequest,
    CreateAclsRequest,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteAclsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
)
from metadata_log.image import MetadataImage
from metadata_log.records import Record

Route = Callable[[MetadataImage, Any, int], Decision]


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig,
        new_topic_id: Callable[[], str],
        new_acl_id: Callable[[], str] | None = None,  # default: the topic id generator
    ) -> None:
        self.config = config
        # Partitions by broker, shared by the managers that act on one broker's partitions.
        self.index = PartitionIndex()
        self.cluster = ClusterControlManager(self.config, self.index)
        self.configuration = ConfigurationControlManager(self.config)
        self.replication = ReplicationControlManager(
            self.config, self.cluster, self.configuration, new_topic_id, self.index
        )
        self.producer_ids = ProducerIdControlManager(self.config)
        self.acls = AclControlManager(self.config, new_acl_id or new_topic_id)
        self.scram = ScramControlManager(self.config)
        self.reassignment = ReassignmentControlManager(self.config, self.configuration, self.index)
        self.leader_balance = LeaderBalancer(
            LeaderBalanceConfig(
                config.auto_leader_rebalance_enable,
                config.leader_imbalance_per_broker_percentage,
                config.leader_imbalance_check_interval_ms,
            )
        )
        self._routes: dict[type, Route] = {
            BrokerRegistrationRequest: self._register_broker,
            BrokerHeartbeatRequest: self._heartbeat,
            BrokerUnreachableRequest: self.cluster.unreachable,
            AlterPartitionRequest: self._alter_partition,
            AlterPartitionsRequest: self._alter_partitions,
            CreateTopicsRequest: self.replication.create_topics,
            DeleteTopicsRequest: self.replication.delete_topics,
            CreatePartitionsRequest: self.replication.create_partitions,
            ElectLeadersRequest: self.replication.elect_leaders,
            IncrementalAlterConfigsRequest: self.configuration.alter_configs,
            AllocateProducerIdsRequest: self.producer_ids.allocate_producer_ids,
            CreateAclsRequest: self.acls.create_acls,
            DeleteAclsRequest: self.acls.delete_acls,
            AlterUserScramCredentialsRequest: self.scram.alter_credentials,
            AlterPartitionReassignmentsRequest: self.reassignment.alter_reassignments,
            ListPartitionReassignmentsRequest: self.reassignment.list_reassignments,
        }

    def decide(self, image: MetadataImage, request: Any, now_ms: int) -> Decision:
        """The decision on `request`, taken on the committed `image` at `now_ms`."""
        return self._routes[type(request)](image, request, now_ms)

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """This node became the active controller: fresh sessions for every broker."""
        self.cluster.activate(image, now_ms)
        self.leader_balance.activate(now_ms)

    def tick(self, image: MetadataImage, now_ms: int) -> list[Record]:
        """Fence brokers whose session expired; elect where leadership is missing; when
        nothing else changes, move leadership back to preferred replicas when due
        (kraft/leader_balance.py): its elections are taken on the image the fencing
        changes already reached, never beside them in one batch. Touches only the
        partitions of expired brokers and the offline ones (kraft/partition_index.py),
        never every partition."""
        records, transition = self.cluster.fence_expired(image, now_ms)
        records += self.replication.rebalance(image, transition, now_ms)
        if records:
            return records + self.reassignment.follow_up(image, records)
        return self.leader_balance.tick(image, now_ms)

    def _completing(self, image: MetadataImage, decision: Decision) -> Decision:
        """`decision` plus the changes completing the reassignments it makes possible
        (in Kafka every PartitionChangeBuilder checks this)."""
        return decision.plus(self.reassignment.follow_up(image, decision.records))

    def _alter_partition(
        self, image: MetadataImage, req: AlterPartitionRequest, now_ms: int
    ) -> Decision:
        """An ISR change; when it completes a reassignment, the leader learns the new
        replicas (and maybe that it no longer leads) from the metadata log."""
        return self._completing(image, self.replication.alter_partition(image, req, now_ms))

    def _alter_partitions(
        self, image: MetadataImage, req: AlterPartitionsRequest, now_ms: int
    ) -> Decision:
        """ISR changes of many partitions, one batch (Kafka's AlterPartition)."""
        return self._completing(image, self.replication.alter_partitions(image, req, now_ms))

    # -- broker state changes: the cluster's record, then the partitions' ---------------------

    def _with_partition_changes(
        self,
        image: MetadataImage,
        decided: tuple[Decision, BrokerTransition | None],
        now_ms: int,
    ) -> Decision:
        decision, transition = decided
        if transition is None:
            return decision
        decision = decision.plus(self.replication.rebalance(image, transition, now_ms))
        return self._completing(image, decision)

    def _register_broker(
        self, image: MetadataImage, req: BrokerRegistrationRequest, now_ms: int
    ) -> Decision:
        decided = self.cluster.register_broker(image, req, now_ms)
        return self._with_partition_changes(image, decided, now_ms)

    def _heartbeat(
        self, image: MetadataImage, req: BrokerHeartbeatRequest, now_ms: int
    ) -> Decision:
        decided = self.cluster.heartbeat(image, req, now_ms)
        return self._with_partition_changes(image, decided, now_ms)
