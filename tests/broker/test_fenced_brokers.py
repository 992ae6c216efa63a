"""Which fenced brokers a Metadata answer names (broker/fenced_brokers.py), on the sans-I/O
decision with explicit times; tests/cluster/test_fenced_brokers_named.py checks it
through real clients."""

from __future__ import annotations

from broker.fenced_brokers import RecentlyFencedBrokers
from metadata_log.image import BrokerRegistration, MetadataImage
from metadata_log.records import Endpoint

WINDOW = 60_000


def image(**fenced: bool) -> MetadataImage:
    """Brokers b4, b5, b6 ... with their fenced flags."""
    brokers = {
        int(name[1:]): BrokerRegistration(
            int(name[1:]), f"inc-{name}", 1, (Endpoint("PLAINTEXT", "h", 9092),), None, f
        )
        for name, f in fenced.items()
    }
    return MetadataImage(brokers=brokers)


def ids(regs: list[BrokerRegistration]) -> list[int]:
    return [b.broker_id for b in regs]


def test_a_broker_fenced_after_being_unfenced_is_named_for_the_window() -> None:
    f = RecentlyFencedBrokers(WINDOW)
    before, after = image(b4=False, b5=False, b6=False), image(b4=True, b5=False, b6=False)
    f.observe(before, after, now_ms=1_000)
    assert ids(f.named(after, 1_000)) == [4, 5, 6]
    assert ids(f.named(after, 1_000 + WINDOW - 1)) == [4, 5, 6]
    assert ids(f.named(after, 1_000 + WINDOW)) == [5, 6]  # gone for good: as Kafka


def test_later_images_keep_the_first_fencing_time_and_unfencing_forgets_it() -> None:
    f = RecentlyFencedBrokers(WINDOW)
    up, down = image(b4=False, b5=False), image(b4=True, b5=False)
    f.observe(up, down, now_ms=0)
    f.observe(down, down, now_ms=50_000)  # still fenced (a re-registration, say)
    assert ids(f.named(down, WINDOW)) == [5]
    f.observe(down, up, now_ms=WINDOW + 1)
    f.observe(up, down, now_ms=WINDOW + 2)  # fenced again: a new window
    assert ids(f.named(down, 2 * WINDOW)) == [4, 5]


def test_a_broker_never_seen_unfenced_is_not_named_unless_none_is_unfenced() -> None:
    f = RecentlyFencedBrokers(WINDOW)
    first = image(b4=True, b5=False)
    f.observe(MetadataImage(), first, now_ms=0)  # a snapshot or the broker's start
    assert ids(f.named(first, 0)) == [5]
    every = image(b4=True, b5=True)
    assert ids(f.named(every, 10 * WINDOW)) == [4, 5]  # none unfenced: all registered


def test_an_unregistered_broker_is_forgotten() -> None:
    f = RecentlyFencedBrokers(WINDOW)
    f.observe(image(b4=False, b5=False), image(b4=True, b5=False), now_ms=0)
    f.observe(image(b4=True, b5=False), image(b5=False), now_ms=1)
    f.observe(image(b5=False), image(b4=True, b5=False), now_ms=2)  # back, fenced
    assert ids(f.named(image(b4=True, b5=False), 3)) == [5]
