"""MetadataImage: the immutable state of the cluster at one metadata offset.

Built only by `MetadataDelta`; never mutated (its dicts are replaced, not changed), so it
can be shared between threads and kept as a snapshot for free.
"""

from __future__ import annotations

import msgspec

from common.acl import AclBinding
from metadata_log.records import NO_LEADER, Endpoint


class BrokerRegistration(msgspec.Struct, frozen=True):
    broker_id: int
    incarnation_id: str
    broker_epoch: int
    listeners: tuple[Endpoint, ...]
    rack: str | None
    fenced: bool
    in_controlled_shutdown: bool = False

    def endpoint(self, listener: str | None = None) -> Endpoint | None:
        for ep in self.listeners:
            if listener is None or ep.name == listener:
                return ep
        return None


class PartitionRegistration(msgspec.Struct, frozen=True):
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    # An ongoing reassignment (KIP-455): replicas = target replicas + removing replicas.
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    elr: tuple[int, ...] = ()  # eligible leader replicas (KIP-966)
    last_known_elr: tuple[int, ...] = ()

    @property
    def is_offline(self) -> bool:
        return self.leader == NO_LEADER

    @property
    def is_reassigning(self) -> bool:
        return bool(self.removing_replicas or self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """Where the partition is going: the replicas without the ones being removed."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """Where it was before the reassignment: the replicas without the ones being added."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)


class ScramCredential(msgspec.Struct, frozen=True):
    """What a SCRAM login is checked against (the password is never stored)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # the salt and keys stay out of logs and tracebacks
        return f"ScramCredential(iterations={self.iterations})"


class TopicImage(msgspec.Struct, frozen=True):
    name: str
    topic_id: str
    partitions: dict[int, PartitionRegistration]


class MetadataImage(msgspec.Struct, frozen=True):
    offset: int = -1  # offset of the last record applied (-1: none)
    controller_epoch: int = -1
    controller_id: int = -1
    brokers: dict[int, BrokerRegistration] = msgspec.field(default_factory=dict)
    topics: dict[str, TopicImage] = msgspec.field(default_factory=dict)  # by topic id
    topic_ids: dict[str, str] = msgspec.field(default_factory=dict)  # name -> id
    # (resource type, resource name) -> {config name: value}
    configs: dict[tuple[int, str], dict[str, str]] = msgspec.field(default_factory=dict)
    next_producer_id: int = 0
    acls: dict[str, AclBinding] = msgspec.field(default_factory=dict)  # by ACL id
    # (user name, common.scram.ScramMechanism code) -> credential
    scram_credentials: dict[tuple[str, int], ScramCredential] = msgspec.field(default_factory=dict)

    def topic_by_name(self, name: str) -> TopicImage | None:
        topic_id = self.topic_ids.get(name)
        return self.topics.get(topic_id) if topic_id is not None else None

    def partition(self, topic_id: str, partition: int) -> PartitionRegistration | None:
        topic = self.topics.get(topic_id)
        return topic.partitions.get(partition) if topic else None

    def live_brokers(self) -> list[BrokerRegistration]:
        """Registered and unfenced, in broker id order."""
        return [b for _, b in sorted(self.brokers.items()) if not b.fenced]

    def is_usable(self, broker_id: int) -> bool:
        """May lead or join an ISR: registered, unfenced and not shutting down."""
        b = self.brokers.get(broker_id)
        return b is not None and not b.fenced and not b.in_controlled_shutdown

    def usable_broker_epoch(self, broker_id: int) -> int | None:
        """The broker epoch of a usable broker (KIP-903 checks a fetch against it)."""
        return self.brokers[broker_id].broker_epoch if self.is_usable(broker_id) else None

    def topic_config(self, name: str) -> dict[str, str]:
        return self.configs.get((2, name), {})

    def offline_partitions(self) -> int:
        return sum(1 for t in self.topics.values() for p in t.partitions.values() if p.is_offline)

    def under_replicated_partitions(self) -> int:
        """Partitions whose ISR is smaller than their replica set."""
        return sum(
            1
            for t in self.topics.values()
            for p in t.partitions.values()
            if len(p.isr) < len(p.replicas)
        )
