"""Partitions by broker, for the active controller. Sans-I/O.

Fencing, unfencing, controlled shutdown and the tick used to walk every partition of the
image to find the few a broker's change touches. This index answers "which partitions
does broker b host / lead", "which partitions are offline" and "which are being
reassigned" in time proportional to the answer.

It is derived from the image, not stored in it (nothing changes in snapshots or on the
brokers). Images are immutable and a change copies only the topics it touches
(metadata_log/delta.py), so `refresh(image)` compares the image's topics with the ones it
indexed last BY IDENTITY: an untouched topic costs one pointer comparison, a touched one
a pass over its partitions' registrations (again by identity), and only the partitions
that changed are re-indexed. Any image may be given, in any order (the committed one, a
projection of pending decisions, a snapshot just loaded): the index always describes the
last image refreshed.
"""

from __future__ import annotations

from metadata_log.image import MetadataImage, PartitionRegistration, TopicImage
from metadata_log.records import NO_LEADER

TopicPartition = tuple[str, int]  # (topic id, partition)
_EMPTY: frozenset[TopicPartition] = frozenset()


class PartitionIndex:
    def __init__(self) -> None:
        self._topics: dict[str, TopicImage] = {}  # what is indexed: topic id -> topic
        self._source: object = None  # the topics dict last refreshed from (identity)
        self._replicas: dict[int, set[TopicPartition]] = {}
        self._leaders: dict[int, set[TopicPartition]] = {}
        self.offline: set[TopicPartition] = set()
        self.reassigning: set[TopicPartition] = set()

    # -- queries (after `refresh`) -------------------------------------------------------------

    def hosted_by(self, broker_id: int) -> set[TopicPartition] | frozenset[TopicPartition]:
        """Partitions with `broker_id` among their replicas (so every ISR and leader
        place it holds)."""
        return self._replicas.get(broker_id, _EMPTY)

    def led_by(self, broker_id: int) -> set[TopicPartition] | frozenset[TopicPartition]:
        return self._leaders.get(broker_id, _EMPTY)

    def of(self, image: MetadataImage) -> PartitionIndex:
        """The index of `image` (refreshed if needed): `index.of(image).hosted_by(b)`."""
        self.refresh(image)
        return self

    # -- maintenance ---------------------------------------------------------------------------

    def refresh(self, image: MetadataImage) -> None:
        topics = image.topics
        if topics is self._source:
            return
        old = self._topics
        for topic_id, topic in old.items():
            if topics.get(topic_id) is not topic:
                self._replace(topic_id, topic, topics.get(topic_id))
        for topic_id, topic in topics.items():
            if topic_id not in old:
                self._replace(topic_id, None, topic)
        # A copy: the next image's dict may be the same object grown in place.
        self._topics = dict(topics)
        self._source = topics

    def _replace(self, topic_id: str, before: TopicImage | None, after: TopicImage | None) -> None:
        was = before.partitions if before is not None else {}
        now = after.partitions if after is not None else {}
        for p, reg in was.items():
            if now.get(p) is not reg:
                self._remove((topic_id, p), reg)
        for p, reg in now.items():
            if was.get(p) is not reg:
                self._add((topic_id, p), reg)

    def _add(self, tp: TopicPartition, reg: PartitionRegistration) -> None:
        for r in reg.replicas:
            self._replicas.setdefault(r, set()).add(tp)
        if reg.leader == NO_LEADER:
            self.offline.add(tp)
        else:
            self._leaders.setdefault(reg.leader, set()).add(tp)
        if reg.is_reassigning:
            self.reassigning.add(tp)

    def _remove(self, tp: TopicPartition, reg: PartitionRegistration) -> None:
        for r in reg.replicas:
            _discard(self._replicas, r, tp)
        if reg.leader == NO_LEADER:
            self.offline.discard(tp)
        else:
            _discard(self._leaders, reg.leader, tp)
        self.reassigning.discard(tp)


def _discard(by_broker: dict[int, set[TopicPartition]], broker: int, tp: TopicPartition) -> None:
    members = by_broker.get(broker)
    if members is not None:
        members.discard(tp)
        if not members:
            del by_broker[broker]
