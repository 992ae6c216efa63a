"""The snapshot decoder builds topics and partitions straight into the image (not through
a MetadataDelta): it must give exactly the image a replay of the same records gives,
reassignments, configs and ACL-free extras included, and refuse what a replay refuses."""

from __future__ import annotations

import msgspec
import pytest

from metadata_log.delta import replay
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ConfigRecord,
    ControllerEpochRecord,
    Endpoint,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RegisterBrokerRecord,
    TopicRecord,
    UnfenceBrokerRecord,
)
from metadata_log.snapshot import (
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    image_from_snapshot,
    snapshot_records,
)

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)


def _image() -> MetadataImage:
    records = [ControllerEpochRecord(2, 3000)]
    for b in (1, 2, 3, 4):
        records += [RegisterBrokerRecord(b, f"i{b}", b, EP), UnfenceBrokerRecord(b, b)]
    for t in range(3):
        records.append(TopicRecord(f"t{t}", f"id-{t}"))
        for p in range(5):
            replicas = (1 + p % 4, 1 + (p + 1) % 4, 1 + (p + 2) % 4)
            records.append(PartitionRecord(f"id-{t}", p, replicas, replicas[:2], replicas[0], p))
    # A reassignment in flight, a config, producer ids.
    records.append(
        PartitionChangeRecord(
            "id-1", 2, (3, 4), 3, 7, 8, replicas=(3, 4, 1), removing_replicas=(1,),
            adding_replicas=(4,),
        )
    )  # fmt: skip
    records += [ConfigRecord(2, "t0", "retention.ms", "1000"), ProducerIdsRecord(1, 1, 5000)]
    image = replay(MetadataImage(), enumerate(records))
    # Registrations and epochs as the controller made them; offsets as a log would have.
    return msgspec.structs.replace(image, offset=41)


def test_decoded_image_equals_the_replayed_one() -> None:
    image = _image()
    decoded = decode_snapshot(encode_snapshot(image))
    assert decoded == image
    reg = decoded.partition("id-1", 2)
    assert reg is not None and reg.removing_replicas == (1,) and reg.adding_replicas == (4,)
    # The direct path agrees with a replay of the same records through a delta.
    assert decoded == msgspec.structs.replace(
        replay(MetadataImage(), enumerate(snapshot_records(image))), offset=41
    )


def test_identical_tuples_are_shared() -> None:
    decoded = decode_snapshot(encode_snapshot(_image()))
    regs = [r for t in decoded.topics.values() for r in t.partitions.values()]
    same = [r for r in regs if r.replicas == regs[0].replicas]
    assert len(same) > 1 and all(r.replicas is same[0].replicas for r in same)


def test_partition_of_an_unknown_topic_is_refused() -> None:
    with pytest.raises(SnapshotError, match="unknown topic"):
        image_from_snapshot(5, [PartitionRecord("nope", 0, (1,), (1,), 1)])
    with pytest.raises(SnapshotError, match="twice"):
        image_from_snapshot(5, [TopicRecord("a", "x"), TopicRecord("a", "y")])
