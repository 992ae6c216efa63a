"""The replication control manager (Kafka's ReplicationControlManager): topics and
partitions, ISR changes by AlterPartition, leader elections, and the partition changes a
broker's fencing, unfencing, controlled shutdown or restart causes. Sans-I/O: an image, a
request and `now_ms` in; a decision out. Kafka's validation rules and error codes.

Kafka's rules (KIP-841 and KIP-966's predecessors): leaders are elected from the ISR
(unclean election only where the topic allows it); fenced or shutting-down brokers leave
ISRs and may not rejoin them; AlterPartition is checked against broker epoch, leader
epoch and partition epoch. Every decision is re-checked at apply time (compare-and-set on
partition epochs) by the replicated state machine.
"""

from __future__ import annotations

from collections.abc import Callable

from common.errors import Errors
from common.topics import is_valid_name
from kraft.cluster_control import BrokerTransition, ClusterControlManager
from kraft.configuration_control import ConfigurationControlManager
from kraft.decision import ControllerConfig, Decision
from kraft.election import ElrPolicy, PartitionView, elect, elect_on_request, next_elr
from kraft.partition_index import PartitionIndex
from kraft.placement import PlacementError, assign_replicas
from metadata_log.controller_api import (
    AlterPartitionRequest,
    AlterPartitionResponse,
    AlterPartitionResult,
    AlterPartitionsRequest,
    AlterPartitionsResponse,
    CreatableTopic,
    CreatableTopicResult,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    PartitionResult,
    TopicResult,
)
from metadata_log.image import MetadataImage
from metadata_log.records import (
    PartitionChangeRecord,
    PartitionRecord,
    Record,
    RemoveTopicRecord,
    TopicRecord,
)

_Placement = list[tuple[int, str | None]]  # (broker id, rack) of brokers that may host


class ReplicationControlManager:
    def __init__(
        self,
        config: ControllerConfig,
        cluster: ClusterControlManager,
        configuration: ConfigurationControlManager,
        new_topic_id: Callable[[], str],
        index: PartitionIndex | None = None,
    ) -> None:
        self.config = config
        self._cluster = cluster
        self._configuration = configuration
        self._new_topic_id = new_topic_id
        self.index = index or PartitionIndex()

    # -- broker transitions ------------------------------------------------------------------

    def rebalance(
        self, image: MetadataImage, transition: BrokerTransition, now_ms: int
    ) -> list[Record]:
        """Partition changes so no unusable broker leads or sits in an ISR of size > 1,
        and offline partitions get a leader where one is eligible (`newly_usable`: brokers
        unfenced by records of the same batch).

        A broker whose session has expired is unusable even before the next tick fences
        it: otherwise a broker registering again could hand its ISR places to brokers that
        are already dead (found by the replication model: a restarted broker's
        registration left the one replica that had lost its unflushed tail as the only
        ISR member)."""
        usable = {
            b
            for b in image.brokers
            if image.is_usable(b)
            and b not in transition.unusable
            and self._cluster.session_alive(b, now_ms)
        } | transition.newly_usable
        out: list[Record] = []
        rules_of: dict[str, tuple[bool, ElrPolicy]] = {}
        for topic_id, p in self.affected(image, transition, usable):
            topic = image.topics[topic_id]
            rules = rules_of.get(topic_id)
            if rules is None:
                rules = rules_of[topic_id] = (
                    self._configuration.unclean_leader_election(image, topic.name),
                    self._configuration.elr_policy(image, topic.name),
                )
            reg = topic.partitions[p]
            change = elect(
                PartitionView.of(reg),
                usable,
                rules[0],
                transition.restarted,
                rules[1],
                transition.unclean_shutdown,
            )
            if change is not None:
                out.append(change.record(topic_id, p))
        return out

    def affected(
        self, image: MetadataImage, transition: BrokerTransition, usable: set[int]
    ) -> list[tuple[str, int]]:
        """The partitions `rebalance` may change, in (topic id, partition) order: those
        hosted by a broker that is registered but not usable now (it must leave leaderships
        and ISRs) and the offline ones (they may get a leader). Any other partition has a
        usable leader and only usable ISR members, and `elect` leaves it as it is, as long
        as every committed image came out of `rebalance` (every broker transition runs it);
        tests/metadata/test_partition_index.py checks this against a walk of every
        partition."""
        index = self.index.of(image)
        out = set(index.offline)
        for b in image.brokers:
            if b not in usable and (image.is_usable(b) or b in transition.unusable):
                out |= index.hosted_by(b)
        return sorted(out)

    # -- AlterPartition ----------------------------------------------------------------------

    def alter_partition(
        self, image: MetadataImage, req: AlterPartitionRequest, now_ms: int
    ) -> Decision:
        def refuse(code: int, msg: str | None = None) -> Decision:
            return Decision.answer(AlterPartitionResponse(code, error_message=msg))

        b = image.brokers.get(req.broker_id)
        if b is None:
            return refuse(Errors.BROKER_ID_NOT_REGISTERED)
        if b.broker_epoch != req.broker_epoch:
            return refuse(Errors.STALE_BROKER_EPOCH)
        reg = image.partition(req.topic_id, req.partition)
        if reg is None:
            return refuse(Errors.UNKNOWN_TOPIC_OR_PARTITION)
        if reg.leader != req.broker_id:
            # Kafka answers INVALID_REQUEST when a non-leader asks to change the ISR.
            return refuse(
                Errors.INVALID_REQUEST, f"broker {req.broker_id} is not the partition's leader"
            )
        if req.leader_epoch != reg.leader_epoch:
            return refuse(Errors.FENCED_LEADER_EPOCH)
        if req.partition_epoch != reg.partition_epoch:
            return refuse(Errors.INVALID_UPDATE_VERSION)
        new_isr = tuple(req.new_isr)
        if (
            len(set(new_isr)) != len(new_isr)
            or not set(new_isr) <= set(reg.replicas)
            or req.broker_id not in new_isr
        ):
            return refuse(Errors.INVALID_REQUEST, "the new ISR must be replicas with the leader")
        added = [r for r in new_isr if r not in reg.isr]
        if any(not image.is_usable(r) for r in added):
            return refuse(Errors.INELIGIBLE_REPLICA, "fenced or shutting-down brokers may not join")
        fetched_with = dict(zip(new_isr, req.new_isr_broker_epochs, strict=False))
        stale = [
            r for r in added if fetched_with.get(r, -1) not in (-1, image.brokers[r].broker_epoch)
        ]
        if stale:
            return refuse(
                Errors.INELIGIBLE_REPLICA,
                f"replicas {stale} fetched as an incarnation that is no longer registered",
            )
        if set(new_isr) == set(reg.isr):
            return Decision.answer(
                AlterPartitionResponse(
                    Errors.NONE, reg.leader, reg.leader_epoch, reg.partition_epoch, list(reg.isr)
                )
            )
        # KIP-966: below min ISR the members leaving join the ELR; at or above it, empty.
        topic = image.topics[req.topic_id]
        view = PartitionView.of(reg)
        elr, last_known = next_elr(
            view, new_isr, reg.leader, self._configuration.elr_policy(image, topic.name)
        )
        record = PartitionChangeRecord(
            req.topic_id,
            req.partition,
            new_isr,
            reg.leader,
            reg.leader_epoch,
            reg.partition_epoch + 1,
            elr=None if elr == reg.elr else elr,
            last_known_elr=None if last_known == reg.last_known_elr else last_known,
        )
        return Decision(
            (record,),
            AlterPartitionResponse(
                Errors.NONE,
                record.leader,
                record.leader_epoch,
                record.partition_epoch,
                list(record.isr),
            ),
            # Another change landed first: the leader must refresh its state.
            AlterPartitionResponse(Errors.INVALID_UPDATE_VERSION),
        )

    def alter_partitions(
        self, image: MetadataImage, req: AlterPartitionsRequest, now_ms: int
    ) -> Decision:
        """AlterPartition across partitions: each decided as `alter_partition` would alone
        (same checks, same codes), the accepted changes in one batch. A partition named
        twice is refused the second time (INVALID_REQUEST)."""
        b = image.brokers.get(req.broker_id)
        if b is None or b.broker_epoch != req.broker_epoch:
            code = Errors.BROKER_ID_NOT_REGISTERED if b is None else Errors.STALE_BROKER_EPOCH
            return Decision.answer(AlterPartitionsResponse(code))
        records: list[Record] = []
        results: list[AlterPartitionResult] = []
        failed: list[AlterPartitionResult] = []
        seen: set[tuple[str, int]] = set()
        for item in req.items():
            key = (item.topic_id, item.partition)
            if key in seen:
                one = Decision.answer(
                    AlterPartitionResponse(Errors.INVALID_REQUEST, error_message="duplicate")
                )
            else:
                one = self.alter_partition(image, item, now_ms)
            seen.add(key)
            records += one.records
            results.append(_result(key, one.response))
            failed.append(_result(key, one.failure if one.records else one.response))
        return Decision(
            tuple(records),
            AlterPartitionsResponse(Errors.NONE, results),
            # The batch did not apply: every change in it must be refreshed and retried.
            AlterPartitionsResponse(Errors.NONE, failed),
        )

    # -- topics ------------------------------------------------------------------------------

    @staticmethod
    def _placement_brokers(image: MetadataImage) -> _Placement:
        return [(b.broker_id, b.rack) for b in image.live_brokers() if not b.in_controlled_shutdown]

    @staticmethod
    def _new_partition(
        image: MetadataImage, topic_id: str, p: int, replicas: list[int]
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
        failed = [
            CreatableTopicResult(r.name, Errors.UNKNOWN_SERVER_ERROR)
            if r.error_code == Errors.NONE
            else r
            for r in results
        ]
        return Decision(tuple(records), CreateTopicsResponse(results), CreateTopicsResponse(failed))

    def _create_one(
        self,
        image: MetadataImage,
        t: CreatableTopic,
        brokers: _Placement,
        seen: set[str],
        salt: int,
    ) -> tuple[CreatableTopicResult, list[Record]]:
        def fail(code: int, msg: str) -> tuple[CreatableTopicResult, list[Record]]:
            return CreatableTopicResult(t.name, code, error_message=msg), []

        if not is_valid_name(t.name):
            return fail(Errors.INVALID_TOPIC_EXCEPTION, f"topic name {t.name!r} is illegal")
        if t.name in seen:
            return fail(Errors.INVALID_REQUEST, f"topic {t.name} appears twice in the request")
        if t.name in image.topic_ids:
            return fail(Errors.TOPIC_ALREADY_EXISTS, f"Topic '{t.name}' already exists.")
        invalid = self._configuration.validate_new_topic_configs(t.configs)
        if invalid is not None:
            return fail(Errors.INVALID_CONFIG, invalid)
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
        records += self._configuration.new_topic_config_records(t.name, t.configs)
        rf_out = len(assignment[0])
        return CreatableTopicResult(t.name, Errors.NONE, topic_id, len(assignment), rf_out), records

    def delete_topics(
        self, image: MetadataImage, req: DeleteTopicsRequest, now_ms: int
    ) -> Decision:
        results: list[TopicResult] = []
        records: list[Record] = []
        for name in dict.fromkeys(req.names):
            topic_id = image.topic_ids.get(name)
            if topic_id is None:
                results.append(TopicResult(name, Errors.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                results.append(TopicResult(name, Errors.NONE))
                records.append(RemoveTopicRecord(topic_id))
        failed = [TopicResult(r.name, Errors.UNKNOWN_SERVER_ERROR) for r in results]
        return Decision(tuple(records), DeleteTopicsResponse(results), DeleteTopicsResponse(failed))

    def create_partitions(
        self, image: MetadataImage, req: CreatePartitionsRequest, now_ms: int
    ) -> Decision:
        results: list[TopicResult] = []
        records: list[Record] = []
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
        failed = [TopicResult(r.name, Errors.UNKNOWN_SERVER_ERROR) for r in results]
        return Decision(
            tuple(records), CreatePartitionsResponse(results), CreatePartitionsResponse(failed)
        )

    # -- elections ---------------------------------------------------------------------------

    def elect_leaders(
        self, image: MetadataImage, req: ElectLeadersRequest, now_ms: int
    ) -> Decision:
        """Kafka's ReplicationControlManager.electLeaders (rules in
        kraft.election.elect_on_request). A null partition list means every partition,
        and then, as Kafka, partitions that need no election are left out of the answer."""
        every = req.partitions is None
        if req.partitions is None:
            targets = [(t.name, p) for t in image.topics.values() for p in sorted(t.partitions)]
        else:
            targets = list(dict.fromkeys((tp.topic, tp.partition) for tp in req.partitions))
        usable = {b for b in image.brokers if image.is_usable(b)}
        results: list[PartitionResult] = []
        records: list[Record] = []
        for name, p in targets:
            topic = image.topic_by_name(name)
            reg = topic.partitions.get(p) if topic else None
            if topic is None or reg is None:
                results.append(PartitionResult(name, p, Errors.UNKNOWN_TOPIC_OR_PARTITION))
                continue
            policy = self._configuration.elr_policy(image, name)
            outcome = elect_on_request(PartitionView.of(reg), req.election_type, usable, policy)
            if isinstance(outcome, int):
                if not (every and outcome == Errors.ELECTION_NOT_NEEDED):
                    results.append(PartitionResult(name, p, outcome))
                continue
            records.append(outcome.record(topic.topic_id, p))
            results.append(PartitionResult(name, p, Errors.NONE))
        # The batch did not apply (the image moved): the elections made are not known.
        failed = [
            PartitionResult(r.topic, r.partition, Errors.UNKNOWN_SERVER_ERROR)
            if r.error_code == Errors.NONE
            else r
            for r in results
        ]
        return Decision(tuple(records), ElectLeadersResponse(results), ElectLeadersResponse(failed))


def _result(key: tuple[str, int], r: AlterPartitionResponse) -> AlterPartitionResult:
    return AlterPartitionResult(
        key[0],
        key[1],
        r.error_code,
        r.leader,
        r.leader_epoch,
        r.partition_epoch,
        r.isr,
        r.error_message,
    )
