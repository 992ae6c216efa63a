"""The metadata log's pure parts: records codec, delta and local changes, snapshots, and
the replicated state machine's fencing, dedupe and compare-and-set rules."""

from __future__ import annotations

import pickle

import pytest

from kraft.state_machine import AppendStatus, MetadataStateMachine
from metadata_log.delta import MetadataDelta, MetadataReplayError, replay
from metadata_log.image import MetadataImage
from metadata_log.records import (
    ControllerEpochRecord,
    Endpoint,
    FenceBrokerRecord,
    NoOpRecord,
    PartitionChangeRecord,
    PartitionRecord,
    ProducerIdsRecord,
    RecordDecodeError,
    RegisterBrokerRecord,
    RemoveTopicRecord,
    TopicRecord,
    decode,
    decode_batch,
    encode,
    encode_batch,
    from_json,
    to_json,
)
from metadata_log.snapshot import SnapshotError, decode_snapshot, encode_snapshot

EP = (Endpoint("PLAINTEXT", "127.0.0.1", 9092),)
TID = "00000000-0000-0000-0000-000000000001"


def base_records() -> list:
    return [
        ControllerEpochRecord(1, 0),
        RegisterBrokerRecord(1, "i1", 1, EP, "r1", fenced=False),
        RegisterBrokerRecord(2, "i2", 2, EP, None, fenced=False),
        TopicRecord("t", TID),
        PartitionRecord(TID, 0, (1, 2), (1, 2), 1),
        PartitionRecord(TID, 1, (2, 1), (2, 1), 2),
    ]


def test_records_round_trip_in_msgpack_and_json() -> None:
    recs = base_records()
    assert decode_batch(encode_batch(recs)) == recs
    assert from_json(to_json(recs)) == recs
    assert all(decode(encode(r)) == r for r in recs)


@pytest.mark.parametrize(
    "junk", [b"", b"\xc1", encode_batch([NoOpRecord()])[:-1], b'{"type": "topic"}']
)
def test_bad_record_bytes_raise_a_clear_error(junk: bytes) -> None:
    with pytest.raises(RecordDecodeError):
        decode(junk)


def test_unknown_fields_and_tags_are_refused() -> None:
    with pytest.raises(RecordDecodeError):
        from_json(b'[{"type": "topic", "name": "t", "topic_id": "x", "extra": 1}]')
    with pytest.raises(RecordDecodeError):
        from_json(b'[{"type": "no_such_record"}]')


def test_local_changes_say_what_a_broker_leads_follows_and_deletes() -> None:
    image = replay(MetadataImage(), enumerate(base_records()))
    delta = MetadataDelta(image)
    delta.replay(PartitionChangeRecord(TID, 0, (2,), 2, 1, 1), 10)
    changes = delta.local_changes(2)
    assert set(changes.leaders) == {("t", 0)} and not changes.followers
    assert set(delta.local_changes(1).followers) == {("t", 0)}
    delta.replay(RemoveTopicRecord(TID), 11)
    assert delta.local_changes(1).deletes == {("t", 0), ("t", 1)}
    assert "t" not in delta.apply().topic_ids


def test_replay_refuses_records_that_do_not_apply() -> None:
    image = replay(MetadataImage(), enumerate(base_records()))
    for bad in (
        TopicRecord("t", "other-id"),  # name taken
        PartitionChangeRecord("nope", 0, (1,), 1, 1, 1),
        FenceBrokerRecord(1, 999),  # wrong broker epoch
        ControllerEpochRecord(0, 0),  # epochs never go back
    ):
        with pytest.raises(MetadataReplayError):
            replay(image, [(100, bad)])
    with pytest.raises(MetadataReplayError):
        replay(image, [(image.offset, NoOpRecord())])  # offsets only grow


def test_snapshot_round_trip_and_corruption() -> None:
    image = replay(MetadataImage(), enumerate(base_records()))
    data = encode_snapshot(image)
    assert decode_snapshot(data) == image
    assert pickle.loads(pickle.dumps(image)) == image
    for broken in (
        data[:-1],
        data[:4],
        b"X" + data[1:],
        data[:20] + bytes([data[20] ^ 1]) + data[21:],
    ):
        with pytest.raises(SnapshotError):
            decode_snapshot(broken)


# -- the replicated state machine -----------------------------------------------------------


def started(records: list | None = None) -> MetadataStateMachine:
    sm = MetadataStateMachine()
    res = sm.append_batch(1, "w", 0, encode_batch(records or base_records()))
    assert res.status == AppendStatus.OK
    return sm


def test_offsets_are_dense_and_broker_epochs_are_registration_offsets() -> None:
    sm = started()
    assert sm.next_offset == 6
    res = sm.append_batch(1, "w", 1, encode_batch([RegisterBrokerRecord(3, "i3", -1, EP)]))
    assert (res.first_offset, res.last_offset) == (6, 6)
    assert sm.image.brokers[3].broker_epoch == 6


def test_a_retried_write_is_applied_once() -> None:
    sm = started()
    batch = encode_batch([NoOpRecord(), NoOpRecord()])
    first = sm.append_batch(1, "writer-a", 7, batch)
    again = sm.append_batch(1, "writer-a", 7, batch)
    assert first == again and sm.next_offset == 8
    other = sm.append_batch(1, "writer-b", 7, batch)  # another writer's seq 7 is new
    assert other.first_offset == 8 and sm.next_offset == 10


def test_a_stale_controller_epoch_is_refused() -> None:
    sm = started()
    sm.append_batch(3, "w2", 0, encode_batch([ControllerEpochRecord(3, 2)]))
    assert sm.image.controller_epoch == 3
    res = sm.append_batch(1, "w", 5, encode_batch([NoOpRecord()]))
    assert res.status == AppendStatus.STALE_CONTROLLER_EPOCH
    # A newer epoch without its barrier is refused too: only a committed barrier counts.
    res = sm.append_batch(4, "w", 6, encode_batch([NoOpRecord()]))
    assert res.status == AppendStatus.STALE_CONTROLLER_EPOCH
    assert sm.next_offset == 7


def test_partition_changes_are_compare_and_set_on_the_partition_epoch() -> None:
    sm = started()
    shrink = PartitionChangeRecord(TID, 0, (1,), 1, 0, 1)
    assert sm.append_batch(1, "a", 0, encode_batch([shrink])).status == AppendStatus.OK
    # A second decision taken on the same (old) image carries the same epoch: refused.
    expand = PartitionChangeRecord(TID, 0, (1, 2), 1, 0, 1)
    res = sm.append_batch(1, "b", 0, encode_batch([expand]))
    assert res.status == AppendStatus.INVALID and "partition epoch" in res.error
    assert sm.image.partition(TID, 0).isr == (1,)


def test_an_invalid_batch_changes_nothing() -> None:
    sm = started()
    before = (sm.image, sm.next_offset)
    batch = encode_batch([NoOpRecord(), TopicRecord("t", "dup")])  # second record fails
    assert sm.append_batch(1, "w", 9, batch).status == AppendStatus.INVALID
    assert (sm.image, sm.next_offset) == before
    assert sm.append_batch(1, "w", 10, b"\x00garbage").status == AppendStatus.INVALID


def test_producer_id_blocks_are_handed_out_once() -> None:
    sm = started()
    ok = sm.append_batch(1, "a", 1, encode_batch([ProducerIdsRecord(1, 1, 1000)]))
    dup = sm.append_batch(1, "b", 1, encode_batch([ProducerIdsRecord(2, 2, 1000)]))
    assert ok.status == AppendStatus.OK and dup.status == AppendStatus.INVALID


def test_the_tail_is_bounded_and_readers_are_sent_to_the_snapshot() -> None:
    sm = MetadataStateMachine(max_tail_records=4)
    sm.append_batch(1, "w", 0, encode_batch(base_records()))
    assert sm.tail_start == 2 and sm.records_from(1, 10) is None
    tail = sm.records_from(2, 10)
    assert [o for o, _ in tail] == [2, 3, 4, 5]
    image, next_offset = sm.snapshot()
    assert next_offset == 6 and image == sm.image
    restored = pickle.loads(pickle.dumps(sm))  # pysyncobj snapshots the state this way
    assert restored.image == sm.image and restored.records_from(2, 10) == tail
