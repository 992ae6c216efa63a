"""The quorum controller's decisions: sans-I/O (an image, a request and `now_ms` in;
metadata records and a response out). No sockets, threads, clocks or randomness here:
the node feeds time, and topic ids come from an injected generator.

Kafka's rules (KIP-631, KIP-841, KIP-966's predecessors): brokers register with a new
epoch per incarnation, heartbeat within `broker.session.timeout.ms` or get fenced, are
unfenced once caught up with the metadata log; leaders are elected from the ISR (unclean
election only where the topic allows it); fenced or shutting-down brokers leave ISRs
and may not rejoin them; AlterPartition is checked against broker epoch, leader epoch
and partition epoch. Every decision is re-checked at apply time (compare-and-set on
partition epochs) by the replicated state machine.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from kraft.election import PartitionView, elect
from kraft.placement import PlacementError, assign_replicas
from kraft.state_machine import AppendResult, AppendStatus
from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    Errors,
    IncrementalAlterConfigsRequest,
    PartitionResult,
    TopicResult,
)
from metadata_log.image import MetadataImage
from metadata_log.records import (
    TOPIC_RESOURCE,
    ConfigRecord,
    ControlledShutdownRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from storage.config import ConfigError, LogConfig

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
# Topic configs this cluster understands (values checked where a parser exists).
TOPIC_CONFIGS = {
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "flush.messages",
    "flush.ms",
    "index.interval.bytes",
    "max.message.bytes",
    "message.timestamp.type",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.ms",
    "unclean.leader.election.enable",
}


@dataclass(frozen=True)
class ControllerConfig:
    node_id: int = 0
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    producer_id_block_size: int = 1000
    unclean_leader_election: bool = False  # unclean.leader.election.enable (cluster default)


@dataclass
class Decision:
    """Records to append, and how to answer once the append's outcome is known."""

    records: list[Record]
    respond: Callable[[AppendResult | None], Any]


def _failed(result: AppendResult | None) -> bool:
    return result is not None and result.status != AppendStatus.OK


@dataclass
class _Sessions:
    deadlines: dict[int, int] = field(default_factory=dict)  # broker id -> expiry (ms)


class QuorumController:
    def __init__(
        self,
        config: ControllerConfig | None = None,
        new_topic_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.config = config or ControllerConfig()
        self._new_topic_id = new_topic_id
        self._sessions = _Sessions()

    # -- sessions ----------------------------------------------------------------------------

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """A new active controller gives every broker a fresh session before fencing any:
        heartbeat times of the previous one died with it."""
        timeout = self.config.session_timeout_ms
        self._sessions.deadlines = {b: now_ms + timeout for b in image.brokers}

    def _touch(self, broker_id: int, now_ms: int) -> None:
        self._sessions.deadlines[broker_id] = now_ms + self.config.session_timeout_ms

    def session_alive(self, broker_id: int, now_ms: int) -> bool:
        return self._sessions.deadlines.get(broker_id, -1) > now_ms

    # -- elections ---------------------------------------------------------------------------

    def _unclean_allowed(self, image: MetadataImage, topic_name: str) -> bool:
        value = image.topic_config(topic_name).get("unclean.leader.election.enable")
        if value is None:
            return self.config.unclean_leader_election
        return value.lower() == "true"

    def _rebalance(
        self,
        image: MetadataImage,
        unusable: set[int],
        topics: Iterable[str] | None = None,
        newly_usable: frozenset[int] = frozenset(),
    ) -> list[Record]:
        """Partition changes so no unusable broker leads or sits in an ISR of size > 1,
        and offline partitions get a leader where one is eligible (`newly_usable`: brokers
        unfenced by records of the same batch)."""
        usable = {
            b for b in image.brokers if image.is_usable(b) and b not in unusable
        } | newly_usable
        out: list[Record] = []
        for topic_id in sorted(image.topics if topics is None else topics):
            topic = image.topics[topic_id]
            unclean = self._unclean_allowed(image, topic.name)
            for p, reg in sorted(topic.partitions.items()):
                change = elect(PartitionView.of(reg), usable, unclean)
                if change is not None:
                    out.append(
                        PartitionChangeRecord(
                            topic_id,
                            p,
                            change.isr,
                            change.leader,
                            change.leader_epoch,
                            change.partition_epoch,
                        )
                    )
        return out

    # -- brokers -----------------------------------------------------------------------------

    def register_broker(
        self, image: MetadataImage, req: BrokerRegistrationRequest, now_ms: int
    ) -> Decision:
        existing = image.brokers.get(req.broker_id)
        if existing is not None and existing.incarnation_id == req.incarnation_id:
            self._touch(req.broker_id, now_ms)
            epoch = existing.broker_epoch
            return Decision([], lambda _r: BrokerRegistrationResponse(Errors.NONE, epoch))
        if (
            existing is not None
            and not existing.fenced
            and self.session_alive(req.broker_id, now_ms)
        ):
            return Decision(
                [],
                lambda _r: BrokerRegistrationResponse(
                    Errors.DUPLICATE_BROKER_REGISTRATION,
                    error_message=f"broker {req.broker_id} is registered by another "
                    "incarnation whose session is alive",
                ),
            )
        records: list[Record] = [
            RegisterBrokerRecord(
                req.broker_id, req.incarnation_id, -1, tuple(req.listeners), req.rack, True
            )
        ]
        if existing is not None:  # a restarted broker: it is fenced until caught up again
            records += self._rebalance(image, {req.broker_id})
        self._touch(req.broker_id, now_ms)

        def respond(result: AppendResult | None) -> BrokerRegistrationResponse:
            if result is None or _failed(result):
                return BrokerRegistrationResponse(
                    Errors.UNKNOWN_SERVER_ERROR, error_message=result.error if result else None
                )
            return BrokerRegistrationResponse(Errors.NONE, result.first_offset)

        return Decision(records, respond)

    def heartbeat(self, image: MetadataImage, req: BrokerHeartbeatRequest, now_ms: int) -> Decision:
        b = image.brokers.get(req.broker_id)
        if b is None:
            return Decision([], lambda _r: BrokerHeartbeatResponse(Errors.BROKER_ID_NOT_REGISTERED))
        if b.broker_epoch != req.broker_epoch:
            return Decision([], lambda _r: BrokerHeartbeatResponse(Errors.STALE_BROKER_EPOCH))
        self._touch(b.broker_id, now_ms)
        caught_up = req.current_metadata_offset >= b.broker_epoch
        records: list[Record] = []
        fenced = b.fenced
        if req.want_shutdown:
            if not b.in_controlled_shutdown:
                records.append(ControlledShutdownRecord(b.broker_id, b.broker_epoch))
                records += self._rebalance(image, {b.broker_id})
        elif req.want_fence and not b.fenced:
            records.append(FenceBrokerRecord(b.broker_id, b.broker_epoch))
            records += self._rebalance(image, {b.broker_id})
            fenced = True
        elif b.fenced and caught_up and not req.want_fence:
            records.append(UnfenceBrokerRecord(b.broker_id, b.broker_epoch))
            # Offline partitions it can lead get their leader in the same batch.
            # (Unfencing also ends a controlled shutdown: see UnfenceBrokerRecord's replay.)
            records += self._rebalance(image, set(), newly_usable=frozenset({b.broker_id}))
            fenced = False
        leads = any(
            reg.leader == b.broker_id and len(reg.replicas) > 1
            for t in image.topics.values()
            for reg in t.partitions.values()
        )
        shut_down = req.want_shutdown and (b.in_controlled_shutdown or not records) and not leads

        def respond(result: AppendResult | None) -> BrokerHeartbeatResponse:
            if _failed(result):
                return BrokerHeartbeatResponse(Errors.UNKNOWN_SERVER_ERROR, is_fenced=b.fenced)
            return BrokerHeartbeatResponse(
                Errors.NONE,
                is_caught_up=caught_up,
                is_fenced=fenced,
                should_shut_down=shut_down,
            )

        return Decision(records, respond)

    def unfence_elections(self, image: MetadataImage) -> list[Record]:
        """After brokers came back: leaders for offline partitions (run by tick)."""
        return self._rebalance(image, set())

    def tick(self, image: MetadataImage, now_ms: int) -> list[Record]:
        """Fence brokers whose session expired; elect where leadership is missing."""
        expired = sorted(
            b.broker_id
            for b in image.brokers.values()
            if not b.fenced and not self.session_alive(b.broker_id, now_ms)
        )
        records: list[Record] = [
            FenceBrokerRecord(bid, image.brokers[bid].broker_epoch) for bid in expired
        ]
        records += self._rebalance(image, set(expired))
        return records

    def allocate_producer_ids(
        self, image: MetadataImage, req: AllocateProducerIdsRequest, now_ms: int
    ) -> Decision:
        b = image.brokers.get(req.broker_id)
        if b is None or b.broker_epoch != req.broker_epoch:
            return Decision([], lambda _r: AllocateProducerIdsResponse(Errors.STALE_BROKER_EPOCH))
        start = image.next_producer_id
        size = self.config.producer_id_block_size
        record = ProducerIdsRecord(b.broker_id, b.broker_epoch, start + size)

        def respond(result: AppendResult | None) -> AllocateProducerIdsResponse:
            if _failed(result):
                return AllocateProducerIdsResponse(Errors.UNKNOWN_SERVER_ERROR)
            return AllocateProducerIdsResponse(Errors.NONE, start, size)

        return Decision([record], respond)

    # -- partitions --------------------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, req: AlterPartitionRequest, now_ms: int
    ) -> Decision:
        def answer(code: int, msg: str | None = None) -> Decision:
            return Decision([], lambda _r: AlterPartitionResponse(code, error_message=msg))

        b = image.brokers.get(req.broker_id)
        if b is None:
            return answer(Errors.BROKER_ID_NOT_REGISTERED)
        if b.broker_epoch != req.broker_epoch:
            return answer(Errors.STALE_BROKER_EPOCH)
        reg = image.partition(req.topic_id, req.partition)
        if reg is None:
            return answer(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if reg.leader != req.broker_id:
            # Kafka answers INVALID_REQUEST when a non-leader asks to change the ISR.
            return answer(
                Errors.INVALID_REQUEST, f"broker {req.broker_id} is not the partition's leader"
            )
        if req.leader_epoch != reg.leader_epoch:
            return answer(Errors.FENCED_LEADER_EPOCH)
        if req.partition_epoch != reg.partition_epoch:
            return answer(Errors.INVALID_UPDATE_VERSION)
        new_isr = tuple(req.new_isr)
        if (
            len(set(new_isr)) != len(new_isr)
            or not set(new_isr) <= set(reg.replicas)
            or req.broker_id not in new_isr
        ):
            return answer(Errors.INVALID_REQUEST, "the new ISR must be replicas with the leader")
        added = [r for r in new_isr if r not in reg.isr]
        if any(not image.is_usable(r) for r in added):
            return answer(Errors.INELIGIBLE_REPLICA, "fenced or shutting-down brokers may not join")
        if set(new_isr) == set(reg.isr):
            current = reg
            return Decision(
                [],
                lambda _r: AlterPartitionResponse(
                    Errors.NONE,
                    current.leader,
                    current.leader_epoch,
                    current.partition_epoch,
                    list(current.isr),
                ),
            )
        record = PartitionChangeRecord(
            req.topic_id,
            req.partition,
            new_isr,
            reg.leader,
            reg.leader_epoch,
            reg.partition_epoch + 1,
        )

        def respond(result: AppendResult | None) -> AlterPartitionResponse:
            if _failed(result):
                # Another change landed first: the leader must refresh its state.
                return AlterPartitionResponse(Errors.INVALID_UPDATE_VERSION)
            return AlterPartitionResponse(
                Errors.NONE,
                record.leader,
                record.leader_epoch,
                record.partition_epoch,
                list(record.isr),
            )

        return Decision([record], respond)

    # -- topics ------------------------------------------------------------------------------

    def _placement_brokers(self, image: MetadataImage) -> list[tuple[int, str | None]]:
        return [(b.broker_id, b.rack) for b in image.live_brokers() if not b.in_controlled_shutdown]

    def _new_partition(
        self, image: MetadataImage, topic_id: str, p: int, replicas: list[int]
    ) -> PartitionRecord:
        isr = tuple(r for r in replicas if image.is_usable(r)) or tuple(replicas)
        leader = isr[0] if image.is_usable(isr[0]) else -1
        return PartitionRecord(topic_id, p, tuple(replicas), isr, leader, 0, 0)

    def create_topics(
        self, image: MetadataImage, req: CreateTopicsRequest, now_ms: int
    ) -> Decision:
        results: list[CreatableTopicResult] = []
        records: list[Record] = []
        seen: set[str] = set()
        brokers = self._placement_brokers(image)
        for t in req.topics:
            res, recs = self._create_one(image, t, brokers, seen, len(records))
            seen.add(t.name)
            results.append(res)
            if not req.validate_only:
                records += recs
        final = results

        def respond(result: AppendResult | None) -> CreateTopicsResponse:
            if _failed(result):
                return CreateTopicsResponse(
                    [
                        CreatableTopicResult(r.name, Errors.UNKNOWN_SERVER_ERROR)
                        if r.error_code == Errors.NONE
                        else r
                        for r in final
                    ]
                )
            return CreateTopicsResponse(final)

        return Decision(records, respond)

    def _create_one(self, image, t, brokers, seen, salt):  # type: ignore[no-untyped-def]
        def fail(code: int, msg: str) -> tuple[CreatableTopicResult, list[Record]]:
            return CreatableTopicResult(t.name, code, error_message=msg), []

        if t.name in (".", "..") or not _LEGAL_TOPIC.match(t.name):
            return fail(Errors.INVALID_TOPIC_EXCEPTION, f"topic name {t.name!r} is illegal")
        if t.name in seen:
            return fail(Errors.INVALID_REQUEST, f"topic {t.name} appears twice in the request")
        if t.name in image.topic_ids:
            return fail(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        unknown = sorted(set(t.configs) - TOPIC_CONFIGS)
        if unknown:
            return fail(Errors.INVALID_CONFIG, f"unknown topic configs: {', '.join(unknown)}")
        try:
            LogConfig.from_properties(t.configs)
            mir = t.configs.get("min.insync.replicas")
            if mir is not None and int(mir) < 1:
                raise ConfigError("min.insync.replicas must be >= 1")
        except (ConfigError, ValueError) as exc:
            return fail(Errors.INVALID_CONFIG, str(exc))
        if t.assignments is not None:
            if t.num_partitions != -1 or t.replication_factor != -1:
                return fail(
                    Errors.INVALID_REQUEST,
                    "give either assignments or num_partitions/replication_factor",
                )
            assignment = {p: list(r) for p, r in t.assignments.items()}
            if sorted(assignment) != list(range(len(assignment))) or not assignment:
                return fail(Errors.INVALID_REPLICA_ASSIGNMENT, "partitions must be 0..n-1")
            for replicas in assignment.values():
                if not replicas or len(set(replicas)) != len(replicas):
                    return fail(Errors.INVALID_REPLICA_ASSIGNMENT, "replicas must be distinct")
                if any(r not in image.brokers for r in replicas):
                    return fail(Errors.INVALID_REPLICA_ASSIGNMENT, "unknown broker in assignment")
        else:
            n = self.config.num_partitions if t.num_partitions == -1 else t.num_partitions
            rf = (
                self.config.default_replication_factor
                if t.replication_factor == -1
                else t.replication_factor
            )
            if n < 1:
                return fail(
                    Errors.INVALID_PARTITIONS, "Number of partitions must be larger than 0."
                )
            if rf < 1:
                return fail(
                    Errors.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0."
                )
            try:
                assignment = assign_replicas(
                    brokers, n, rf, start_index=(image.offset + salt + len(t.name)) & 0xFFFF
                )
            except PlacementError as exc:
                return fail(Errors.INVALID_REPLICATION_FACTOR, str(exc))
        topic_id = self._new_topic_id()
        records: list[Record] = [TopicRecord(t.name, topic_id)]
        for p in sorted(assignment):
            records.append(self._new_partition(image, topic_id, p, assignment[p]))
        for name, value in sorted(t.configs.items()):
            records.append(ConfigRecord(TOPIC_RESOURCE, t.name, name, value))
        rf_out = len(assignment[0])
        return CreatableTopicResult(t.name, Errors.NONE, topic_id, len(assignment), rf_out), records

    def delete_topics(
        self, image: MetadataImage, req: DeleteTopicsRequest, now_ms: int
    ) -> Decision:
        results, records = [], []
        for name in dict.fromkeys(req.names):
            topic_id = image.topic_ids.get(name)
            if topic_id is None:
                results.append(TopicResult(name, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                results.append(TopicResult(name, Errors.NONE))
                records.append(RemoveTopicRecord(topic_id))

        def respond(result: AppendResult | None) -> DeleteTopicsResponse:
            if _failed(result):
                return DeleteTopicsResponse(
                    [TopicResult(r.name, Errors.UNKNOWN_SERVER_ERROR) for r in results]
                )
            return DeleteTopicsResponse(results)

        return Decision(records, respond)

    def create_partitions(
        self, image: MetadataImage, req: CreatePartitionsRequest, now_ms: int
    ) -> Decision:
        results, records = [], []
        brokers = self._placement_brokers(image)
        for t in req.topics:
            topic = image.topic_by_name(t.name)
            if topic is None:
                results.append(TopicResult(t.name, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            current = len(topic.partitions)
            if t.count <= current:
                results.append(
                    TopicResult(
                        t.name,
                        Errors.INVALID_PARTITIONS,
                        f"Topic currently has {current} partitions, which is higher than "
                        f"or equal to the requested {t.count}.",
                    )
                )
                continue
            rf = len(topic.partitions[0].replicas)
            new = t.count - current
            if t.assignments is not None:
                if len(t.assignments) != new or any(
                    not a or len(set(a)) != len(a) or any(r not in image.brokers for r in a)
                    for a in t.assignments
                ):
                    results.append(TopicResult(t.name, Errors.INVALID_REPLICA_ASSIGNMENT))
                    continue
                assignment = {current + i: list(a) for i, a in enumerate(t.assignments)}
            else:
                try:
                    assignment = assign_replicas(
                        brokers,
                        new,
                        rf,
                        start_index=image.offset & 0xFFFF,
                        first_partition=current,
                    )
                except PlacementError as exc:
                    results.append(TopicResult(t.name, Errors.INVALID_REPLICATION_FACTOR, str(exc)))
                    continue
            results.append(TopicResult(t.name, Errors.NONE))
            if not req.validate_only:
                for p in sorted(assignment):
                    records.append(self._new_partition(image, topic.topic_id, p, assignment[p]))

        def respond(result: AppendResult | None) -> CreatePartitionsResponse:
            if _failed(result):
                return CreatePartitionsResponse(
                    [TopicResult(r.name, Errors.UNKNOWN_SERVER_ERROR) for r in results]
                )
            return CreatePartitionsResponse(results)

        return Decision(records, respond)

    def elect_leaders(
        self, image: MetadataImage, req: ElectLeadersRequest, now_ms: int
    ) -> Decision:
        if req.partitions is None:
            targets = [(t.name, p) for t in image.topics.values() for p in sorted(t.partitions)]
        else:
            targets = [(tp.topic, tp.partition) for tp in req.partitions]
        results, records = [], []
        for name, p in targets:
            topic = image.topic_by_name(name)
            reg = topic.partitions.get(p) if topic else None
            if topic is None or reg is None:
                results.append(PartitionResult(name, p, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if req.election_type == 0:  # preferred
                preferred = reg.replicas[0]
                if reg.leader == preferred:
                    results.append(PartitionResult(name, p, Errors.ELECTION_NOT_NEEDED))
                    continue
                if preferred not in reg.isr or not image.is_usable(preferred):
                    results.append(PartitionResult(name, p, Errors.PREFERRED_LEADER_NOT_AVAILABLE))
                    continue
                leader, isr = preferred, reg.isr
            else:  # unclean: only for a partition without a leader
                if reg.leader != -1:
                    results.append(PartitionResult(name, p, Errors.ELECTION_NOT_NEEDED))
                    continue
                live = [r for r in reg.replicas if image.is_usable(r)]
                if not live:
                    results.append(PartitionResult(name, p, Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE))
                    continue
                leader = live[0]
                isr = (leader,) if leader not in reg.isr else reg.isr
            records.append(
                PartitionChangeRecord(
                    topic.topic_id,
                    p,
                    tuple(isr),
                    leader,
                    reg.leader_epoch + 1,
                    reg.partition_epoch + 1,
                )
            )
            results.append(PartitionResult(name, p, Errors.NONE))

        def respond(result: AppendResult | None) -> ElectLeadersResponse:
            if _failed(result):
                return ElectLeadersResponse(
                    [
                        PartitionResult(r.topic, r.partition, Errors.UNKNOWN_SERVER_ERROR)
                        for r in results
                    ]
                )
            return ElectLeadersResponse(results)

        return Decision(records, respond)

    def alter_configs(
        self, image: MetadataImage, req: IncrementalAlterConfigsRequest, now_ms: int
    ) -> Decision:
        if req.resource_type == TOPIC_RESOURCE:
            if req.resource_name not in image.topic_ids:
                raise KeyError(f"unknown topic {req.resource_name}")
            unknown = sorted((set(req.set) | set(req.delete)) - TOPIC_CONFIGS)
            if unknown:
                raise ValueError(f"unknown topic configs: {', '.join(unknown)}")
            LogConfig.from_properties(req.set)
        records: list[Record] = [
            ConfigRecord(req.resource_type, req.resource_name, k, v)
            for k, v in sorted(req.set.items())
        ] + [
            ConfigRecord(req.resource_type, req.resource_name, k, None) for k in sorted(req.delete)
        ]
        return Decision(records, lambda _r: None)
