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

import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kraft.decision import ControllerConfig, Decision
from kraft.election import PartitionView, elect
from kraft.state_machine import AppendResult, AppendStatus
from kraft.topic_control import TopicControl
from metadata_log.controller_api import (
    AllocateProducerIdsRequest,
    AllocateProducerIdsResponse,
    AlterPartitionRequest,
    AlterPartitionResponse,
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    CreatePartitionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ElectLeadersRequest,
    Errors,
    IncrementalAlterConfigsRequest,
)
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ControlledShutdownRecord,
    FenceBrokerRecord,
    PartitionChangeRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)


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
        self._topics = TopicControl(self.config, new_topic_id)

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
        now_ms: int | None = None,
        restarted: frozenset[int] = frozenset(),
    ) -> list[Record]:
        """Partition changes so no unusable broker leads or sits in an ISR of size > 1,
        and offline partitions get a leader where one is eligible (`newly_usable`: brokers
        unfenced by records of the same batch).

        With `now_ms`, a broker whose session has expired is unusable even before the
        next tick fences it: otherwise a broker registering again could hand its ISR
        places to brokers that are already dead (found by the replication model: a
        restarted broker's registration left the one replica that had lost its
        unflushed tail as the only ISR member)."""
        usable = {
            b
            for b in image.brokers
            if image.is_usable(b)
            and b not in unusable
            and (now_ms is None or self.session_alive(b, now_ms))
        } | newly_usable
        out: list[Record] = []
        for topic_id in sorted(image.topics if topics is None else topics):
            topic = image.topics[topic_id]
            unclean = self._unclean_allowed(image, topic.name)
            for p, reg in sorted(topic.partitions.items()):
                change = elect(PartitionView.of(reg), usable, unclean, restarted)
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
            records += self._rebalance(
                image, {req.broker_id}, now_ms=now_ms, restarted=frozenset({req.broker_id})
            )
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
                records += self._rebalance(image, {b.broker_id}, now_ms=now_ms)
        elif req.want_fence and not b.fenced:
            records.append(FenceBrokerRecord(b.broker_id, b.broker_epoch))
            records += self._rebalance(image, {b.broker_id}, now_ms=now_ms)
            fenced = True
        elif b.fenced and caught_up and not req.want_fence:
            records.append(UnfenceBrokerRecord(b.broker_id, b.broker_epoch))
            # Offline partitions it can lead get their leader in the same batch.
            # (Unfencing also ends a controlled shutdown: see UnfenceBrokerRecord's replay.)
            records += self._rebalance(
                image, set(), newly_usable=frozenset({b.broker_id}), now_ms=now_ms
            )
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
        records += self._rebalance(image, set(expired), now_ms=now_ms)
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
        fetched_with = dict(zip(new_isr, req.new_isr_broker_epochs, strict=False))
        stale = [
            r for r in added if fetched_with.get(r, -1) not in (-1, image.brokers[r].broker_epoch)
        ]
        if stale:
            return answer(
                Errors.INELIGIBLE_REPLICA,
                f"replicas {stale} fetched as an incarnation that is no longer registered",
            )
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

    # -- topics (kraft/topic_control.py) ---------------------------------------------------

    def create_topics(
        self, image: MetadataImage, req: CreateTopicsRequest, now_ms: int
    ) -> Decision:
        return self._topics.create_topics(image, req)

    def delete_topics(
        self, image: MetadataImage, req: DeleteTopicsRequest, now_ms: int
    ) -> Decision:
        return self._topics.delete_topics(image, req)

    def create_partitions(
        self, image: MetadataImage, req: CreatePartitionsRequest, now_ms: int
    ) -> Decision:
        return self._topics.create_partitions(image, req)

    def elect_leaders(
        self, image: MetadataImage, req: ElectLeadersRequest, now_ms: int
    ) -> Decision:
        return self._topics.elect_leaders(image, req)

    def alter_configs(
        self, image: MetadataImage, req: IncrementalAlterConfigsRequest, now_ms: int
    ) -> Decision:
        return self._topics.alter_configs(image, req)
