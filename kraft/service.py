"""What the HTTP API needs from a controller node: the seam between `http_api` (routes,
validation, redirects) and `node` (quorum, active-controller loop, decisions).

Every write method raises `NotActiveController` on a node that is not the active
controller (the API answers with a redirect to the leader, or 503 when none is known).
"""

from __future__ import annotations

from typing import Protocol

from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    BrokerUnreachableRequest,
    BrokerUnreachableResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    IncrementalAlterConfigsRequest,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    QuorumStatus,
)
from metadata_log.image import MetadataImage


class NotActiveController(Exception):
    """This node may not decide. `leader_http` is where the active controller answers
    ("host:port"), or None when no leader is known."""

    def __init__(self, leader_http: str | None) -> None:
        super().__init__(f"not the active controller (leader: {leader_http})")
        self.leader_http = leader_http


class ControllerApiError(Exception):
    """A refusal carrying a Kafka error code, for calls whose response has no error field
    (`alter_configs` returns None). Answered with 400 and an ErrorResponse body."""

    def __init__(self, error_code: int, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


class ControllerService(Protocol):
    # -- writes (active controller only) ----------------------------------------------------
    async def register_broker(
        self, req: BrokerRegistrationRequest
    ) -> BrokerRegistrationResponse: ...
    async def heartbeat(self, req: BrokerHeartbeatRequest) -> BrokerHeartbeatResponse: ...
    async def broker_unreachable(
        self, req: BrokerUnreachableRequest
    ) -> BrokerUnreachableResponse: ...
    async def alter_partition(self, req: AlterPartitionRequest) -> AlterPartitionResponse: ...
    async def alter_partitions(self, req: AlterPartitionsRequest) -> AlterPartitionsResponse: ...
    async def allocate_producer_ids(
        self, req: AllocateProducerIdsRequest
    ) -> AllocateProducerIdsResponse: ...
    async def create_topics(self, req: CreateTopicsRequest) -> CreateTopicsResponse: ...
    async def delete_topics(self, req: DeleteTopicsRequest) -> DeleteTopicsResponse: ...
    async def create_partitions(self, req: CreatePartitionsRequest) -> CreatePartitionsResponse: ...
    async def elect_leaders(self, req: ElectLeadersRequest) -> ElectLeadersResponse: ...
    async def alter_configs(self, req: IncrementalAlterConfigsRequest) -> None: ...
    async def alter_partition_reassignments(
        self, req: AlterPartitionReassignmentsRequest
    ) -> AlterPartitionReassignmentsResponse: ...
    async def list_partition_reassignments(
        self, req: ListPartitionReassignmentsRequest
    ) -> ListPartitionReassignmentsResponse: ...
    async def create_acls(self, req: CreateAclsRequest) -> CreateAclsResponse: ...
    async def delete_acls(self, req: DeleteAclsRequest) -> DeleteAclsResponse: ...
    async def alter_user_scram_credentials(
        self, req: AlterUserScramCredentialsRequest
    ) -> AlterUserScramCredentialsResponse: ...

    # -- reads (any controller: committed state) --------------------------------------------
    def status(self) -> QuorumStatus: ...
    def image(self) -> MetadataImage: ...
    def records_from(self, offset: int, max_records: int) -> list[tuple[int, bytes]] | None:
        """Committed encoded records from `offset`, or None if it fell off the tail."""
        ...

    def snapshot(self) -> tuple[MetadataImage, int]:
        """The committed image and the next offset after it."""
        ...

    async def wait_for_offset(self, offset: int, timeout_s: float) -> bool:
        """Wait until a record at `offset` is committed here (long-poll), or time out."""
        ...

    def metrics(self) -> dict[str, float]:
        """Gauges for /metrics: role, term, metadata offset, commit latency, fenced brokers,
        offline partitions."""
        ...
