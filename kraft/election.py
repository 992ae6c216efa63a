"""Leader election and ISR repair for one partition, given which brokers are usable.

Rules (Kafka's PartitionChangeBuilder, KIP-841): a usable leader in the ISR stays; the
ISR drops unusable members while more than one member remains; otherwise the first
usable ISR member in replica order leads; with none, unclean election (if allowed)
takes the first usable replica with an ISR of itself, else the partition goes offline
(leader -1) keeping one ISR member, the last leader if it was one, so that it can lead
again when it returns. A leader change bumps the leader epoch; any change bumps the
partition epoch.

With eligible leader replicas (KIP-966, `eligible.leader.replicas.enable`): the ISR may
become empty (a fenced last member leaves it too); while it is below
min.insync.replicas, replicas that leave it join the ELR (the leader's HW stands still
then, so they hold every record below it), and at or above min ISR the ELR and last
known ELR are emptied. A leader comes from the usable ISR first, then from the usable
ELR (its ISR is then itself alone), then the last known leader once ISR and ELR are empty
(Kafka's balanced recovery), then, only where the topic allows it, from any usable
replica (an unclean election, which clears the ELR). Brokers that registered after an
unclean shutdown (`unclean_shutdown`) leave the ELR: their logs may have lost records
below the HW.
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
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()

    @classmethod
    def of(cls, reg: PartitionRegistration) -> PartitionView:
        return cls(
            reg.replicas,
            reg.isr,
            reg.leader,
            reg.leader_epoch,
            reg.partition_epoch,
            reg.elr,
            reg.last_known_elr,
        )


@dataclass(frozen=True, slots=True)
class ElrPolicy:
    """How a partition's ELR is kept: `enabled` (eligible.leader.replicas.enable) and the
    topic's min.insync.replicas."""

    enabled: bool = False
    min_isr: int = 1


ELR_OFF = ElrPolicy()


@dataclass(frozen=True, slots=True)
class PartitionChange:
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    elr: tuple[int, ...] | None = None  # None: unchanged
    last_known_elr: tuple[int, ...] | None = None  # None: unchanged

    def record(self, topic_id: str, partition: int) -> PartitionChangeRecord:
        """The metadata record that makes this change (every electing caller's output)."""
        return PartitionChangeRecord(
            topic_id,
            partition,
            self.isr,
            self.leader,
            self.leader_epoch,
            self.partition_epoch,
            elr=self.elr,
            last_known_elr=self.last_known_elr,
        )


def next_elr(
    p: PartitionView,
    new_isr: tuple[int, ...],
    new_leader: int,
    policy: ElrPolicy,
    unclean_shutdown: frozenset[int] = frozenset(),
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The (ELR, last known ELR) once the ISR becomes `new_isr` and the leader
    `new_leader` (Kafka's PartitionChangeBuilder, with the last known leader kept as in
    its balanced recovery): the ELR is empty at or above min ISR; below it, it gains the
    members leaving the ISR and loses those joining it and those back from an unclean
    shutdown. The last known ELR holds the last leader from when the ISR first empties
    until a leader is elected again (an unclean shutdown does not remove it: it is the
    last resort when no replica is eligible). Off: both empty."""
    if not policy.enabled:
        return (), ()
    if len(new_isr) >= policy.min_isr:
        elr: tuple[int, ...] = ()
    else:
        gone = set(new_isr) | unclean_shutdown
        candidates = set(p.elr) | set(p.isr)
        elr = tuple(r for r in p.replicas if r in candidates and r not in gone)
    if new_leader != NO_LEADER:
        last_known: tuple[int, ...] = ()
    elif not new_isr and p.leader != NO_LEADER:
        last_known = (p.leader,)
    else:
        last_known = p.last_known_elr
    return elr, last_known


def with_elr(
    p: PartitionView,
    isr: tuple[int, ...],
    leader: int,
    policy: ElrPolicy,
    unclean_shutdown: frozenset[int] = frozenset(),
    unclean_election: bool = False,
) -> PartitionChange | None:
    """The change from `p` to this ISR and leader with the ELR kept by `policy` (an
    unclean election clears it); None when nothing changes."""
    if unclean_election:
        elr, last_known = (), ()
    else:
        elr, last_known = next_elr(p, isr, leader, policy, unclean_shutdown)
    if leader == p.leader and isr == p.isr and elr == p.elr and last_known == p.last_known_elr:
        return None
    return PartitionChange(
        isr=isr,
        leader=leader,
        leader_epoch=p.leader_epoch + (1 if leader != p.leader else 0),
        partition_epoch=p.partition_epoch + 1,
        elr=None if elr == p.elr else elr,
        last_known_elr=None if last_known == p.last_known_elr else last_known,
    )


def elect(
    p: PartitionView,
    usable: set[int],
    unclean_allowed: bool,
    restarted: frozenset[int] = frozenset(),
    policy: ElrPolicy = ELR_OFF,
    unclean_shutdown: frozenset[int] = frozenset(),
) -> PartitionChange | None:
    """The change needed for `p` given the usable brokers, or None when none is.

    `restarted`: brokers registering a new incarnation. Their logs may have lost an
    unflushed tail, so when the partition goes offline another ISR member is the one
    kept (the spirit of KIP-966: never trust an unclean restart over an intact copy).
    `unclean_shutdown`: those of them that said their last shutdown was unclean."""
    if policy.enabled:
        return _elect_elr(p, usable, unclean_allowed, policy, unclean_shutdown)
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
        # An ISR emptied while ELR was on (the switch turned off since): an ELR member,
        # in sync at the HW, is the one kept.
        pool = first + p.isr or p.elr
        kept = [r for r in pool if r not in restarted] or list(pool)
        isr = (kept[0],) if kept else ()
    # ELR off: whatever an earlier ELR-enabled controller left is cleared (Kafka does too).
    return with_elr(p, isr, leader, ELR_OFF)


def _elect_elr(
    p: PartitionView,
    usable: set[int],
    unclean_allowed: bool,
    policy: ElrPolicy,
    unclean_shutdown: frozenset[int],
) -> PartitionChange | None:
    """`elect` with eligible leader replicas: the ISR, then the ELR, then the last known
    leader once ISR and ELR are empty (Kafka's balanced recovery: it may have lost an
    unflushed tail, but nobody is known to hold more), then (if allowed) unclean."""
    live_isr = tuple(r for r in p.isr if r in usable)
    elr = [r for r in p.elr if r not in unclean_shutdown]
    unclean_election = False
    if p.leader != NO_LEADER and p.leader in usable and p.leader in p.isr:
        leader, isr = p.leader, live_isr
    elif live_isr:
        leader = next(r for r in p.replicas if r in live_isr)
        isr = live_isr
    elif any(r in usable for r in elr):
        # Every ELR member holds all records below the HW: it leads alone.
        leader = next(r for r in p.replicas if r in elr and r in usable)
        isr = (leader,)
    elif not elr and len(p.last_known_elr) == 1 and p.last_known_elr[0] in usable:
        leader = p.last_known_elr[0]
        isr = (leader,)
        unclean_election = True
    elif unclean_allowed and any(r in usable for r in p.replicas):
        leader = next(r for r in p.replicas if r in usable)
        isr = (leader,)
        unclean_election = True
    else:
        # Offline: the ISR may be empty; the ELR keeps who can lead when back.
        leader, isr = NO_LEADER, live_isr
    return with_elr(p, isr, leader, policy, unclean_shutdown, unclean_election)


# -- elections an operator asks for (ElectLeaders) -------------------------------------------

PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType values


def elect_on_request(
    p: PartitionView, election_type: int, usable: set[int], policy: ElrPolicy = ELR_OFF
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
    change = elect(p, usable, unclean_allowed=True, policy=policy)
    if change is None or change.leader == NO_LEADER:
        return Errors.ELIGIBLE_LEADERS_NOT_AVAILABLE
    return change
