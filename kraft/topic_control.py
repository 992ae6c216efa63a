"""Topic decisions of the quorum controller: create and delete topics, add partitions,
elect leaders, change topic configs. Sans-I/O like the rest of the controller: an image
and a request in; records and a response out. Kafka's validation rules and error codes.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kraft.decision import ControllerConfig, Decision
from kraft.placement import PlacementError, assign_replicas
from kraft.state_machine import AppendResult, AppendStatus
from metadata_log.controller_api import (
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
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RemoveTopicRecord,
    TopicRecord,
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
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.index.bytes",
    "segment.ms",
    "unclean.leader.election.enable",
}


def _failed(result: AppendResult | None) -> bool:
    return result is not None and result.status != AppendStatus.OK


class TopicControl:
    def __init__(self, config: ControllerConfig, new_topic_id: Callable[[], str]) -> None:
        self.config = config
        self._new_topic_id = new_topic_id

    def _placement_brokers(self, image: MetadataImage) -> list[tuple[int, str | None]]:
        return [(b.broker_id, b.rack) for b in image.live_brokers() if not b.in_controlled_shutdown]

    def _new_partition(
        self, image: MetadataImage, topic_id: str, p: int, replicas: list[int]
    ) -> PartitionRecord:
        isr = tuple(r for r in replicas if image.is_usable(r)) or tuple(replicas)
        leader = isr[0] if image.is_usable(isr[0]) else -1
        return PartitionRecord(topic_id, p, tuple(replicas), isr, leader, 0, 0)

    def create_topics(self, image: MetadataImage, req: CreateTopicsRequest) -> Decision:
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

    def delete_topics(self, image: MetadataImage, req: DeleteTopicsRequest) -> Decision:
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

    def create_partitions(self, image: MetadataImage, req: CreatePartitionsRequest) -> Decision:
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

    def elect_leaders(self, image: MetadataImage, req: ElectLeadersRequest) -> Decision:
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

    def alter_configs(self, image: MetadataImage, req: IncrementalAlterConfigsRequest) -> Decision:
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
