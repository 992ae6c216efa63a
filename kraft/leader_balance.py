"""Automatic preferred leader rebalancing: leadership goes back to each partition's
preferred replica (the first of its replicas) after failovers moved it elsewhere.

Kafka's settings and rule (the controller's auto leader rebalance task):
- `auto.leader.rebalance.enable` (default true) turns it on;
- every `leader.imbalance.check.interval.seconds` (default 300) the controller looks at
  each broker's imbalance ratio: among the partitions whose preferred replica is the
  broker, the share it does not lead;
- for a broker whose ratio is over `leader.imbalance.per.broker.percentage` (default 10)
  percent, a preferred election for each of those partitions where the preferred replica
  is in the ISR and usable (unfenced, not shutting down).

(Kafka's KRaft controller checks any imbalance and ignores the percentage; the per-broker
rule above is its ZooKeeper controller's, which the documented property describes.)

Sans-I/O: the active controller's tick calls `tick(image, now_ms)`; the balancer keeps
only the time of its next check, reset when a controller becomes active.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from kraft.election import PREFERRED, PartitionView, elect_on_request
from metadata_log.image import MetadataImage
from metadata_log.records import Record


@dataclass(frozen=True)
class LeaderBalanceConfig:
    enabled: bool = True  # auto.leader.rebalance.enable
    imbalance_percentage: int = 10  # leader.imbalance.per.broker.percentage
    check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds * 1000


def imbalance_ratios(image: MetadataImage) -> dict[int, tuple[float, list[tuple[str, int]]]]:
    """Per preferred broker: (share of its preferred partitions it does not lead, those
    partitions as (topic id, partition))."""
    preferred_for: dict[int, int] = defaultdict(int)
    not_led: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for topic_id in sorted(image.topics):
        for p, reg in sorted(image.topics[topic_id].partitions.items()):
            if not reg.replicas:
                continue
            broker = reg.replicas[0]
            preferred_for[broker] += 1
            if reg.leader != broker:
                not_led[broker].append((topic_id, p))
    return {b: (len(not_led[b]) / n, not_led[b]) for b, n in preferred_for.items()}


class LeaderBalancer:
    def __init__(self, config: LeaderBalanceConfig) -> None:
        self.config = config
        self._next_check_ms: int | None = None

    def activate(self, now_ms: int) -> None:
        """A new active controller waits one interval before its first check, as Kafka's
        schedules its first run (brokers are still registering right after a failover)."""
        self._next_check_ms = now_ms + self.config.check_interval_ms

    def tick(self, image: MetadataImage, now_ms: int) -> list[Record]:
        """The preferred elections due at `now_ms` (none between checks)."""
        if not self.config.enabled:
            return []
        if self._next_check_ms is None:
            self.activate(now_ms)
        assert self._next_check_ms is not None
        if now_ms < self._next_check_ms:
            return []
        self._next_check_ms = now_ms + self.config.check_interval_ms
        return self.elections(image)

    def elections(self, image: MetadataImage) -> list[Record]:
        usable = {b for b in image.brokers if image.is_usable(b)}
        limit = self.config.imbalance_percentage / 100
        out: list[Record] = []
        for broker, (ratio, partitions) in sorted(imbalance_ratios(image).items()):
            if ratio <= limit or broker not in usable:
                continue
            for topic_id, p in partitions:
                reg = image.topics[topic_id].partitions[p]
                change = elect_on_request(PartitionView.of(reg), PREFERRED, usable)
                if isinstance(change, int):
                    continue  # preferred replica out of the ISR: it must catch up first
                out.append(change.record(topic_id, p))
        return out
