"""Leader election and ISR repair for one partition, given which brokers are usable.

Rules (Kafka's PartitionChangeBuilder, KIP-841): a usable leader in the ISR stays; the
ISR drops unusable members while more than one member remains; otherwise the first
usable ISR member in replica order leads; with none, unclean election (if allowed)
takes the first usable replica with an ISR of itself, else the partition goes offline
(leader -1) keeping one ISR member, the last leader if it was one, so that it can lead
again when it returns. A leader change bumps the leader epoch; any change bumps the
partition epoch.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import Errors
from metadata_log.image import PartitionRegistration
from metadata_log.records import NO_LEADER, PartitionChangeRecord


@dataclass(frozen=True, slots=True)
class PartitionView:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    @classmethod
    def of(cls, reg: PartitionRegistration) -> PartitionView:
        return cls(reg.replicas, reg.isr, reg.leader, reg.leader_epoch, reg.partition_epoch)


@dataclass(frozen=True, slots=True)
class PartitionChange:
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int

    def record(self, topic_id: str, partition: int) -> PartitionChangeRecord:
        """The metadata record that makes this change (every electing caller's output)."""
        return PartitionChangeRecord(
            topic_id, partition, self.isr, self.leader, self.leader_epoch, self.partition_epoch
        )


def elect(
    p: PartitionView,
    usable: set[int],
    unclean_allowed: bool,
    restarted: frozenset[int] = frozenset(),
) -> PartitionChange | None:
    """The change needed for `p` given the usable brokers, or None when none is.

    `restarted`: brokers registering a new incarnation. Their logs may have lost an
    unflushed tail, so when the partition goes offline another ISR member is the one
    kept (the spirit of KIP-966: never trust an unclean restart over an intact copy)."""
    live_isr = tuple(r for r in p.isr if r in usable)
    if p.leader != NO_LEADER and p.leader in usable and p.leader in p.isr:
        leader, isr = p.leader, live_isr
    elif live_isr:
        leader = next(r for r in p.replicas if r in live_isr)
        isr = live_isr
    elif unclean_allowed and any(r in usable for r in p.replicas):
        leader = next(r for r in p.replicas if r in usable)
        isr = (leader,)
    else:
        leader = NO_LEADER
        first = (p.leader,) if p.leader in p.isr else ()
        kept = [r for r in first + p.isr if r not in restarted] or list(first + p.isr)
        isr = (kept[0],)
    if leader == p.leader and isr == p.isr:
        return None
    return PartitionChange(
        isr=isr,
        leader=leader,
        leader_epoch=p.leader_epoch + (1 if leader != p.leader else 0),
        partition_epoch=p.partition_epoch + 1,
    )


# -- elections an operator asks for (ElectLeaders) -------------------------------------------

PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType values


def elect_on_request(
    p: PartitionView, election_type: int, usable: set[int]
) -> PartitionChange | int:
    """The change an ElectLeaders request makes to `p`, or the Kafka error code saying why
    none (Kafka's ReplicationControlManager.electLeader over PartitionChangeBuilder):

    - preferred: ELECTION_NOT_NEEDED when the first replica already leads; it takes over
      when it is in the ISR and usable, else PREFERRED_LEADER_NOT_AVAILABLE;
    - unclean: ELECTION_NOT_NEEDED while the partition has a leader; a usable ISR member
      is still preferred (a clean election), else the first usable replica leads with an
      ISR of itself; with no usable replica, ELIGIBLE_LEADERS_NOT_AVAILABLE.
    """
    if election_type == PREFERRED:
        preferred = p.replicas[0]
        if p.leader == preferred:
            return Errors.ELECTION_NOT_NEEDED
        if preferred not in p.isr or preferred not in usable:
            return Errors.PREFERRED_LEADER_NOT_AVAILABLE
        return PartitionChange(p.isr, preferred, p.leader_epoch + 1, p.partition_epoch + 1)
    if p.leader != NO_LEADER:
        return Errors.ELECTION_NOT_NEEDED
    change = elect(p, usable, unclean_allowed=True)
    if change is None or change.leader == NO_LEADER:
        return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return change
