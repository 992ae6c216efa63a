"""MetadataDelta: replay records onto an image, produce the next image, and say what
changed (for a broker: which partitions it now leads, follows, or must delete)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from common.acl import AclBinding
from metadata_log.image import (
    BrokerRegistration,
    MetadataImage,
    PartitionRegistration,
    ScramCredential,
    TopicImage,
)
from metadata_log.records import (
    AccessControlEntryRecord,
    ConfigRecord,
    ControlledShutdownRecord,
    ControllerEpochRecord,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    RemoveAccessControlEntryRecord,
    RemoveTopicRecord,
    RemoveUserScramCredentialRecord,
    TopicRecord,
    UnfenceBrokerRecord,
    UnregisterBrokerRecord,
    UserScramCredentialRecord,
)


class MetadataReplayError(ValueError):
    """A record that cannot apply to the image (a bug or a corrupt log): never skipped."""


@dataclass(frozen=True)
class LocalReplicaChanges:
    """What one broker must do after a delta, keyed by (topic name, partition)."""

    leaders: dict[tuple[str, int], tuple[str, PartitionRegistration]] = field(default_factory=dict)
    followers: dict[tuple[str, int], tuple[str, PartitionRegistration]] = field(
        default_factory=dict
    )
    deletes: set[tuple[str, int]] = field(default_factory=set)


class MetadataDelta:
    def __init__(self, image: MetadataImage) -> None:
        self.base = image
        self._offset = image.offset
        self._controller_epoch = image.controller_epoch
        self._controller_id = image.controller_id
        self._brokers: dict[int, BrokerRegistration] | None = None
        self._topics: dict[str, TopicImage] | None = None
        self._topic_ids: dict[str, str] | None = None
        self._configs: dict[tuple[int, str], dict[str, str]] | None = None
        self._next_producer_id = image.next_producer_id
        self._acls: dict[str, AclBinding] | None = None
        self._scram: dict[tuple[str, int], ScramCredential] | None = None
        # Topics whose partitions dict this delta already copied since the last apply():
        # a batch of 1,000 changes to one topic copies its partitions once, not 1,000 times.
        self._owned: set[str] = set()
        # what changed
        self.changed_partitions: dict[str, set[int]] = {}
        self.created_topics: set[str] = set()
        self.deleted_topics: dict[str, TopicImage] = {}
        self.changed_brokers: set[int] = set()
        self.acls_changed = False  # an ACL was added or removed (the authorizer reloads)
        self.scram_changed = False

    # copy-on-write views of the base image
    def _b(self) -> dict[int, BrokerRegistration]:
        if self._brokers is None:
            self._brokers = dict(self.base.brokers)
        return self._brokers

    def _t(self) -> dict[str, TopicImage]:
        if self._topics is None:
            self._topics = dict(self.base.topics)
            self._topic_ids = dict(self.base.topic_ids)
        return self._topics

    def _c(self) -> dict[tuple[int, str], dict[str, str]]:
        if self._configs is None:
            self._configs = dict(self.base.configs)
        return self._configs

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        """The partition as replayed so far (None: no such partition)."""
        topics = self.base.topics if self._topics is None else self._topics
        topic = topics.get(topic_id)
        return topic.partitions.get(partition) if topic else None

    @property
    def next_producer_id(self) -> int:
        return self._next_producer_id

    def replay_all(self, records: Iterable[tuple[int, Record]]) -> None:
        for offset, record in records:
            self.replay(record, offset)

    def replay(self, record: Record, offset: int) -> None:
        if offset <= self._offset:
            raise MetadataReplayError(f"offset {offset} is not after {self._offset}")
        self._replay(record)
        self._offset = offset

    def _broker(self, broker_id: int, epoch: int) -> BrokerRegistration:
        b = self._b().get(broker_id)
        if b is None or b.broker_epoch != epoch:
            raise MetadataReplayError(f"no broker {broker_id} with epoch {epoch}")
        return b

    def _replay(self, r: Record) -> None:  # noqa: C901 - one branch per record type
        if isinstance(r, RegisterBrokerRecord):
            self._b()[r.broker_id] = BrokerRegistration(
                r.broker_id, r.incarnation_id, r.broker_epoch, r.listeners, r.rack, r.fenced
            )
            self.changed_brokers.add(r.broker_id)
        elif isinstance(r, UnregisterBrokerRecord):
            self._broker(r.broker_id, r.broker_epoch)
            del self._b()[r.broker_id]
            self.changed_brokers.add(r.broker_id)
        elif isinstance(r, FenceBrokerRecord | UnfenceBrokerRecord):
            b = self._broker(r.broker_id, r.broker_epoch)
            fenced = isinstance(r, FenceBrokerRecord)
            self._b()[r.broker_id] = msgspec.structs.replace(
                b, fenced=fenced, in_controlled_shutdown=b.in_controlled_shutdown and fenced
            )
            self.changed_brokers.add(r.broker_id)
        elif isinstance(r, ControlledShutdownRecord):
            b = self._broker(r.broker_id, r.broker_epoch)
            self._b()[r.broker_id] = msgspec.structs.replace(b, in_controlled_shutdown=True)
            self.changed_brokers.add(r.broker_id)
        elif isinstance(r, TopicRecord):
            topics = self._t()
            assert self._topic_ids is not None
            if r.topic_id in topics or r.name in self._topic_ids:
                raise MetadataReplayError(f"topic {r.name} ({r.topic_id}) exists")
            topics[r.topic_id] = TopicImage(r.name, r.topic_id, {})
            self._owned.add(r.topic_id)
            self._topic_ids[r.name] = r.topic_id
            self.created_topics.add(r.topic_id)
        elif isinstance(r, PartitionRecord):
            self._set_partition(
                r.topic_id,
                r.partition,
                PartitionRegistration(
                    r.replicas,
                    r.isr,
                    r.leader,
                    r.leader_epoch,
                    r.partition_epoch,
                    r.removing_replicas,
                    r.adding_replicas,
                    r.elr,
                    r.last_known_elr,
                ),
            )
        elif isinstance(r, PartitionChangeRecord):
            old = self._partition(r.topic_id, r.partition)
            self._set_partition(
                r.topic_id,
                r.partition,
                PartitionRegistration(
                    old.replicas if r.replicas is None else r.replicas,
                    r.isr,
                    r.leader,
                    r.leader_epoch,
                    r.partition_epoch,
                    old.removing_replicas if r.removing_replicas is None else r.removing_replicas,
                    old.adding_replicas if r.adding_replicas is None else r.adding_replicas,
                    old.elr if r.elr is None else r.elr,
                    old.last_known_elr if r.last_known_elr is None else r.last_known_elr,
                ),
            )
        elif isinstance(r, RemoveTopicRecord):
            topics = self._t()
            topic = topics.pop(r.topic_id, None)
            if topic is None:
                raise MetadataReplayError(f"no topic {r.topic_id} to remove")
            assert self._topic_ids is not None
            del self._topic_ids[topic.name]
            self._c().pop((2, topic.name), None)
            self.deleted_topics[r.topic_id] = self.base.topics.get(r.topic_id, topic)
            self.created_topics.discard(r.topic_id)
            self.changed_partitions.pop(r.topic_id, None)
        elif isinstance(r, ConfigRecord):
            configs = self._c()
            key = (r.resource_type, r.resource_name)
            current = dict(configs.get(key, {}))
            if r.value is None:
                current.pop(r.name, None)
            else:
                current[r.name] = r.value
            if current:
                configs[key] = current
            else:
                configs.pop(key, None)
        elif isinstance(r, ProducerIdsRecord):
            self._next_producer_id = max(self._next_producer_id, r.next_producer_id)
        elif isinstance(r, AccessControlEntryRecord):
            if self._acls is None:
                self._acls = dict(self.base.acls)
            if r.id in self._acls:
                raise MetadataReplayError(f"ACL {r.id} exists")
            self._acls[r.id] = r.acl
            self.acls_changed = True
        elif isinstance(r, RemoveAccessControlEntryRecord):
            if self._acls is None:
                self._acls = dict(self.base.acls)
            if self._acls.pop(r.id, None) is None:
                raise MetadataReplayError(f"no ACL {r.id} to remove")
            self.acls_changed = True
        elif isinstance(r, UserScramCredentialRecord):
            if self._scram is None:
                self._scram = dict(self.base.scram_credentials)
            self._scram[(r.name, r.mechanism)] = ScramCredential(
                r.salt, r.stored_key, r.server_key, r.iterations
            )
            self.scram_changed = True
        elif isinstance(r, RemoveUserScramCredentialRecord):
            if self._scram is None:
                self._scram = dict(self.base.scram_credentials)
            if self._scram.pop((r.name, r.mechanism), None) is None:
                raise MetadataReplayError(f"no SCRAM credential {r.mechanism} for {r.name}")
            self.scram_changed = True
        elif isinstance(r, ControllerEpochRecord):
            if r.controller_epoch < self._controller_epoch:
                raise MetadataReplayError(
                    f"controller epoch {r.controller_epoch} < {self._controller_epoch}"
                )
            self._controller_epoch = r.controller_epoch
            self._controller_id = r.controller_id
        elif isinstance(r, NoOpRecord):
            pass
        else:  # pragma: no cover - the decoder only yields known types
            raise MetadataReplayError(f"unknown record {r!r}")

    def _partition(self, topic_id: str, partition: int) -> PartitionRegistration:
        topic = self._t().get(topic_id)
        if topic is None or partition not in topic.partitions:
            raise MetadataReplayError(f"no partition {topic_id}/{partition}")
        return topic.partitions[partition]

    def _set_partition(self, topic_id: str, partition: int, reg: PartitionRegistration) -> None:
        topics = self._t()
        topic = topics.get(topic_id)
        if topic is None:
            raise MetadataReplayError(f"partition {partition} of unknown topic {topic_id}")
        if topic_id in self._owned:
            topic.partitions[partition] = reg  # our own copy, not yet in any image
        else:
            partitions = dict(topic.partitions)
            partitions[partition] = reg
            topics[topic_id] = TopicImage(topic.name, topic.topic_id, partitions)
            self._owned.add(topic_id)
        self.changed_partitions.setdefault(topic_id, set()).add(partition)

    def apply(self) -> MetadataImage:
        """The image after every record replayed so far."""
        self._owned.clear()  # the image shares the dicts now: copy again before changing
        b = self.base
        return MetadataImage(
            offset=self._offset,
            controller_epoch=self._controller_epoch,
            controller_id=self._controller_id,
            brokers=b.brokers if self._brokers is None else self._brokers,
            topics=b.topics if self._topics is None else self._topics,
            topic_ids=b.topic_ids if self._topic_ids is None else self._topic_ids,
            configs=b.configs if self._configs is None else self._configs,
            next_producer_id=self._next_producer_id,
            acls=b.acls if self._acls is None else self._acls,
            scram_credentials=b.scram_credentials if self._scram is None else self._scram,
        )

    def local_changes(self, broker_id: int) -> LocalReplicaChanges:
        """Partitions `broker_id` now leads or follows, and replicas it must delete."""
        out = LocalReplicaChanges()
        image = self.apply()
        for topic in self.deleted_topics.values():
            for p, reg in topic.partitions.items():
                if broker_id in reg.replicas:
                    out.deletes.add((topic.name, p))
        for topic_id, parts in self.changed_partitions.items():
            topic = image.topics.get(topic_id)
            if topic is None:
                continue
            for p in parts:
                reg = topic.partitions[p]
                key = (topic.name, p)
                if broker_id not in reg.replicas:
                    old = self.base.partition(topic_id, p)
                    if old is not None and broker_id in old.replicas:
                        out.deletes.add(key)  # reassigned away
                elif reg.leader == broker_id:
                    out.leaders[key] = (topic_id, reg)
                else:
                    out.followers[key] = (topic_id, reg)
        return out


def replay(image: MetadataImage, records: Iterable[tuple[int, Record]]) -> MetadataImage:
    delta = MetadataDelta(image)
    delta.replay_all(records)
    return delta.apply()
