"""spark_jobs.arrow_records on corrupt input: a CRC mismatch, and records whose lengths,
header counts, varints or record count are wrong under a valid CRC, raise an error that
names the topic, partition and batch offset, never return wrong rows.
"""

from __future__ import annotations

import struct

import pytest

from common.varint import write_varint
from spark_jobs.arrow_records import RecordsDecodeError, decode_records
from storage.compression import Compression
from storage.record_batch import (
    ATTRIBUTES,
    BATCH_LENGTH,
    HEADER_SIZE,
    MAGIC,
    RECORDS_COUNT,
    RecordBatchView,
)
from storage.records import (
    CorruptRecordError,
    Record,
    build_batch,
    decode_batch,
)
from tests.harness.arrow_oracle import (
    FAR,
    MODES,
    PARTITION,
    TOPIC,
    actual,
    check,
    recs,
    reseal,
    stepping,
)


def test_crc_mismatch_names_topic_partition_and_batch_offset() -> None:
    good = build_batch(recs(3), base_offset=500)
    bad = bytearray(build_batch(recs(3), base_offset=503))
    bad[HEADER_SIZE + 2] ^= 0x01
    with pytest.raises(RecordsDecodeError, match=r"offset 503 in events-3: CRC32C"):
        decode_records(good + bytes(bad), TOPIC, PARTITION, 500, FAR, False)


def _edit_varint(batch: bytes, at: int, value: int) -> bytes:
    """Replace the 1-byte varint at `at` in the record bytes, and reseal the CRC."""
    new = bytearray()
    write_varint(new, value)
    body = batch[HEADER_SIZE:]
    return reseal(batch[:HEADER_SIZE] + body[:at] + bytes(new) + body[at + 1 :])


# recs()' first record: length, attributes, timestamp delta, offset delta, key length (4)
@pytest.mark.parametrize(
    ("at", "value"), [(0, 200), (0, 3), (0, -1), (0, -9), (4, 5000), (4, 40), (4, 1)]
)
def test_bad_record_lengths_with_a_valid_crc_raise(at: int, value: int) -> None:
    batches = [build_batch(recs(2), base_offset=0), build_batch(recs(4), base_offset=2)]
    batches[1] = _edit_varint(batches[1], at, value)
    for mode in MODES:
        with stepping(mode), pytest.raises(RecordsDecodeError, match=r"offset 2 in events-3"):
            decode_records(b"".join(batches), TOPIC, PARTITION, 0, FAR, False)


@pytest.mark.parametrize(
    ("edit", "why"),
    [
        (b"\x04\x02k", "does not match its headers"),  # 2 headers, room for 1
        (b"\x03\x02k", "invalid header count -2"),
        (b"\x06\x02k", "invalid header count 3"),  # more than the bytes left can hold
        (b"\x02\x01k", "header key is null"),
        (b"\x00\x02k", "does not match its fields"),  # no headers, bytes left over
    ],
)
def test_bad_header_counts_and_null_header_keys_raise(edit: bytes, why: str) -> None:
    batch = build_batch([Record(b"v", headers=(("k", b"h"),))])
    at = batch.rindex(b"\x02\x02k")  # header count 1, key length 1, "k"
    data = reseal(batch[:at] + edit + batch[at + 3 :])
    for include_headers in (False, True):  # checked even when the column is not wanted
        with pytest.raises(RecordsDecodeError, match=f"offset 0 in events-3: .*{why}"):
            decode_records(data, TOPIC, PARTITION, 0, FAR, include_headers)


@pytest.mark.parametrize(("which", "why"), [(0, "its headers"), (1, "its fields")])
def test_a_byte_left_over_in_a_record_with_or_without_headers(which: int, why: str) -> None:
    """Record 0 has headers, record 1 none; one of them gets a byte past its fields."""
    batch = build_batch([Record(b"v", headers=(("k", b"h"),)), Record(b"w")], base_offset=8)
    body = bytearray(batch[HEADER_SIZE:])
    second = 1 + (body[0] >> 1)  # after the first record's 1-byte length and its body
    at = (0, second)[which]
    body.insert(at + 1 + (body[at] >> 1), 0)  # a byte at the end of the record...
    body[at] += 2  # ...which is one longer (zigzag)
    data = reseal(batch[:HEADER_SIZE] + body)
    with pytest.raises(CorruptRecordError, match="does not match its fields"):
        decode_batch(RecordBatchView(data))
    with pytest.raises(RecordsDecodeError, match=f"offset 8 in events-3: .*match {why}"):
        decode_records(data, TOPIC, PARTITION, 0, FAR, True)


def test_over_long_varints_raise() -> None:
    """Kafka reads at most 5 bytes for an int32 varint, 10 for the timestamp varlong."""
    batch = build_batch([Record(b"v", b"k", timestamp=0)], base_offset=6)
    body = batch[HEADER_SIZE:]  # length, attributes, ts delta 0, offset delta 0, key length
    key_len_6_bytes = b"\x82\x80\x80\x80\x80\x00"  # 1, over-long
    long_key = body[:4] + key_len_6_bytes + body[5:]
    long_key = bytes([body[0] + 10]) + long_key[1:]
    ts_11_bytes = b"\x80" * 10 + b"\x00"  # 0, over-long
    long_ts = bytes([body[0] + 20]) + body[1:2] + ts_11_bytes + body[3:]
    for data, why in ((long_key, "longer than 5 bytes"), (long_ts, "longer than 10 bytes")):
        with pytest.raises(RecordsDecodeError, match=f"offset 6 in events-3: .*{why}"):
            decode_records(reseal(batch[:HEADER_SIZE] + data), TOPIC, PARTITION, 0, FAR, False)


def test_record_count_that_does_not_match_the_records_raises() -> None:
    batch = bytearray(build_batch(recs(3)))
    for count in (2, 4, 10**6, -1, 0):
        struct.pack_into(">i", batch, RECORDS_COUNT, count)
        with pytest.raises(RecordsDecodeError, match="offset 0 in events-3"):
            decode_records(reseal(batch), TOPIC, PARTITION, 0, FAR, False)


def test_empty_batch_gives_no_rows_but_advances_next_offset() -> None:
    """An empty batch (count 0, as a log cleaner may keep for producer state)."""
    empty = bytearray(build_batch(recs(3), base_offset=20)[:HEADER_SIZE])
    struct.pack_into(">i", empty, RECORDS_COUNT, 0)
    empty = reseal(empty)
    assert actual(empty, start=20) == (None, 23)
    assert [r[4] for r in check([empty, build_batch(recs(1), base_offset=23)])] == [23]


def test_magic_other_than_2_raises() -> None:
    batch = bytearray(build_batch(recs(2), base_offset=9))
    batch[MAGIC] = 1  # outside the CRC
    with pytest.raises(RecordsDecodeError, match=r"offset 9 in events-3: magic 1"):
        decode_records(bytes(batch), TOPIC, PARTITION, 0, FAR, False)


def test_undecompressable_payload_and_unknown_codec_raise() -> None:
    batch = build_batch(recs(20), compression=Compression.LZ4, base_offset=4)
    garbage = reseal(batch[:HEADER_SIZE] + b"\x04\x22\x4d\x18garbage" * 3)
    with pytest.raises(RecordsDecodeError, match="offset 4 in events-3: lz4"):
        decode_records(garbage, TOPIC, PARTITION, 0, FAR, False)
    codec7 = bytearray(batch)
    codec7[ATTRIBUTES + 1] |= 0x07
    with pytest.raises(RecordsDecodeError, match="unknown compression codec 7"):
        decode_records(reseal(codec7), TOPIC, PARTITION, 0, FAR, False)


def test_batch_length_below_the_header_raises() -> None:
    batch = bytearray(build_batch(recs(1)))
    struct.pack_into(">i", batch, BATCH_LENGTH, 20)
    with pytest.raises(RecordsDecodeError, match="batch length 20"):
        decode_records(bytes(batch), TOPIC, PARTITION, 0, FAR, False)
