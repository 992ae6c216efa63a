"""Which brokers a Metadata answer names besides the unfenced ones: those fenced recently,
and, when no broker is unfenced, every registered one.

Kafka names unfenced brokers only. librdkafka (2.10 and later) drops every broker a
Metadata answer leaves out, and its group consumers do not survive that for a broker that
is fenced for a few seconds and back:
- a broker fenced while cut off from the controllers is left out by the brokers that
  already know, while one that does not yet know still names it as the group
  coordinator; the consumer then sets a coordinator it has just dropped, drops it again,
  and hangs (fault campaign seed 373227864; confluentinc/librdkafka#5511, open);
- with every broker fenced for a moment, it drops them all, bootstrap ones too, and
  re-bootstraps only after `metadata.recovery.rebootstrap.trigger.ms` (5 min) (seed
  2494538150).
So a broker stays named for FENCED_LISTED_MS after it was last seen going from unfenced to
fenced: long enough for a restart or a heal, short enough that a broker gone for good
leaves the answers soon after, as in Kafka. Partitions are still described against the
unfenced brokers only, and DescribeCluster names unfenced brokers only, as Kafka's does.

The decision is sans-I/O (`observe` takes the time); the publisher shell reads the clock.
"""

from __future__ import annotations

from broker.metadata_publisher import LoaderManifest
from common.clock import SYSTEM_CLOCK, Clock
from metadata_log.delta import MetadataDelta
from metadata_log.image import BrokerRegistration, MetadataImage

# How long a fenced broker is still named in Metadata answers after it was fenced.
FENCED_LISTED_MS = 60_000


class RecentlyFencedBrokers:
    """A metadata publisher that remembers when each broker was fenced."""

    def __init__(self, window_ms: int = FENCED_LISTED_MS, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.window_ms = window_ms
        self._clock = clock
        self._fenced_at: dict[int, int] = {}  # broker id -> when we saw it fenced

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: LoaderManifest
    ) -> None:
        self.observe(manifest.previous, image, self._clock.monotonic_ms())

    def observe(self, previous: MetadataImage, image: MetadataImage, now_ms: int) -> None:
        """Note the brokers `image` has fenced that `previous` had unfenced; forget the
        ones unfenced again or unregistered. A broker fenced in the first image we see
        (after a snapshot, or at start) was not seen unfenced: not noted."""
        for broker_id, reg in image.brokers.items():
            if not reg.fenced:
                self._fenced_at.pop(broker_id, None)
                continue
            before = previous.brokers.get(broker_id)
            if broker_id not in self._fenced_at and before is not None and not before.fenced:
                self._fenced_at[broker_id] = now_ms
        for broker_id in [b for b in self._fenced_at if b not in image.brokers]:
            del self._fenced_at[broker_id]

    def named(self, image: MetadataImage, now_ms: int | None = None) -> list[BrokerRegistration]:
        """The registrations a Metadata answer names, in broker id order: the unfenced,
        those fenced within the window, or every registered one when none is unfenced."""
        now = self._clock.monotonic_ms() if now_ms is None else now_ms
        regs = [b for _, b in sorted(image.brokers.items())]
        if all(b.fenced for b in regs):
            return regs

        def recent(broker_id: int) -> bool:
            fenced_at = self._fenced_at.get(broker_id)
            return fenced_at is not None and now - fenced_at < self.window_ms

        return [b for b in regs if not b.fenced or recent(b.broker_id)]
