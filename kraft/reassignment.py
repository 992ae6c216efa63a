"""The reassignment control manager: partition reassignments (KIP-455), as Kafka's
ReplicationControlManager, PartitionReassignmentReplicas, PartitionReassignmentRevert
and PartitionChangeBuilder do them. Sans-I/O: an image, a request and `now_ms` in; a
decision out. All its state is in the metadata image (replicas, adding and removing
replicas of each partition), so a reassignment survives a controller failover.

A reassignment of a partition from `current` to `target` replicas goes:
1. AlterPartitionReassignments writes replicas = target + (current - target),
   adding = target - current, removing = current - target (sorted, as Kafka's);
   the brokers being added start following the leader.
2. The leader adds each caught-up replica to the ISR (AlterPartition).
3. When the ISR without the removing replicas holds every target replica, the same
   batch completes it: replicas = target, ISR = ISR - removing, adding and removing
   cleared, a new leader from the target replicas if the current one is removed, and a
   leader epoch bump whenever replicas leave. Brokers no longer replicas delete theirs.
Steps 1 and 3 happen in one change when the ISR already allows it (a reordering).
Cancelling (null replicas) reverts to the original replicas, dropping the added ones
from the ISR; when that would leave the ISR empty it is an unclean election, refused
unless the topic allows unclean leader election.
"""

from __future__ import annotations

from collections.abc import Iterable

from common.errors import Errors
from kraft.configuration_control import ConfigurationControlManager
from kraft.decision import ControllerConfig, Decision
from kraft.election import ELR_OFF, ElrPolicy, PartitionView, next_elr
from kraft.partition_index import PartitionIndex
from metadata_log.controller_api import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
    OngoingReassignment,
    PartitionResult,
    ReassignablePartition,
)
from metadata_log.delta import MetadataDelta, MetadataReplayError
from metadata_log.image import MetadataImage, PartitionRegistration
from metadata_log.records import NO_LEADER, PartitionChangeRecord, Record

_NO_REASSIGNMENT = "No partition reassignment is in progress for this partition."


class ReassignmentError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def build_change(
    topic_id: str,
    partition: int,
    reg: PartitionRegistration,
    usable: set[int],
    *,
    replicas: tuple[int, ...] | None = None,
    isr: tuple[int, ...] | None = None,
    removing: tuple[int, ...] | None = None,
    adding: tuple[int, ...] | None = None,
    unclean: bool = False,
    policy: ElrPolicy = ELR_OFF,
) -> PartitionChangeRecord | None:
    """The record taking `reg` to the given targets (None: unchanged), or None when
    nothing changes (Kafka's PartitionChangeBuilder.build, its ELR by `policy`): complete the
    reassignment if the ISR allows, keep a leader that is still in the ISR and usable,
    else elect the first such target replica (an unclean election of the first usable
    one only when `unclean`), and bump the leader epoch when the leader changes or
    replicas leave."""
    t_replicas = reg.replicas if replicas is None else replicas
    t_isr = reg.isr if isr is None else isr
    t_removing = reg.removing_replicas if removing is None else removing
    t_adding = reg.adding_replicas if adding is None else adding
    if t_removing or t_adding:  # PartitionReassignmentReplicas.maybeCompleteReassignment
        isr_after = tuple(r for r in t_isr if r not in t_removing)
        replicas_after = tuple(r for r in t_replicas if r not in t_removing)
        if isr_after and replicas_after and set(replicas_after) <= set(isr_after):
            t_replicas, t_isr, t_removing, t_adding = replicas_after, isr_after, (), ()

    def valid(r: int) -> bool:
        return r in t_isr and r in usable

    unclean_elected = False
    if reg.leader != NO_LEADER and valid(reg.leader):
        leader = reg.leader
    else:
        leader = next((r for r in t_replicas if valid(r)), NO_LEADER)
        if leader == NO_LEADER and unclean:
            leader = next((r for r in t_replicas if r in usable), NO_LEADER)
            if leader != NO_LEADER:
                t_isr = (leader,)  # unclean: the new leader alone (data may be lost)
                unclean_elected = True
    # KIP-966 (the stateful controller test found reassignments leaving an ISR member, or
    # a replica no longer assigned, in the ELR): the ELR as any change keeps it, within
    # the new replicas; an unclean election clears it.
    if unclean_elected:
        elr: tuple[int, ...] = ()
        last_known: tuple[int, ...] = ()
    else:
        elr, last_known = next_elr(PartitionView.of(reg), t_isr, leader, policy)
    elr = tuple(r for r in elr if r in t_replicas and r not in t_isr)
    last_known = tuple(r for r in last_known if r in t_replicas and r not in t_isr)
    if (
        t_replicas == reg.replicas
        and t_isr == reg.isr
        and t_removing == reg.removing_replicas
        and t_adding == reg.adding_replicas
        and leader == reg.leader
        and elr == reg.elr
        and last_known == reg.last_known_elr
    ):
        return None
    bump = leader != reg.leader or not set(reg.replicas) <= set(t_replicas)
    return PartitionChangeRecord(
        topic_id,
        partition,
        t_isr,
        leader,
        reg.leader_epoch + (1 if bump else 0),
        reg.partition_epoch + 1,
        replicas=None if t_replicas == reg.replicas else t_replicas,
        removing_replicas=None if t_removing == reg.removing_replicas else t_removing,
        adding_replicas=None if t_adding == reg.adding_replicas else t_adding,
        elr=None if elr == reg.elr else elr,
        last_known_elr=None if last_known == reg.last_known_elr else last_known,
    )


def validate_target(image: MetadataImage, target: list[int]) -> None:
    """Kafka's validateManualPartitionAssignment: raises INVALID_REPLICA_ASSIGNMENT."""
    if not target:
        raise ReassignmentError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    seen: set[int] = set()
    for r in target:
        if r in seen:
            raise ReassignmentError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {r} more than once.",
            )
        seen.add(r)
        if not image.is_usable(r):
            state = "registered" if r not in image.brokers else "active (it is fenced)"
            raise ReassignmentError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {r}, but no such broker "
                f"is {state}.",
            )


def start_change(
    topic_id: str,
    partition: int,
    reg: PartitionRegistration,
    target: list[int],
    usable: set[int],
    policy: ElrPolicy = ELR_OFF,
) -> PartitionChangeRecord | None:
    """Kafka's changePartitionReassignment (over an ongoing one too: the replicas it was
    adding that the new target leaves out are then removed)."""
    removing = tuple(sorted(set(reg.replicas) - set(target)))
    adding = tuple(sorted(set(target) - set(reg.replicas)))
    return build_change(
        topic_id,
        partition,
        reg,
        usable,
        replicas=tuple(target) + removing,
        removing=removing,
        adding=adding,
        policy=policy,
    )


def cancel_change(
    topic_id: str,
    partition: int,
    reg: PartitionRegistration,
    usable: set[int],
    unclean_allowed: bool,
    policy: ElrPolicy = ELR_OFF,
) -> PartitionChangeRecord | None:
    """Kafka's cancelPartitionReassignment with PartitionReassignmentRevert."""
    if not reg.is_reassigning:
        raise ReassignmentError(Errors.NO_REASSIGNMENT_IN_PROGRESS, _NO_REASSIGNMENT)
    replicas = reg.original_replicas
    if not replicas:
        raise ReassignmentError(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "Invalid replica assignment: addingReplicas contains all replicas.",
        )
    isr = tuple(r for r in reg.isr if r not in reg.adding_replicas)
    if not isr:
        if not unclean_allowed:
            raise ReassignmentError(
                Errors.INVALID_REPLICA_ASSIGNMENT,
                "Unable to revert the partition assignment because it would require an "
                "unclean leader election.",
            )
        isr = (replicas[0],)
    return build_change(
        topic_id,
        partition,
        reg,
        usable,
        replicas=replicas,
        isr=isr,
        removing=(),
        adding=(),
        unclean=unclean_allowed,
        policy=policy,
    )


class ReassignmentControlManager:
    def __init__(
        self,
        config: ControllerConfig,
        configuration: ConfigurationControlManager,
        index: PartitionIndex | None = None,
    ) -> None:
        self.config = config
        self._configuration = configuration
        self.index = index or PartitionIndex()

    def alter_reassignments(
        self, image: MetadataImage, req: AlterPartitionReassignmentsRequest, now_ms: int
    ) -> Decision:
        usable = {b for b in image.brokers if image.is_usable(b)}
        results: list[PartitionResult] = []
        records: list[Record] = []
        seen: set[tuple[str, int]] = set()
        for target in req.partitions:
            key = (target.topic, target.partition)
            if key in seen:
                results.append(
                    PartitionResult(
                        *key, Errors.INVALID_REQUEST, "the partition appears more than once"
                    )
                )
                continue
            seen.add(key)
            try:
                record = self._alter_one(image, target, usable)
            except ReassignmentError as exc:
                results.append(PartitionResult(*key, exc.code, exc.message))
                continue
            if record is not None:
                records.append(record)
            results.append(PartitionResult(*key, Errors.NONE))
        # The batch did not apply (the image moved under the decision): nothing changed.
        failed = [
            PartitionResult(r.topic, r.partition, Errors.UNKNOWN_SERVER_ERROR)
            if r.error_code == Errors.NONE
            else r
            for r in results
        ]
        return Decision(
            tuple(records),
            AlterPartitionReassignmentsResponse(results),
            AlterPartitionReassignmentsResponse(failed),
        )

    def _alter_one(
        self, image: MetadataImage, target: ReassignablePartition, usable: set[int]
    ) -> PartitionChangeRecord | None:
        topic = image.topic_by_name(target.topic)
        if topic is None:
            raise ReassignmentError(
                Errors.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {target.topic}."
            )
        reg = topic.partitions.get(target.partition)
        if reg is None:
            raise ReassignmentError(
                Errors.UNKNOWN_TOPIC_OR_PARTITION,
                f"Unable to find partition {target.topic}:{target.partition}.",
            )
        policy = self._configuration.elr_policy(image, topic.name)
        if target.replicas is None:
            unclean = self._configuration.unclean_leader_election(image, topic.name)
            return cancel_change(topic.topic_id, target.partition, reg, usable, unclean, policy)
        validate_target(image, target.replicas)
        return start_change(topic.topic_id, target.partition, reg, target.replicas, usable, policy)

    def list_reassignments(
        self, image: MetadataImage, req: ListPartitionReassignmentsRequest, now_ms: int
    ) -> Decision:
        """Partitions being reassigned, of those asked for (None: all); partitions that
        do not exist or are not being reassigned are left out, as Kafka's."""
        if req.partitions is None:
            asked: Iterable[tuple[str, int]] = (
                (t.name, p)
                for t in sorted(image.topics.values(), key=lambda t: t.name)
                for p in sorted(t.partitions)
            )
        else:
            asked = dict.fromkeys((tp.topic, tp.partition) for tp in req.partitions)
        out: list[OngoingReassignment] = []
        for name, p in asked:
            topic = image.topic_by_name(name)
            reg = topic.partitions.get(p) if topic else None
            if reg is not None and reg.is_reassigning:
                out.append(
                    OngoingReassignment(
                        name,
                        p,
                        list(reg.replicas),
                        list(reg.adding_replicas),
                        list(reg.removing_replicas),
                    )
                )
        return Decision.answer(ListPartitionReassignmentsResponse(out))

    # -- completion after other changes ------------------------------------------------------

    def follow_up(self, image: MetadataImage, records: Iterable[Record]) -> list[Record]:
        """Completions the `records` (about to be appended on `image`) make possible: an
        ISR that grew by AlterPartition, or shrank by a fencing, may now hold every
        target replica. The completing changes go in the same batch, after `records`."""
        records = list(records)
        if not records or not self.index.of(image).reassigning:
            return []
        delta = MetadataDelta(image)
        try:
            for i, record in enumerate(records):
                delta.replay(record, image.offset + 1 + i)
        except MetadataReplayError:
            return []  # not ours to judge: the state machine refuses the batch itself
        after = delta.apply()
        usable = {b for b in after.brokers if after.is_usable(b)}
        out: list[Record] = []
        for topic_id, parts in sorted(delta.changed_partitions.items()):
            for p in sorted(parts):
                reg = after.partition(topic_id, p)
                if reg is None or not reg.is_reassigning:
                    continue
                topic = after.topics.get(topic_id)
                policy = (
                    self._configuration.elr_policy(after, topic.name)
                    if topic is not None
                    else ELR_OFF
                )
                change = build_change(topic_id, p, reg, usable, policy=policy)
                # Only a completion (it clears adding or removing): other changes are
                # the replication manager's.
                if change is not None and () in (change.adding_replicas, change.removing_replicas):
                    out.append(change)
        return out
