"""The cluster control manager (Kafka's ClusterControlManager with its
BrokerHeartbeatManager): broker registrations, sessions and heartbeats, fencing and
unfencing, controlled shutdown. Sans-I/O: an image, a request and `now_ms` in; a decision
out.

Kafka's rules (KIP-631): a broker registers with a new epoch per incarnation (the offset
of its registration); it must heartbeat within `broker.session.timeout.ms` or be fenced;
it is unfenced once caught up with the metadata log (its current metadata offset reached
its broker epoch). A fenced or shutting-down broker must also leave leaderships and ISRs:
that is the replication manager's part, so each decision here says which brokers it
changes (`BrokerTransition`) and the router adds the partition changes to the same batch.

Sessions live only in the active controller's memory: a new active controller gives every
broker a fresh session before fencing any (`activate`).

Fast fencing of a dead process (ours; Kafka always waits out the session). Silence alone
cannot tell a dead broker from a slow or partitioned one, so it keeps the full session
timeout. Two signals are certain that the *process* is gone while its host is up, and
arrive as events (`unreachable`), never as timings:
- "disconnected": every connection the broker held to the active controller (the one its
  heartbeats use, its metadata long-poll if it reads here) closed; the kernel closes a dead
  process's sockets, while a live broker keeps its heartbeat connection open;
- "refused": a follower's connection to it was refused (nothing listens on its port).
Once such a signal arrives after the broker's last heartbeat, the active controller
confirms it with a connection of its own to every listener the broker registered
(kraft/liveness_probe.py, in the node's I/O shell); all refused (`confirmed_dead`) fences
the broker at the next tick. Unconfirmed, the session only shrinks to
`broker.disconnect.fence.grace.ms` (default 3000, 1.5 heartbeat intervals) counted from
that last heartbeat. Any later heartbeat of the same incarnation clears the suspicion.
So a signal never fences by itself: a live broker that reconnects (a long-poll restart,
a controller failover, an idle connection closed) still listens, and heartbeats in time.
Failure modes, by design: a slow or SIGSTOPped broker keeps its connections open and its
port accepting, so it keeps the full session (no signal); a host that vanishes (power, a
network partition) gives timeouts, not refusals or FINs, so it too waits out the session
(unless a firewall rejects with RSTs, which looks like a dead process);
a live broker whose heartbeat is late by more than the grace's slack *and* that saw a
spurious signal is fenced early, and unfenced at its next heartbeat once caught up (the
price of the shorter grace). Signals about a fenced broker, one in controlled shutdown, an
older incarnation, or reaching a controller that is not active, are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.errors import Errors
from kraft.decision import ControllerConfig, Decision
from kraft.partition_index import PartitionIndex
from metadata_log.controller_api import (
    BrokerHeartbeatRequest,
    BrokerHeartbeatResponse,
    BrokerRegistrationRequest,
    BrokerRegistrationResponse,
    BrokerUnreachableRequest,
    BrokerUnreachableResponse,
)
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ControlledShutdownRecord,
    FenceBrokerRecord,
    Record,
    RegisterBrokerRecord,
    UnfenceBrokerRecord,
)


@dataclass(frozen=True, slots=True)
class BrokerTransition:
    """Brokers whose usability a decision changes, for the replication manager: leaders
    and ISR places move off `unusable`; offline partitions may be led by `newly_usable`;
    `restarted` brokers (a new incarnation) may have lost an unflushed tail;
    `unclean_shutdown` ones (KIP-966) said so: they leave every ELR."""

    unusable: frozenset[int] = frozenset()
    newly_usable: frozenset[int] = frozenset()
    restarted: frozenset[int] = frozenset()
    unclean_shutdown: frozenset[int] = frozenset()


class ClusterControlManager:
    def __init__(self, config: ControllerConfig, index: PartitionIndex | None = None) -> None:
        self.config = config
        self.index = index or PartitionIndex()
        self._last_seen: dict[int, int] = {}  # broker id -> last heartbeat (ms)
        # broker id -> when a sign that its process is gone arrived (after _last_seen)
        self._suspected: dict[int, int] = {}
        # suspected brokers whose listeners all refused the controller's own connection
        self._confirmed: set[int] = set()

    # -- sessions ----------------------------------------------------------------------------

    def activate(self, image: MetadataImage, now_ms: int) -> None:
        """A new active controller gives every broker a fresh session before fencing any:
        heartbeat times (and suspicions) of the previous one died with it."""
        self._last_seen = dict.fromkeys(image.brokers, now_ms)
        self._suspected = {}
        self._confirmed = set()

    def _touch(self, broker_id: int, now_ms: int) -> None:
        self._last_seen[broker_id] = now_ms
        # Alive after the signal: it was a reconnect, not a death.
        self._suspected.pop(broker_id, None)
        self._confirmed.discard(broker_id)

    def session_deadline(self, broker_id: int) -> int:
        """When the session ends (ms): the session timeout after the last heartbeat, or
        the shorter grace once the broker is suspected dead, or the signal's own time once
        the probe confirmed it; -1 if it has none."""
        last = self._last_seen.get(broker_id)
        if last is None:
            return -1
        if broker_id in self._confirmed:
            return self._suspected[broker_id]
        timeout = self.config.session_timeout_ms
        if broker_id in self._suspected and self.config.disconnect_grace_ms > 0:
            timeout = min(timeout, self.config.disconnect_grace_ms)
        return last + timeout

    def session_alive(self, broker_id: int, now_ms: int) -> bool:
        return self.session_deadline(broker_id) > now_ms

    def is_suspected(self, broker_id: int) -> bool:
        return broker_id in self._suspected

    def is_confirmed(self, broker_id: int) -> bool:
        return broker_id in self._confirmed

    # -- decisions ---------------------------------------------------------------------------

    def register_broker(
        self, image: MetadataImage, req: BrokerRegistrationRequest, now_ms: int
    ) -> tuple[Decision, BrokerTransition | None]:
        existing = image.brokers.get(req.broker_id)
        if existing is not None and existing.incarnation_id == req.incarnation_id:
            self._touch(req.broker_id, now_ms)
            response = BrokerRegistrationResponse(Errors.NONE, existing.broker_epoch)
            return Decision.answer(response), None
        if (
            existing is not None
            and not existing.fenced
            and self.session_alive(req.broker_id, now_ms)
        ):
            refusal = BrokerRegistrationResponse(
                Errors.DUPLICATE_BROKER_REGISTRATION,
                error_message=f"broker {req.broker_id} is registered by another "
                "incarnation whose session is alive",
            )
            return Decision.answer(refusal), None
        record = RegisterBrokerRecord(
            req.broker_id, req.incarnation_id, -1, tuple(req.listeners), req.rack, True
        )
        self._touch(req.broker_id, now_ms)
        decision = Decision(
            (record,),
            # The broker epoch is the registration's offset, known once it is applied.
            BrokerRegistrationResponse(Errors.NONE),
            BrokerRegistrationResponse(Errors.UNKNOWN_SERVER_ERROR),
            offset_field="broker_epoch",
            error_field="error_message",
        )
        if existing is None:
            return decision, None
        # A restarted broker: fenced until caught up again, and out of leaderships now.
        # KIP-966: unless it names the epoch it had, its last shutdown was unclean (its log
        # may have lost records below the HW): it leaves the ELRs in the same batch.
        restarted = frozenset({req.broker_id})
        unclean = restarted if req.previous_broker_epoch != existing.broker_epoch else frozenset()
        return decision, BrokerTransition(
            unusable=restarted, restarted=restarted, unclean_shutdown=unclean
        )

    def heartbeat(
        self, image: MetadataImage, req: BrokerHeartbeatRequest, now_ms: int
    ) -> tuple[Decision, BrokerTransition | None]:
        b = image.brokers.get(req.broker_id)
        if b is None:
            return Decision.answer(BrokerHeartbeatResponse(Errors.BROKER_ID_NOT_REGISTERED)), None
        if b.broker_epoch != req.broker_epoch:
            return Decision.answer(BrokerHeartbeatResponse(Errors.STALE_BROKER_EPOCH)), None
        self._touch(b.broker_id, now_ms)
        caught_up = req.current_metadata_offset >= b.broker_epoch
        records: list[Record] = []
        transition: BrokerTransition | None = None
        fenced = b.fenced
        if req.want_shutdown:
            if not b.in_controlled_shutdown:
                records.append(ControlledShutdownRecord(b.broker_id, b.broker_epoch))
                transition = BrokerTransition(unusable=frozenset({b.broker_id}))
        elif req.want_fence and not b.fenced:
            records.append(FenceBrokerRecord(b.broker_id, b.broker_epoch))
            transition = BrokerTransition(unusable=frozenset({b.broker_id}))
            fenced = True
        elif b.fenced and caught_up and not req.want_fence:
            records.append(UnfenceBrokerRecord(b.broker_id, b.broker_epoch))
            # Offline partitions it can lead get their leader in the same batch.
            # (Unfencing also ends a controlled shutdown: see UnfenceBrokerRecord's replay.)
            transition = BrokerTransition(newly_usable=frozenset({b.broker_id}))
            fenced = False
        # A broker may stop once its controlled shutdown has committed and it leads nothing
        # that another replica could lead (only its own partitions are looked at).
        shut_down = (
            req.want_shutdown
            and b.in_controlled_shutdown
            and not self._leads_replicated(image, b.broker_id)
        )
        response = BrokerHeartbeatResponse(
            Errors.NONE, is_caught_up=caught_up, is_fenced=fenced, should_shut_down=shut_down
        )
        failure = BrokerHeartbeatResponse(Errors.UNKNOWN_SERVER_ERROR, is_fenced=b.fenced)
        return Decision(tuple(records), response, failure), transition

    def unreachable(
        self, image: MetadataImage, req: BrokerUnreachableRequest, now_ms: int
    ) -> Decision:
        """A sign that the broker's process is gone: remember it; `fence_expired` fences
        the broker if no heartbeat clears it within the grace. No records: the signal
        alone decides nothing."""
        b = image.brokers.get(req.broker_id)
        if b is None:
            return Decision.answer(BrokerUnreachableResponse(Errors.BROKER_ID_NOT_REGISTERED))
        if req.broker_epoch not in (-1, b.broker_epoch):
            # About an older incarnation (its replacement registered): nothing to do.
            return Decision.answer(BrokerUnreachableResponse(Errors.STALE_BROKER_EPOCH))
        if (
            not b.fenced
            and not b.in_controlled_shutdown  # leaving on its own path, leaderships moved
            and req.reporter_id != req.broker_id
            and self.config.disconnect_grace_ms > 0
            and b.broker_id in self._last_seen
        ):
            self._suspected.setdefault(b.broker_id, now_ms)
        return Decision.answer(BrokerUnreachableResponse(Errors.NONE))

    def confirmed_dead(self, image: MetadataImage, broker_id: int, broker_epoch: int) -> bool:
        """The controller's probe found every listener of the suspected incarnation
        refusing connections (kraft/liveness_probe.py): a second, independent sign, taken
        as proof; `fence_expired` fences it at the next tick. Ignored (False) if a
        heartbeat cleared the suspicion meanwhile, or the broker re-registered, was fenced
        or began a controlled shutdown."""
        b = image.brokers.get(broker_id)
        if (
            b is None
            or b.broker_epoch != broker_epoch
            or b.fenced
            or b.in_controlled_shutdown
            or broker_id not in self._suspected
        ):
            return False
        self._confirmed.add(broker_id)
        return True

    def _leads_replicated(self, image: MetadataImage, broker_id: int) -> bool:
        for topic_id, p in self.index.of(image).led_by(broker_id):
            reg = image.partition(topic_id, p)
            if reg is not None and len(reg.replicas) > 1:
                return True
        return False

    def fence_expired(
        self, image: MetadataImage, now_ms: int
    ) -> tuple[list[Record], BrokerTransition]:
        """Fence every unfenced broker whose session has expired (the full session timeout
        after its last heartbeat, or the grace if it was suspected dead since)."""
        expired = sorted(
            b.broker_id
            for b in image.brokers.values()
            if not b.fenced and not self.session_alive(b.broker_id, now_ms)
        )
        records: list[Record] = [
            FenceBrokerRecord(bid, image.brokers[bid].broker_epoch) for bid in expired
        ]
        return records, BrokerTransition(unusable=frozenset(expired))
