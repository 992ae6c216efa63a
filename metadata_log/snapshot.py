"""Snapshots: an image at an offset, as the records that rebuild it.

Like KRaft's snapshots (KIP-630) a snapshot is a list of records; replaying it onto an
empty image and then the log's tail gives the same image as replaying everything.
On disk: msgpack of {version, offset, records} behind a CRC32C, written atomically.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import msgspec
from crc32c import crc32c

from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage, PartitionRegistration, TopicImage
from metadata_log.records import (
    AccessControlEntryRecord,
    ConfigRecord,
    ControlledShutdownRecord,
    ControllerEpochRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RegisterBrokerRecord,
    TopicRecord,
    UserScramCredentialRecord,
)

SNAPSHOT_VERSION = 1
_MAGIC = b"KRSNAP01"


class SnapshotError(ValueError):
    pass


class Snapshot(msgspec.Struct, frozen=True):
    version: int
    offset: int
    records: list[Record]


def snapshot_records(image: MetadataImage) -> list[Record]:
    """Records that rebuild `image` from an empty one (offsets aside)."""
    out: list[Record] = []
    if image.controller_epoch >= 0:
        out.append(ControllerEpochRecord(image.controller_epoch, image.controller_id))
    for broker_id, b in sorted(image.brokers.items()):
        out.append(
            RegisterBrokerRecord(
                broker_id, b.incarnation_id, b.broker_epoch, b.listeners, b.rack, b.fenced
            )
        )
        if b.in_controlled_shutdown:
            out.append(ControlledShutdownRecord(broker_id, b.broker_epoch))
    for topic_id, topic in sorted(image.topics.items(), key=lambda kv: kv[1].name):
        out.append(TopicRecord(topic.name, topic_id))
        for p, reg in sorted(topic.partitions.items()):
            out.append(
                PartitionRecord(
                    topic_id,
                    p,
                    reg.replicas,
                    reg.isr,
                    reg.leader,
                    reg.leader_epoch,
                    reg.partition_epoch,
                    reg.removing_replicas,
                    reg.adding_replicas,
                    reg.elr,
                    reg.last_known_elr,
                )
            )
    for (rtype, rname), values in sorted(image.configs.items()):
        for name, value in sorted(values.items()):
            out.append(ConfigRecord(rtype, rname, name, value))
    if image.next_producer_id:
        out.append(ProducerIdsRecord(-1, -1, image.next_producer_id))
    for acl_id, acl in sorted(image.acls.items()):
        out.append(AccessControlEntryRecord(acl_id, acl))
    for (name, mechanism), cred in sorted(image.scram_credentials.items()):
        out.append(
            UserScramCredentialRecord(
                name, mechanism, cred.salt, cred.stored_key, cred.server_key, cred.iterations
            )
        )
    return out


def image_from_snapshot(
    offset: int, records: list[Record], *, consume: bool = False
) -> MetadataImage:
    """Replay snapshot records; the image lands at the snapshot's offset.

    Topics and partitions (nearly all of a big snapshot) are built straight into the
    image's dicts rather than replayed through a MetadataDelta (whose per-record
    copy-on-write costs 3x the decode); identical replica and ISR tuples are shared
    (a few hundred distinct ones among 1,000,000 partitions). The rest is replayed
    as records. `consume`: the caller hands `records` over, and each entry is dropped
    once applied, so the decoded records and the image are not both whole in memory."""
    delta = MetadataDelta(MetadataImage())
    topics: dict[str, TopicImage] = {}
    topic_ids: dict[str, str] = {}
    shared: dict[tuple[int, ...], tuple[int, ...]] = {}
    position = 0
    for i, record in enumerate(records):
        kind = type(record)
        if kind is PartitionRecord:
            topic = topics.get(record.topic_id)
            if topic is None:
                raise SnapshotError(f"partition of unknown topic {record.topic_id}")
            r = record
            topic.partitions[r.partition] = PartitionRegistration(
                shared.setdefault(r.replicas, r.replicas),
                shared.setdefault(r.isr, r.isr),
                r.leader,
                r.leader_epoch,
                r.partition_epoch,
                shared.setdefault(r.removing_replicas, r.removing_replicas),
                shared.setdefault(r.adding_replicas, r.adding_replicas),
                shared.setdefault(r.elr, r.elr),
                shared.setdefault(r.last_known_elr, r.last_known_elr),
            )
        elif kind is TopicRecord:
            if record.topic_id in topics or record.name in topic_ids:
                raise SnapshotError(f"topic {record.name} ({record.topic_id}) appears twice")
            topics[record.topic_id] = TopicImage(record.name, record.topic_id, {})
            topic_ids[record.name] = record.topic_id
        else:
            delta.replay(record, position)  # positions only order the replay
            position += 1
        if consume:
            records[i] = None  # type: ignore[call-overload]
    image = delta.apply()
    return msgspec.structs.replace(image, offset=offset, topics=topics, topic_ids=topic_ids)


def encode_snapshot(image: MetadataImage) -> bytes:
    body = msgspec.msgpack.encode(Snapshot(SNAPSHOT_VERSION, image.offset, snapshot_records(image)))
    return _MAGIC + struct.pack(">I", crc32c(body)) + body


def decode_snapshot(data: bytes) -> MetadataImage:
    if len(data) < len(_MAGIC) + 4 or not data.startswith(_MAGIC):
        raise SnapshotError("not a metadata snapshot (bad magic)")
    (crc,) = struct.unpack_from(">I", data, len(_MAGIC))
    body = data[len(_MAGIC) + 4 :]
    if crc32c(body) != crc:
        raise SnapshotError("metadata snapshot is corrupt (CRC mismatch)")
    try:
        snap = msgspec.msgpack.decode(body, type=Snapshot)
    except msgspec.DecodeError as exc:
        raise SnapshotError(f"metadata snapshot is malformed: {exc}") from exc
    if snap.version != SNAPSHOT_VERSION:
        raise SnapshotError(f"unsupported snapshot version {snap.version}")
    return image_from_snapshot(snap.offset, snap.records, consume=True)


def write_snapshot(path: Path, image: MetadataImage) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(encode_snapshot(image))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_snapshot(path: Path) -> MetadataImage:
    return decode_snapshot(path.read_bytes())
