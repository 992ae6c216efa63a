"""Typed, versioned metadata records and their codec (msgspec, msgpack on the wire).

The cluster's shared language: the controllers replicate these records, brokers replay
them. Names follow KRaft's metadata records (KIP-631). Each record is a tagged struct
(`type` names it); unknown fields are refused, so a codec mismatch is loud. Bumping a
record's schema means a new tag or new optional fields with defaults.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from common.acl import AclBinding

NO_LEADER = -1

# ConfigResource types, as in Kafka's protocol.
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4


class _Record(msgspec.Struct, frozen=True, tag_field="type", forbid_unknown_fields=True):
    pass


class Endpoint(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str  # listener name, e.g. PLAINTEXT
    host: str
    port: Annotated[int, msgspec.Meta(ge=0, le=65535)]
    security_protocol: str = "PLAINTEXT"


class RegisterBrokerRecord(_Record, tag="register_broker"):
    broker_id: int
    incarnation_id: str
    broker_epoch: int  # the metadata offset of this record: unique per registration
    listeners: tuple[Endpoint, ...]
    rack: str | None = None
    fenced: bool = True


class UnregisterBrokerRecord(_Record, tag="unregister_broker"):
    broker_id: int
    broker_epoch: int


class FenceBrokerRecord(_Record, tag="fence_broker"):
    broker_id: int
    broker_epoch: int


class UnfenceBrokerRecord(_Record, tag="unfence_broker"):
    broker_id: int
    broker_epoch: int


class ControlledShutdownRecord(_Record, tag="controlled_shutdown"):
    """The broker asked to shut down: no new leaderships, none in ISRs (KIP-841)."""

    broker_id: int
    broker_epoch: int


class TopicRecord(_Record, tag="topic"):
    name: str
    topic_id: str  # UUID, canonical text form


class PartitionRecord(_Record, tag="partition"):
    topic_id: str
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    # An ongoing reassignment (KIP-455): replicas being added and removed. `replicas` is
    # then the target replicas followed by the removing ones.
    removing_replicas: tuple[int, ...] = ()
    adding_replicas: tuple[int, ...] = ()
    # KIP-966: replicas that left the ISR while it was below min.insync.replicas and hold
    # every record below the HW (eligible leader replicas), and the ones that left the
    # ELR by an unclean shutdown or the ISR with nobody eligible (last known ELR).
    # Absent in logs and snapshots written before them: empty.
    elr: tuple[int, ...] = ()
    last_known_elr: tuple[int, ...] = ()


class PartitionChangeRecord(_Record, tag="partition_change"):
    """New full state of a partition's leadership. Carries the resulting epochs so
    replay needs no rules: a leader change bumps leader_epoch, any change bumps
    partition_epoch (the controller computes both)."""

    topic_id: str
    partition: int
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: tuple[int, ...] | None = None  # None: unchanged
    removing_replicas: tuple[int, ...] | None = None  # None: unchanged (KIP-455)
    adding_replicas: tuple[int, ...] | None = None  # None: unchanged
    elr: tuple[int, ...] | None = None  # None: unchanged (KIP-966)
    last_known_elr: tuple[int, ...] | None = None  # None: unchanged


class RemoveTopicRecord(_Record, tag="remove_topic"):
    topic_id: str


class ConfigRecord(_Record, tag="config"):
    resource_type: int  # TOPIC_RESOURCE, BROKER_RESOURCE or 32 (group)
    resource_name: str  # topic or group name, or broker id as text ("" = cluster default)
    name: str
    value: str | None  # None deletes the override


class ProducerIdsRecord(_Record, tag="producer_ids"):
    """A block of producer ids handed to a broker: the next free id is `next_producer_id`."""

    broker_id: int
    broker_epoch: int
    next_producer_id: int


class AccessControlEntryRecord(_Record, tag="access_control_entry"):
    """An ACL binding was created; `id` (a UUID) names it for its removal."""

    id: str
    acl: AclBinding


class RemoveAccessControlEntryRecord(_Record, tag="remove_access_control_entry"):
    id: str


class UserScramCredentialRecord(_Record, tag="user_scram_credential"):
    """A user's SCRAM credential for one mechanism (common.scram.ScramMechanism code):
    the salt and the derived keys, never the password (KIP-554). Replaces any earlier
    credential of the same user and mechanism."""

    name: str
    mechanism: int
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:  # the salt and keys stay out of logs and tracebacks
        return (
            f"UserScramCredentialRecord(name={self.name!r}, mechanism={self.mechanism}, "
            f"iterations={self.iterations})"
        )


class RemoveUserScramCredentialRecord(_Record, tag="remove_user_scram_credential"):
    name: str
    mechanism: int


class ControllerEpochRecord(_Record, tag="controller_epoch"):
    """The barrier a new active controller commits before acting (its Raft term)."""

    controller_epoch: int
    controller_id: int


class NoOpRecord(_Record, tag="no_op"):
    """Written periodically so brokers can tell a live log from a stale one."""


Record = (
    RegisterBrokerRecord
    | UnregisterBrokerRecord
    | FenceBrokerRecord
    | UnfenceBrokerRecord
    | ControlledShutdownRecord
    | TopicRecord
    | PartitionRecord
    | PartitionChangeRecord
    | RemoveTopicRecord
    | ConfigRecord
    | ProducerIdsRecord
    | AccessControlEntryRecord
    | RemoveAccessControlEntryRecord
    | UserScramCredentialRecord
    | RemoveUserScramCredentialRecord
    | ControllerEpochRecord
    | NoOpRecord
)

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Record)
_list_decoder = msgspec.msgpack.Decoder(list[Record])
_json_encoder = msgspec.json.Encoder()
_json_decoder = msgspec.json.Decoder(list[Record])


class RecordDecodeError(ValueError):
    pass


def encode(record: Record) -> bytes:
    return _encoder.encode(record)


def decode(data: bytes) -> Record:
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(f"bad metadata record: {exc}") from exc


def encode_batch(records: list[Record]) -> bytes:
    return _encoder.encode(records)


def decode_batch(data: bytes) -> list[Record]:
    try:
        return _list_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(f"bad metadata record batch: {exc}") from exc


def to_json(records: list[Record]) -> bytes:
    return _json_encoder.encode(records)


def from_json(data: bytes) -> list[Record]:
    try:
        return _json_decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise RecordDecodeError(f"bad metadata records: {exc}") from exc
