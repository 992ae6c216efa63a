"""One consumer group's state in the classic group protocol (Kafka's GroupMetadata).

Plain data and the small rules that only look at one group: which members are
waiting, which protocol the members agree on, what the group's record in
`__consumer_offsets` holds. The transitions that answer requests and run timers live
in `coordinator.py`.
"""

from __future__ import annotations

import enum
import logging
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from broker.group.records import GroupValue, MemberValue, OffsetValue
from common.errors import Errors

T = TypeVar("T")

# Rebalances are rare and are what an operator asks about first ("why did my consumer
# lose its partitions?"), so their transitions are logged at INFO, as Kafka does.
log = logging.getLogger("broker.group")


@dataclass
class PendingTxnOffset:
    value: OffsetValue
    position: int | None = None  # batch offset once appended; None while in flight
    failed: bool = False  # its append failed: nothing of it is in the log
    previous: PendingTxnOffset | None = None  # the transaction's entry before, while in flight


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class Member(Generic[T]):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]  # (name, metadata) in the member's preference order
    assignment: bytes = b""
    join_token: T | None = None  # a JoinGroup waiting for the rebalance to complete
    join_answer: T | None = None  # a completed JoinGroup waiting for its generation's record
    sync_token: T | None = None  # a SyncGroup waiting for the leader's assignment
    last_heartbeat_ms: int = 0
    is_new: bool = False  # joined in the current rebalance, not yet given a generation

    @property
    def awaiting_join(self) -> bool:
        return self.join_token is not None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def same_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocol_type == protocol_type and self.protocols == protocols


@dataclass
class Group(Generic[T]):
    group_id: str
    partition: int  # of __consumer_offsets
    state: GroupState = GroupState.EMPTY
    state_since_ms: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member[T]] = field(default_factory=dict)
    pending_members: dict[str, int] = field(default_factory=dict)  # KIP-394 id -> deadline
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    offsets: dict[tuple[str, int], OffsetValue] = field(default_factory=dict)
    # The __consumer_offsets batch offset each committed offset was written at (Kafka's
    # CommitRecordMetadataAndOffset): a transactional commit that completes later must
    # not replace a plain commit written after it.
    offset_positions: dict[tuple[str, int], int] = field(default_factory=dict)
    # Kafka's pendingTransactionalOffsetCommits: producer id -> offsets appended (or
    # being appended) in its open transaction, invisible until its commit marker.
    pending_txn: dict[int, dict[tuple[str, int], PendingTxnOffset]] = field(default_factory=dict)
    rebalance_deadline_ms: int = -1  # PreparingRebalance: join ends; else: sync ends
    awaiting_sync: set[str] = field(default_factory=set)  # answered joins owing a sync
    initial_delay: bool = False  # the first rebalance of an empty group waits for joiners
    initial_delay_left_ms: int = 0  # how much longer the initial delay may be extended
    new_member_added: bool = False  # a member joined during the initial delay

    def transition(self, state: GroupState, now_ms: int) -> None:
        if state != self.state:
            log.info(
                "group %s: %s -> %s, generation %d, members %s",
                self.group_id,
                self.state.value,
                state.value,
                self.generation_id,
                sorted(self.members),
            )
        self.state = state
        self.state_since_ms = now_ms

    def is_empty(self) -> bool:
        return not self.members

    def all_joined(self) -> bool:
        return not self.pending_members and all(m.awaiting_join for m in self.members.values())

    def member_error(self, member_id: str, instance: str | None) -> int:
        """NONE when the request comes from a current member, else Kafka's code: a static
        instance id now held by another member id is FENCED_INSTANCE_ID, checked first;
        an id we do not know is UNKNOWN_MEMBER_ID."""
        if instance is not None and self.static_members.get(instance, member_id) != member_id:
            return Errors.FENCED_INSTANCE_ID
        mem = self.members.get(member_id)
        if mem is None:
            return Errors.UNKNOWN_MEMBER_ID
        if instance is not None and mem.group_instance_id != instance:
            return Errors.FENCED_INSTANCE_ID
        return Errors.NONE

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def candidate_protocols(self) -> list[str]:
        """Protocols every member supports, in the first member's order."""
        members = list(self.members.values())
        if not members:
            return []
        common = set.intersection(*({n for n, _ in m.protocols} for m in members))
        return [n for n, _ in members[0].protocols if n in common]

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        """Could a member with these protocols join (Kafka's supportsProtocols)?"""
        if not protocol_type or not protocols:
            return False
        if self.is_empty():
            return True
        names = {n for n, _ in protocols}
        return protocol_type == self.protocol_type and any(
            n in names for n in self.candidate_protocols()
        )

    def select_protocol(self) -> str:
        """Each member votes for its most preferred candidate; the most votes win (ties:
        the first candidate in order, for determinism)."""
        candidates = self.candidate_protocols()
        votes = Counter(
            next(n for n, _ in m.protocols if n in candidates) for m in self.members.values()
        )
        return max(candidates, key=lambda n: (votes[n], -candidates.index(n)))

    def subscribed_topics(self) -> set[str] | None:
        """Topics the members subscribe to, from the consumer protocol's subscription
        (None: not a consumer group, or a subscription we cannot read)."""
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        out: set[str] = set()
        for m in self.members.values():
            topics = consumer_subscription_topics(m.metadata(self.protocol_name))
            if topics is None:
                return None
            out |= topics
        return out

    def to_value(self) -> GroupValue:
        return GroupValue(
            self.protocol_type or "",
            self.generation_id,
            self.protocol_name,
            self.leader_id,
            self.state_since_ms,
            tuple(
                MemberValue(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.rebalance_timeout_ms,
                    m.session_timeout_ms,
                    m.metadata(self.protocol_name),
                    m.assignment,
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def from_value(cls, group_id: str, partition: int, v: GroupValue, now_ms: int) -> Group[T]:
        """A group loaded from its record: Stable with its last generation's members
        (who get a fresh session from now), or Empty."""
        g: Group[T] = cls(group_id, partition)
        g.protocol_type = v.protocol_type or None
        g.generation_id = v.generation
        g.protocol_name = v.protocol
        g.leader_id = v.leader
        for mv in v.members:
            protocols = [(v.protocol, mv.subscription)] if v.protocol is not None else []
            g.members[mv.member_id] = Member(
                mv.member_id,
                mv.group_instance_id,
                mv.client_id,
                mv.client_host,
                mv.rebalance_timeout_ms,
                mv.session_timeout_ms,
                v.protocol_type,
                protocols,
                mv.assignment,
                last_heartbeat_ms=now_ms,
            )
            if mv.group_instance_id is not None:
                g.static_members[mv.group_instance_id] = mv.member_id
        since = v.current_state_timestamp if v.current_state_timestamp >= 0 else now_ms
        if not g.members:
            g.transition(GroupState.EMPTY, since)
        elif any(not x.assignment for x in g.members.values()):
            # Its last generation was stored before the leader's assignment: the members
            # must join again (they hear REBALANCE_IN_PROGRESS on their next heartbeat).
            g.transition(GroupState.PREPARING_REBALANCE, now_ms)
            g.rebalance_deadline_ms = now_ms + g.rebalance_timeout_ms()
        else:
            g.transition(GroupState.STABLE, since)
        return g


_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def consumer_subscription_topics(metadata: bytes) -> set[str] | None:
    """The topics of a ConsumerProtocolSubscription (every version starts with int16
    version, then an array of int16-length strings)."""
    try:
        pos = 2
        (n,) = _I32.unpack_from(metadata, pos)
        pos += 4
        topics = set()
        for _ in range(max(0, n)):
            (size,) = _I16.unpack_from(metadata, pos)
            pos += 2
            if size < 0 or pos + size > len(metadata):
                return None
            topics.add(metadata[pos : pos + size].decode())
            pos += size
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
