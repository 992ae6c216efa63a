"""storage.control_batch: the end-transaction marker batch, byte for byte as Kafka's
MemoryRecords.withEndTransactionMarker writes it, and its parsing."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c

from storage.control_batch import ABORT, COMMIT, build_marker_batch, marker_of
from storage.record_batch import CorruptRecordError, RecordBatchView, validate_batch
from storage.records import Record, build_batch

T0 = 1_700_000_000_000


def kafka_marker_bytes(
    pid: int, epoch: int, ctype: int, coord_epoch: int, leader_epoch: int
) -> bytes:
    """Kafka's layout written out by hand from DefaultRecordBatch / DefaultRecord."""
    record = (
        bytes([0x20])  # record length 16, zigzag varint
        + b"\x00"  # attributes
        + b"\x00"  # timestamp delta 0
        + b"\x00"  # offset delta 0
        + bytes([0x08])  # key length 4
        + struct.pack(">hh", 0, ctype)  # ControlRecordType key: version 0, type
        + bytes([0x0C])  # value length 6
        + struct.pack(">hi", 0, coord_epoch)  # EndTransactionMarker value: version 0, epoch
        + b"\x00"  # no headers
    )
    assert len(record) == 17  # Kafka's CURRENT_END_TXN_SCHEMA_RECORD_SIZE
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            0x30,  # transactional | control, CreateTime, no compression
            0,  # last offset delta
            T0,  # base timestamp
            T0,  # max timestamp
            pid,
            epoch,
            -1,  # base sequence: RecordBatch.NO_SEQUENCE
            1,  # one record
        )
        + record
    )
    head = struct.pack(">qiib", 0, 49 + len(record), leader_epoch, 2)
    return head + struct.pack(">I", crc32c(after_crc)) + after_crc


@pytest.mark.parametrize("ctype", [ABORT, COMMIT])
def test_marker_batch_is_byte_for_byte_kafkas(ctype: int) -> None:
    built = build_marker_batch(1234, 5, ctype, 7, leader_epoch=3, now_ms=T0)
    assert built == kafka_marker_bytes(1234, 5, ctype, 7, 3)
    assert len(built) == 78


def test_marker_positional_arguments_in_the_spec_order() -> None:
    assert build_marker_batch(9, 1, COMMIT, 2, -1, T0) == kafka_marker_bytes(9, 1, COMMIT, 2, -1)


def test_marker_of_reads_type_and_coordinator_epoch() -> None:
    view = validate_batch(build_marker_batch(1, 0, ABORT, 42, now_ms=T0))
    assert view.is_control and view.is_transactional
    assert marker_of(view) == (ABORT, 42)
    assert marker_of(validate_batch(build_marker_batch(1, 0, COMMIT, 0, now_ms=T0))) == (COMMIT, 0)


def test_marker_of_a_data_batch_is_none() -> None:
    data = build_batch([Record(value=b"v")], producer_id=1, is_transactional=True, now_ms=T0)
    assert marker_of(RecordBatchView(data)) is None


def test_marker_of_another_control_type_is_none() -> None:
    leader_change = build_batch(
        [Record(key=struct.pack(">hh", 0, 2), value=b"\x00\x00")], is_control=True, now_ms=T0
    )
    assert marker_of(RecordBatchView(leader_change)) is None


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        (b"\x00", struct.pack(">hi", 0, 1), "key is 1 bytes"),
        (None, struct.pack(">hi", 0, 1), "key is 0 bytes"),
        (struct.pack(">hh", 0, COMMIT), b"\x00\x00", "value is 2 bytes"),
        (struct.pack(">hh", -1, COMMIT), struct.pack(">hi", 0, 1), "invalid version"),
        (struct.pack(">hh", 0, COMMIT), struct.pack(">hi", -3, 1), "invalid version"),
    ],
)
def test_malformed_marker_is_corrupt(key: bytes | None, value: bytes, match: str) -> None:
    bad = build_batch(
        [Record(key=key, value=value)], producer_id=1, is_transactional=True, is_control=True
    )
    with pytest.raises(CorruptRecordError, match=match):
        marker_of(RecordBatchView(bad))


def test_refuses_non_marker_types_and_missing_producer() -> None:
    with pytest.raises(ValueError, match="not a transaction marker"):
        build_marker_batch(1, 0, 2, 0, now_ms=T0)
    with pytest.raises(ValueError, match="producer id"):
        build_marker_batch(-1, 0, COMMIT, 0, now_ms=T0)
