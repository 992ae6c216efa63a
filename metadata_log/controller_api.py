"""Request and response bodies of the controllers' HTTP API (JSON via msgspec).

Shared by the controllers (`kraft/`) and the brokers (`broker/`), which may import
`metadata_log` but never `kraft` internals. Field names follow Kafka's RPCs
(BrokerRegistration, BrokerHeartbeat, AlterPartition, CreateTopics, ...); error codes
are Kafka's numbers (`common.errors.Errors`). Unknown fields are refused, so typos are loud.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from common.acl import AclBinding, AclBindingFilter
from metadata_log.records import Endpoint, Record


class _Body(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A request: unknown fields are refused, so a typo is loud."""


class _Reply(msgspec.Struct, frozen=True):
    """A response: unknown fields are ignored, so an older broker can read a newer
    controller's answers during a rolling upgrade."""


NodeId = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
PartitionId = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
TopicId = Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
Name = Annotated[str, msgspec.Meta(min_length=1, max_length=249)]


# -- brokers -------------------------------------------------------------------------------


class BrokerRegistrationRequest(_Body):
    broker_id: NodeId
    incarnation_id: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    listeners: Annotated[list[Endpoint], msgspec.Meta(min_length=1, max_length=16)]
    rack: str | None = None
    # Kafka's PreviousBrokerEpoch (KIP-966): the broker epoch this broker had when it last
    # shut down cleanly, -1 when that shutdown was unclean (or it never ran). A value
    # other than the registered epoch takes the broker out of every ELR.
    previous_broker_epoch: Int64 = -1


class BrokerRegistrationResponse(_Reply):
    error_code: int
    broker_epoch: int = -1
    error_message: str | None = None


class BrokerHeartbeatRequest(_Body):
    broker_id: NodeId
    broker_epoch: Int64
    current_metadata_offset: Int64
    want_fence: bool = False
    want_shutdown: bool = False


class BrokerHeartbeatResponse(_Reply):
    error_code: int
    is_caught_up: bool = False
    is_fenced: bool = True
    should_shut_down: bool = False
    error_message: str | None = None


class BrokerUnreachableRequest(_Body):
    """A certain sign that broker `broker_id`'s process is gone (not merely slow): a
    follower's connection to it was refused (`reason="refused"`, sent by `reporter_id`),
    or all its connections to the active controller closed (`reason="disconnected"`, the
    controller's own HTTP layer). The controller fences it at once if its own connection
    to the broker's listeners is refused too, else if it then misses its heartbeat by
    `broker.disconnect.fence.grace.ms` (kraft/cluster_control.py)."""

    broker_id: NodeId
    broker_epoch: Int64 = -1  # the incarnation seen; -1: whichever is registered
    reporter_id: Int32 = -1  # the broker that saw it; -1: the controller itself
    reason: Literal["refused", "disconnected"] = "refused"


class BrokerUnreachableResponse(_Reply):
    error_code: int
    error_message: str | None = None


class AlterPartitionRequest(_Body):
    broker_id: NodeId
    broker_epoch: Int64
    topic_id: TopicId
    partition: PartitionId
    leader_epoch: Int32
    partition_epoch: Int32
    new_isr: Annotated[list[NodeId], msgspec.Meta(min_length=1, max_length=1024)]
    # KIP-903: the broker epoch each new ISR member fetched with, in new_isr's order
    # (-1: unknown). A member added on the strength of a fetch from an incarnation that
    # is no longer registered is refused with INELIGIBLE_REPLICA.
    new_isr_broker_epochs: Annotated[list[Int64], msgspec.Meta(max_length=1024)] = []


class AlterPartitionResponse(_Reply):
    error_code: int
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: list[int] = msgspec.field(default_factory=list)
    error_message: str | None = None


# AlterPartition across partitions (Kafka's AlterPartition request: topics x partitions).
# A broker sends every pending ISR change of its partitions in one request; the controller
# decides each partition on its own (one partition's refusal leaves the others) and
# commits the accepted changes in one Raft entry.
MAX_ALTER_PARTITIONS = 10_000  # partitions per request


class AlterPartitionItem(_Body):
    partition: PartitionId
    leader_epoch: Int32
    partition_epoch: Int32
    new_isr: Annotated[list[NodeId], msgspec.Meta(min_length=1, max_length=1024)]
    new_isr_broker_epochs: Annotated[list[Int64], msgspec.Meta(max_length=1024)] = []


class AlterPartitionTopic(_Body):
    topic_id: TopicId
    partitions: Annotated[list[AlterPartitionItem], msgspec.Meta(max_length=MAX_ALTER_PARTITIONS)]


class AlterPartitionsRequest(_Body):
    broker_id: NodeId
    broker_epoch: Int64
    topics: Annotated[list[AlterPartitionTopic], msgspec.Meta(max_length=MAX_ALTER_PARTITIONS)]

    def items(self) -> list[AlterPartitionRequest]:
        """One single-partition request per partition, in the request's order."""
        return [
            AlterPartitionRequest(
                self.broker_id,
                self.broker_epoch,
                t.topic_id,
                p.partition,
                p.leader_epoch,
                p.partition_epoch,
                p.new_isr,
                p.new_isr_broker_epochs,
            )
            for t in self.topics
            for p in t.partitions
        ]


class AlterPartitionResult(_Reply):
    """One partition's answer: the fields of AlterPartitionResponse, with its address."""

    topic_id: str
    partition: int
    error_code: int
    leader: int = -1
    leader_epoch: int = -1
    partition_epoch: int = -1
    isr: list[int] = msgspec.field(default_factory=list)
    error_message: str | None = None

    def response(self) -> AlterPartitionResponse:
        return AlterPartitionResponse(
            self.error_code,
            self.leader,
            self.leader_epoch,
            self.partition_epoch,
            self.isr,
            self.error_message,
        )


class AlterPartitionsResponse(_Reply):
    error_code: int  # request-level: NONE, or every partition failed (e.g. STALE_BROKER_EPOCH)
    results: list[AlterPartitionResult] = msgspec.field(default_factory=list)  # request order
    error_message: str | None = None


class AllocateProducerIdsRequest(_Body):
    broker_id: NodeId
    broker_epoch: Int64


class AllocateProducerIdsResponse(_Reply):
    error_code: int
    producer_id_start: int = -1
    producer_id_len: int = 0
    error_message: str | None = None


# -- admin ---------------------------------------------------------------------------------


class CreatableTopic(_Body):
    name: Name
    num_partitions: Annotated[int, msgspec.Meta(ge=-1, le=100_000)] = -1  # -1: default
    replication_factor: Annotated[int, msgspec.Meta(ge=-1, le=32_767)] = -1  # -1: default
    # partition -> replica ids; when given, num_partitions/replication_factor must be -1
    assignments: (
        Annotated[
            dict[PartitionId, Annotated[list[NodeId], msgspec.Meta(max_length=1024)]],
            msgspec.Meta(max_length=100_000),
        ]
        | None
    ) = None
    configs: Annotated[dict[str, str], msgspec.Meta(max_length=1000)] = msgspec.field(
        default_factory=dict
    )


class CreateTopicsRequest(_Body):
    topics: Annotated[list[CreatableTopic], msgspec.Meta(min_length=1, max_length=10_000)]
    validate_only: bool = False


class CreatableTopicResult(_Reply):
    name: str
    error_code: int
    topic_id: str | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    error_message: str | None = None


class CreateTopicsResponse(_Reply):
    topics: list[CreatableTopicResult]


class DeleteTopicsRequest(_Body):
    names: Annotated[list[Name], msgspec.Meta(min_length=1, max_length=10_000)]


class TopicResult(_Reply):
    name: str
    error_code: int
    error_message: str | None = None


class DeleteTopicsResponse(_Reply):
    topics: list[TopicResult]


class CreatePartitionsTopic(_Body):
    name: Name
    count: Annotated[int, msgspec.Meta(ge=1, le=100_000)]  # the new total
    assignments: list[list[NodeId]] | None = None  # replicas of each new partition


class CreatePartitionsRequest(_Body):
    topics: Annotated[list[CreatePartitionsTopic], msgspec.Meta(min_length=1)]
    validate_only: bool = False


class CreatePartitionsResponse(_Reply):
    topics: list[TopicResult]


class TopicPartition(_Body):
    topic: Name
    partition: PartitionId


class ElectLeadersRequest(_Body):
    election_type: Annotated[int, msgspec.Meta(ge=0, le=1)] = 0  # 0 preferred, 1 unclean
    partitions: list[TopicPartition] | None = None  # None: every partition


class PartitionResult(_Reply):
    topic: str
    partition: int
    error_code: int
    error_message: str | None = None


class ElectLeadersResponse(_Reply):
    results: list[PartitionResult]


# -- partition reassignments (KIP-455) -------------------------------------------------------

MAX_REASSIGNMENTS = 10_000  # partitions per request (Kafka's MAX_RECORDS_PER_USER_OP)


class ReassignablePartition(_Body):
    topic: Name
    partition: PartitionId
    # The target replicas, in preference order; None cancels the ongoing reassignment.
    replicas: Annotated[list[NodeId], msgspec.Meta(max_length=1024)] | None


class AlterPartitionReassignmentsRequest(_Body):
    partitions: Annotated[list[ReassignablePartition], msgspec.Meta(max_length=MAX_REASSIGNMENTS)]


class AlterPartitionReassignmentsResponse(_Reply):
    results: list[PartitionResult]  # one per partition asked for, in the request's order


class ListPartitionReassignmentsRequest(_Body):
    partitions: (
        Annotated[list[TopicPartition], msgspec.Meta(max_length=MAX_REASSIGNMENTS)] | None
    ) = None  # None: every partition being reassigned


class OngoingReassignment(_Reply):
    topic: str
    partition: int
    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


class ListPartitionReassignmentsResponse(_Reply):
    reassignments: list[OngoingReassignment]  # only partitions being reassigned


class IncrementalAlterConfigsRequest(_Body):
    """One resource of IncrementalAlterConfigs (SET, DELETE, APPEND, SUBTRACT) or, with
    `replace`, of AlterConfigs (`set` becomes the resource's whole config)."""

    resource_type: Literal[2, 4, 32]  # 2 topic, 4 broker, 32 group (ConfigResource types)
    resource_name: Annotated[str, msgspec.Meta(max_length=249)]  # broker: id, "" = default
    set: dict[str, str] = msgspec.field(default_factory=dict)
    delete: list[str] = msgspec.field(default_factory=list)
    append: dict[str, str] = msgspec.field(default_factory=dict)  # list items, comma-separated
    subtract: dict[str, str] = msgspec.field(default_factory=dict)
    replace: bool = False
    validate_only: bool = False


# -- ACLs and SCRAM credentials ----------------------------------------------------------------

MAX_ACL_OPS = 10_000  # Kafka's MAX_RECORDS_PER_USER_OP: bindings created or removed at once
Int8 = Annotated[int, msgspec.Meta(ge=-128, le=127)]


class CreateAclsRequest(_Body):
    creations: Annotated[list[AclBinding], msgspec.Meta(min_length=1, max_length=MAX_ACL_OPS)]


class AclCreationResult(_Reply):
    error_code: int
    error_message: str | None = None


class CreateAclsResponse(_Reply):
    results: list[AclCreationResult]  # one per creation, in order


class DeleteAclsRequest(_Body):
    filters: Annotated[list[AclBindingFilter], msgspec.Meta(min_length=1, max_length=1000)]


class DeleteAclsFilterResult(_Reply):
    error_code: int
    error_message: str | None = None
    matching_acls: list[AclBinding] = msgspec.field(default_factory=list)  # the ones removed


class DeleteAclsResponse(_Reply):
    filter_results: list[DeleteAclsFilterResult]  # one per filter, in order


# User names, salts and keys have no bound of their own (Kafka has none): the body size
# bounds them, and a bad one is refused for its user alone (an empty name, for one).


class ScramCredentialDeletion(_Body):
    name: str
    mechanism: Int8  # common.scram.ScramMechanism code


class ScramCredentialUpsertion(_Body):
    """A credential as the broker derived it from the client's salted password (KIP-554):
    the salted password itself never leaves the broker."""

    name: str
    mechanism: Int8
    iterations: Int32
    salt: bytes
    stored_key: bytes
    server_key: bytes

    def __repr__(self) -> str:  # keys and salt stay out of logs and tracebacks
        return f"ScramCredentialUpsertion(name={self.name!r}, mechanism={self.mechanism})"


class AlterUserScramCredentialsRequest(_Body):
    deletions: Annotated[list[ScramCredentialDeletion], msgspec.Meta(max_length=MAX_ACL_OPS)] = (
        msgspec.field(default_factory=list)
    )
    upsertions: Annotated[list[ScramCredentialUpsertion], msgspec.Meta(max_length=MAX_ACL_OPS)] = (
        msgspec.field(default_factory=list)
    )


class AlterUserScramCredentialsResult(_Reply):
    user: str
    error_code: int
    error_message: str | None = None


class AlterUserScramCredentialsResponse(_Reply):
    results: list[AlterUserScramCredentialsResult]  # one per user named


class ErrorResponse(_Reply):
    error_code: int
    error_message: str


# -- quorum replication state (DescribeQuorum, `kraft metadata-quorum`) ----------------------


class QuorumReplicaState(_Reply):
    """One voter's (or observer's) progress as the Raft leader sees it (Kafka's
    DescribeQuorumResponse ReplicaState). Offsets are the quorum's own log positions
    (Raft indexes: what Kafka's __cluster_metadata offsets are to its quorum); -1 when
    unknown. Timestamps are wall-clock milliseconds, -1 when unknown."""

    replica_id: int
    log_end_offset: int = -1
    last_fetch_timestamp: int = -1
    last_caught_up_timestamp: int = -1
    host: str | None = None  # the voter's Raft address, for DescribeQuorum v2's nodes
    port: int | None = None


class QuorumStatus(_Reply):
    node_id: int
    role: str  # "leader" (active controller), "follower", "candidate"
    term: int
    leader_id: int  # -1 when unknown
    leader_http: str | None  # "host:port" of the active controller's HTTP API
    active: bool  # leader that has committed its barrier: it decides
    controller_epoch: int
    metadata_offset: int  # next offset to be written
    commit_index: int
    # Replication state, filled in by the Raft leader only (empty elsewhere).
    high_watermark: int = -1  # the leader's commit index + 1
    voters: list[QuorumReplicaState] = msgspec.field(default_factory=list)
    observers: list[QuorumReplicaState] = msgspec.field(default_factory=list)


# -- reads ---------------------------------------------------------------------------------


class LogEntry(msgspec.Struct, frozen=True):
    offset: int
    record: Record


class LogResponse(msgspec.Struct, frozen=True):
    """GET /v1/metadata/log?format=msgpack (what brokers read). The JSON form has the same
    shape with SCRAM salts and keys redacted (metadata_log/redactor.py), so only a log
    without credentials decodes from JSON with this type."""

    records: list[LogEntry]
    next_offset: int


class ClusterPartition(msgspec.Struct, frozen=True):
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    offline: bool
    removing_replicas: tuple[int, ...] = ()  # an ongoing reassignment (KIP-455)
    adding_replicas: tuple[int, ...] = ()


class ClusterTopic(msgspec.Struct, frozen=True):
    name: str
    topic_id: str
    partitions: list[ClusterPartition]
    configs: dict[str, str]


class ClusterBroker(msgspec.Struct, frozen=True):
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    listeners: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool


class ClusterDescription(msgspec.Struct, frozen=True):
    controller_id: int  # from the committed image: who wrote the last barrier
    controller_epoch: int
    metadata_offset: int  # offset of the last record in the image (-1: none)
    brokers: list[ClusterBroker]
    topics: list[ClusterTopic]
    fenced_brokers: int
    offline_partitions: int
    quorum: QuorumStatus  # this node's view of the Raft quorum
