"""Interop with kafka-python's record builder and reader (an independent implementation).

Acceptance: batches built by kafka-python's record builder (compressed and not) append
and read back byte-identical; batches our helpers build are read correctly by
kafka-python's record reader.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

import pytest
from kafka.record import MemoryRecords
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from storage.compression import Compression
from storage.config import LogConfig
from storage.epoch_cache import EpochEntry
from storage.log import Log
from storage.record_batch import RecordBatchView, validate_records
from storage.records import Record, build_batch, decode_batch

BASE_TS = 1_700_000_000_000
MAX_BYTES = 1 << 20
CODECS = list(Compression)

Header = tuple[str, bytes | None]


class Spec(NamedTuple):
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]
    timestamp: int


# Keys, null keys, null values (tombstones), empty key/value, headers with null and empty
# values, a non-ASCII header key, and timestamps that go backwards (a negative delta).
# Values repeat so that every codec really compresses (kafka-python falls back to an
# uncompressed batch when compression does not pay).
SPECS: tuple[Spec, ...] = (
    Spec(b"key-0", b"value-0 " * 30, (), BASE_TS),
    Spec(None, b"value-1 " * 30, (("h1", b"v1"), ("h2", None)), BASE_TS + 5),
    Spec(b"key-2", None, (), BASE_TS - 3),
    Spec(b"", b"", (("\u043a\u043b\u044e\u0447", b"\x00\xff"),), BASE_TS + 86_400_000),
    Spec(b"key-4", bytes(range(256)) * 4, (("h", b""),), BASE_TS + 1),
)


class Producer(NamedTuple):
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


PRODUCERS = {
    "no-producer": Producer(-1, -1, -1, False),
    "idempotent": Producer(123_456_789_012, 7, 41, False),
    "transactional": Producer(42, 3, 0, True),
}


def kp_build(
    codec: Compression, specs: tuple[Spec, ...], producer: Producer = PRODUCERS["no-producer"]
) -> bytes:
    """A batch from kafka-python's builder (baseOffset 0 and leader epoch 0, as it sends)."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=int(codec),
        is_transactional=producer.transactional,
        producer_id=producer.producer_id,
        producer_epoch=producer.producer_epoch,
        base_sequence=producer.base_sequence,
        batch_size=MAX_BYTES,
    )
    for delta, spec in enumerate(specs):
        meta = builder.append(
            delta, timestamp=spec.timestamp, key=spec.key, value=spec.value,
            headers=list(spec.headers),
        )
        assert meta is not None
    data = bytes(builder.build())
    assert RecordBatchView(data).compression == codec, "kafka-python did not compress"
    return data


def with_header(data: bytes, base_offset: int, epoch: int) -> bytes:
    """The batch as the broker stores it: baseOffset and leader epoch (outside the CRC)."""
    out = bytearray(data)
    struct.pack_into(">q", out, 0, base_offset)
    struct.pack_into(">i", out, 12, epoch)
    return bytes(out)


class Seen(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...]


def kp_read(data: bytes) -> list[tuple[DefaultRecordBatch, list[Seen]]]:
    """Every batch kafka-python's reader finds, CRC-checked, with its records."""
    out = []
    records = MemoryRecords(data)
    while records.has_next():
        batch = records.next_batch()
        assert isinstance(batch, DefaultRecordBatch)
        assert batch.validate_crc(), "kafka-python rejects the CRC"
        seen = [
            Seen(r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers))
            for r in batch
        ]
        out.append((batch, seen))
    assert records.valid_bytes() == len(data)
    return out


def ours_read(data: bytes) -> list[Seen]:
    seen = []
    for view in validate_records(data):
        for r in decode_batch(view).records:
            assert r.timestamp is not None
            seen.append(Seen(r.offset, r.timestamp, r.key, r.value, r.headers))
    return seen


def expected(specs: tuple[Spec, ...], base_offset: int) -> list[Seen]:
    return [
        Seen(base_offset + i, s.timestamp, s.key, s.value, s.headers) for i, s in enumerate(specs)
    ]


def _check_log(log: Log, first: bytes, second: bytes, second_raw: bytes) -> None:
    assert log.log_end_offset == 2 + len(SPECS)
    assert log.read(0, MAX_BYTES).read() == first + second
    got = log.read(2, MAX_BYTES).read()
    assert got == second
    # Only baseOffset and the leader epoch may differ from what the client built.
    assert got[8:12] == second_raw[8:12] and got[16:] == second_raw[16:]
    assert got[:8] != second_raw[:8] and got[12:16] != second_raw[12:16]
    assert log.leader_epoch_cache.entries == [EpochEntry(0, 0), EpochEntry(7, 2)]


@pytest.mark.parametrize("producer", list(PRODUCERS), ids=list(PRODUCERS))
@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_kafka_python_batches_append_and_read_back_byte_identical(
    tmp_path: Path, codec: Compression, producer: str
) -> None:
    directory = tmp_path / "topic-0"
    log = Log(directory)
    # At offset 0 and epoch 0 the client's bytes are exactly what the broker stores.
    first = kp_build(codec, SPECS[:2])
    info = log.append_as_leader(first, leader_epoch=0)
    assert (info.first_offset, info.last_offset, info.num_batches) == (0, 1, 1)
    second_raw = kp_build(codec, SPECS, PRODUCERS[producer])
    second = with_header(second_raw, base_offset=2, epoch=7)
    info = log.append_as_leader(second_raw, leader_epoch=7)
    assert (info.first_offset, info.last_offset) == (2, 1 + len(SPECS))
    assert info.max_timestamp == BASE_TS + 86_400_000
    assert info.offset_of_max_timestamp == 1 + len(SPECS)
    _check_log(log, first, second, second_raw)
    log.flush()
    log.close()
    for clean in (True, False):  # a clean reopen, then one that rescans (recovery)
        log = Log(directory, had_clean_shutdown=clean, recovery_point=0)
        _check_log(log, first, second, second_raw)
        log.close()


@pytest.mark.parametrize("producer", list(PRODUCERS), ids=list(PRODUCERS))
@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_our_decoder_agrees_with_kafka_python_reader(codec: Compression, producer: str) -> None:
    p = PRODUCERS[producer]
    data = with_header(kp_build(codec, SPECS, p), base_offset=1000, epoch=3)
    [(kp_batch, kp_seen)] = kp_read(data)
    assert kp_seen == expected(SPECS, 1000)
    assert ours_read(data) == kp_seen
    decoded = decode_batch(RecordBatchView(data))
    assert decoded.base_offset == kp_batch.base_offset == 1000
    assert decoded.partition_leader_epoch == kp_batch.leader_epoch == 3
    assert decoded.max_timestamp == kp_batch.max_timestamp == BASE_TS + 86_400_000
    assert decoded.producer_id == kp_batch.producer_id == p.producer_id
    assert decoded.producer_epoch == kp_batch.producer_epoch == p.producer_epoch
    assert decoded.base_sequence == kp_batch.base_sequence == p.base_sequence
    assert decoded.is_transactional == kp_batch.is_transactional == p.transactional
    assert not decoded.is_control and not decoded.log_append_time


def our_records() -> list[Record]:
    return [Record(s.value, s.key, s.headers, s.timestamp) for s in SPECS]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    records = [*our_records(), Record(b"stamped-now", b"k")]  # no timestamp: gets now_ms
    now = BASE_TS + 123
    data = build_batch(
        records, base_offset=100, compression=codec, producer_id=9, producer_epoch=2,
        base_sequence=5, partition_leader_epoch=11, is_transactional=True, now_ms=now,
    )
    [(batch, seen)] = kp_read(data)
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset, batch.leader_epoch) == (100, 105, 11)
    assert batch.records_count == 6 and batch.magic == 2
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (9, 2, 5)
    assert batch.is_transactional and not batch.is_control_batch
    assert batch.timestamp_type == 0
    assert batch.first_timestamp == BASE_TS
    assert batch.max_timestamp == BASE_TS + 86_400_000
    assert seen == [*expected(SPECS, 100), Seen(105, now, b"k", b"stamped-now", ())]


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_kafka_python_reads_our_log_append_time_batches(codec: Compression) -> None:
    data = build_batch(our_records(), compression=codec, log_append_time=True, now_ms=0)
    [(batch, seen)] = kp_read(data)
    assert batch.timestamp_type == 1
    # Under LogAppendTime every record reads as the batch's max timestamp.
    assert [s.timestamp for s in seen] == [BASE_TS + 86_400_000] * len(SPECS)
    assert [s.value for s in seen] == [s.value for s in SPECS]
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (-1, -1, -1)


@pytest.mark.parametrize("codec", CODECS, ids=[c.name.lower() for c in CODECS])
def test_log_append_time_topic_rewrites_crc_that_kafka_python_accepts(
    tmp_path: Path, codec: Compression
) -> None:
    stamp = BASE_TS + 999_999
    config = LogConfig(message_timestamp_type="LogAppendTime")
    log = Log(tmp_path / "topic-0", config, clock=lambda: stamp)
    raw = kp_build(codec, SPECS, PRODUCERS["idempotent"])
    info = log.append_as_leader(raw, leader_epoch=2)
    assert info.log_append_time_ms == stamp
    got = log.read(0, MAX_BYTES).read()
    [(batch, seen)] = kp_read(got)  # the CRC was recomputed correctly
    assert batch.timestamp_type == 1 and batch.max_timestamp == stamp
    assert [s.timestamp for s in seen] == [stamp] * len(SPECS)
    assert [(s.key, s.value, s.headers) for s in seen] == [
        (s.key, s.value, s.headers) for s in SPECS
    ]
    assert ours_read(got) == seen
    # Everything else is untouched: length, magic, lastOffsetDelta, base timestamp,
    # producer fields, count and the compressed payload.
    assert got[8:12] == raw[8:12] and got[16] == raw[16]
    assert got[23:35] == raw[23:35] and got[43:] == raw[43:]
    log.close()


def test_concatenated_batches_keep_order_and_offsets(tmp_path: Path) -> None:
    """One append carrying many batches: theirs and ours, every codec, in order."""
    parts: list[bytes] = []
    values: list[bytes | None] = []
    for i, codec in enumerate(CODECS):
        specs = tuple(s._replace(value=b"kp-%d-%d " % (i, j) * 20) for j, s in enumerate(SPECS))
        parts.append(kp_build(codec, specs[: 1 + i % 3], PRODUCERS["idempotent"]))
        values += [s.value for s in specs[: 1 + i % 3]]
        ours = [Record(b"ours-%d-%d " % (i, j) * 20, b"k") for j in range(2 + i % 2)]
        parts.append(build_batch(ours, compression=codec, now_ms=BASE_TS + i))
        values += [r.value for r in ours]
    leader = Log(tmp_path / "topic-0")
    leader.append_as_leader(build_batch([Record(b"first")], now_ms=BASE_TS), leader_epoch=1)
    info = leader.append_as_leader(b"".join(parts), leader_epoch=4)
    assert info.num_batches == len(parts)
    assert (info.first_offset, info.last_offset) == (1, len(values))
    assert info.valid_bytes == sum(len(p) for p in parts)
    stored = leader.read(1, MAX_BYTES).read()
    batches = kp_read(stored)
    assert len(batches) == len(parts)
    assert [b.leader_epoch for b, _ in batches] == [4] * len(parts)
    assert [b.compression_type for b, _ in batches] == [c for c in CODECS for _ in (0, 1)]
    seen = [s for _, recs in batches for s in recs]
    assert [s.offset for s in seen] == list(range(1, len(values) + 1))
    assert [s.value for s in seen] == values
    assert ours_read(stored) == seen
    # Each batch is stored exactly as sent apart from baseOffset and the leader epoch.
    pos = 0
    for part, (batch, _) in zip(parts, batches, strict=True):
        assert stored[pos : pos + len(part)] == with_header(part, batch.base_offset, 4)
        pos += len(part)
    # A follower copying the leader's bytes stores them unchanged.
    follower = Log(tmp_path / "topic-1")
    everything = leader.read(0, MAX_BYTES).read()
    follower_info = follower.append_as_follower(everything)
    assert follower_info is not None and follower_info.last_offset == len(values)
    assert follower.read(0, MAX_BYTES).read() == everything
    assert follower.leader_epoch_cache.entries == [EpochEntry(1, 0), EpochEntry(4, 1)]
    leader.close()
    follower.close()
