"""Bad input is refused with a specific error and leaves the log unchanged.

Acceptance: a batch with a flipped CRC bit, a wrong length, magic 0/1/3, a negative or
absurd record count, or a truncated header is refused with a specific error and leaves
the log unchanged.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from crc32c import crc32c

from storage.compression import Compression
from storage.config import LogConfig
from storage.epoch_cache import EpochEntry
from storage.log import Log, RecordTooLargeError
from storage.record_batch import (
    ATTRIBUTES,
    BATCH_LENGTH,
    CRC,
    LAST_OFFSET_DELTA,
    MAGIC,
    RECORDS_COUNT,
    CorruptRecordError,
    InvalidRecordError,
    RecordBatchError,
    UnsupportedCompressionError,
    validate_records,
)
from storage.records import Record, build_batch

CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_COMPRESSION = 2, 87, 76
EXISTING_EPOCH, NEW_EPOCH = 3, 4
MAX_BYTES = 1 << 20


def good_batch(
    base_offset: int = 0, codec: Compression = Compression.NONE, n: int = 2
) -> bytes:
    records = [Record(b"value-%d" % i, b"k%d" % i, (("h", b"x"),), 1000 + i) for i in range(n)]
    return build_batch(
        records, base_offset=base_offset, compression=codec,
        partition_leader_epoch=NEW_EPOCH, now_ms=1000,
    )


def patch(data: bytes, fmt: str, pos: int, value: int, *, fix_crc: bool) -> bytes:
    """Overwrite one header field; with `fix_crc`, recompute the CRC32C so it still matches."""
    out = bytearray(data)
    struct.pack_into(fmt, out, pos, value)
    if fix_crc:
        struct.pack_into(">I", out, CRC, crc32c(bytes(out[ATTRIBUTES:])))
    return bytes(out)


class State(NamedTuple):
    leo: int
    data: bytes
    files: dict[str, int]
    epochs: list[EpochEntry]
    segments: list[tuple[int, int]]


def state(log: Log) -> State:
    return State(
        log.log_end_offset,
        log.read(0, MAX_BYTES).read(),
        {p.name: p.stat().st_size for p in sorted(log.dir.iterdir())},
        log.leader_epoch_cache.entries,
        [(s.base_offset, s.size) for s in log.segments],
    )


@pytest.fixture
def log(tmp_path: Path) -> Log:
    """A log holding two records at epoch 3, so 'unchanged' has something to compare."""
    log = Log(tmp_path / "topic-0")
    log.append_as_leader(good_batch(), leader_epoch=EXISTING_EPOCH)
    assert log.log_end_offset == 2
    return log


def assert_refused(
    log: Log, data: bytes, exc: type[RecordBatchError], code: int, *, follower: bool = True
) -> None:
    """Both append paths refuse `data` with `exc` (exactly) and leave the log as it was."""
    before = state(log)
    calls: list[Callable[[], object]] = [
        lambda: log.append_as_leader(data, leader_epoch=NEW_EPOCH),
        lambda: log.append_as_leader(bytearray(data), leader_epoch=NEW_EPOCH),
    ]
    if follower:
        calls.append(lambda: log.append_as_follower(data))
    for call in calls:
        with pytest.raises(RecordBatchError) as info:
            call()
        assert type(info.value) is exc, info.value
        assert info.value.error_code == code
        assert state(log) == before


def assert_good_append_works(log: Log) -> None:
    leo = log.log_end_offset
    info = log.append_as_leader(good_batch(n=3), leader_epoch=NEW_EPOCH)
    assert (info.first_offset, info.last_offset) == (leo, leo + 2)
    assert log.log_end_offset == leo + 3
    assert log.leader_epoch_cache.entries[-1] == EpochEntry(NEW_EPOCH, leo)
    assert validate_records(log.read(leo, MAX_BYTES).read())[0].record_count == 3


def test_every_single_bit_flip_in_the_crc_region_is_refused(log: Log) -> None:
    data = good_batch(base_offset=2)
    assert len(data) < 120  # keep the loop small
    flips = 0
    for pos in range(CRC, len(data)):  # the CRC itself and everything it covers
        for bit in range(8):
            bad = bytearray(data)
            bad[pos] ^= 1 << bit
            assert_refused(log, bytes(bad), CorruptRecordError, CORRUPT_MESSAGE)
            flips += 1
    assert flips == (len(data) - CRC) * 8
    assert_good_append_works(log)


@pytest.mark.parametrize("length", [-(2**31), -1, 0, 48], ids=lambda n: f"len={n}")
def test_length_below_the_minimum_is_refused(log: Log, length: int) -> None:
    bad = patch(good_batch(base_offset=2), ">i", BATCH_LENGTH, length, fix_crc=False)
    assert_refused(log, bad, CorruptRecordError, CORRUPT_MESSAGE)
    assert_good_append_works(log)


@pytest.mark.parametrize("delta", [-1, -5], ids=lambda d: f"len{d}")
def test_length_shorter_than_the_batch_is_refused(log: Log, delta: int) -> None:
    data = good_batch(base_offset=2)
    bad = patch(data, ">i", BATCH_LENGTH, len(data) - 12 + delta, fix_crc=False)
    assert_refused(log, bad, CorruptRecordError, CORRUPT_MESSAGE)
    assert_good_append_works(log)


@pytest.mark.parametrize("extra", [1, 2**31 - 1 - 100], ids=["by-one", "absurd"])
def test_length_past_the_buffer_is_refused_by_the_leader(log: Log, extra: int) -> None:
    data = good_batch(base_offset=2)
    bad = patch(data, ">i", BATCH_LENGTH, len(data) - 12 + extra, fix_crc=False)
    assert_refused(log, bad, CorruptRecordError, CORRUPT_MESSAGE, follower=False)
    # A follower reads it as a partial trailing batch (as a fetch may end): nothing to do.
    before = state(log)
    assert log.append_as_follower(bad) is None
    assert state(log) == before
    assert_good_append_works(log)


@pytest.mark.parametrize("size", [1, 11, 12, 16, 17, 60])
def test_truncated_header_is_refused_by_the_leader(log: Log, size: int) -> None:
    torn = good_batch(base_offset=2)[:size]
    assert_refused(log, torn, CorruptRecordError, CORRUPT_MESSAGE, follower=False)
    before = state(log)
    assert log.append_as_follower(torn) is None  # a partial tail, dropped
    assert state(log) == before
    # The same torn header with a nonsense length is no partial batch: refused.
    if size >= 12:
        bad = patch(torn.ljust(12, b"\0"), ">i", BATCH_LENGTH, 5, fix_crc=False)[:size]
        assert_refused(log, bad, CorruptRecordError, CORRUPT_MESSAGE)
    assert_good_append_works(log)


def test_truncated_payload_is_refused_by_the_leader(log: Log) -> None:
    torn = good_batch(base_offset=2)[:-1]
    assert_refused(log, torn, CorruptRecordError, CORRUPT_MESSAGE, follower=False)
    assert_good_append_works(log)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_invalid(log: Log, magic: int) -> None:
    bad = patch(good_batch(base_offset=2), ">b", MAGIC, magic, fix_crc=False)
    assert_refused(log, bad, InvalidRecordError, INVALID_RECORD)
    assert_good_append_works(log)


@pytest.mark.parametrize("magic", [3, -1])
def test_unknown_magic_is_refused(log: Log, magic: int) -> None:
    bad = patch(good_batch(base_offset=2), ">b", MAGIC, magic, fix_crc=False)
    with pytest.raises((InvalidRecordError, CorruptRecordError)):
        log.append_as_leader(bad, leader_epoch=NEW_EPOCH)
    assert_good_append_works(log)


@pytest.mark.parametrize("magic", [3, -1])
def test_unknown_magic_is_corrupt_as_in_kafka(log: Log, magic: int) -> None:
    bad = patch(good_batch(base_offset=2), ">b", MAGIC, magic, fix_crc=False)
    assert_refused(log, bad, CorruptRecordError, CORRUPT_MESSAGE)


COUNTS = [-(2**31), -1, 0, 1_000, 2**31 - 1]
COUNT_CODECS = [Compression.NONE, Compression.ZSTD]


@pytest.mark.parametrize("codec", COUNT_CODECS, ids=lambda c: c.name.lower())
@pytest.mark.parametrize("consistent_delta", [False, True], ids=["count", "count+delta"])
@pytest.mark.parametrize("count", COUNTS, ids=lambda n: f"count={n}")
def test_bad_record_count_is_invalid(
    log: Log, count: int, consistent_delta: bool, codec: Compression
) -> None:
    data = good_batch(base_offset=2, codec=codec)
    if codec is Compression.ZSTD and count == 1_000:
        count = 10**7  # plausible for a compressed batch: take an absurd one
    bad = patch(data, ">i", RECORDS_COUNT, count, fix_crc=True)
    if consistent_delta:  # so only the count check can object
        bad = patch(bad, ">i", LAST_OFFSET_DELTA, count - 1 if count > -(2**31) else 0,
                    fix_crc=True)
    assert_refused(log, bad, InvalidRecordError, INVALID_RECORD)
    # Without recomputing the CRC, the CRC check refuses it first.
    raw = patch(data, ">i", RECORDS_COUNT, count, fix_crc=False)
    assert_refused(log, raw, CorruptRecordError, CORRUPT_MESSAGE)
    assert_good_append_works(log)


@pytest.mark.parametrize("delta", [-1, 0, 2, 2**31 - 1], ids=lambda d: f"delta={d}")
def test_last_offset_delta_not_matching_count_is_invalid(log: Log, delta: int) -> None:
    data = good_batch(base_offset=2)  # 2 records: lastOffsetDelta must be 1
    # A follower takes a range wider than the count: a compacted batch keeps its base and
    # last offsets (Kafka's cleaner does this too); a produce never may.
    compacted = delta > 1
    assert_refused(
        log, patch(data, ">i", LAST_OFFSET_DELTA, delta, fix_crc=True),
        InvalidRecordError, INVALID_RECORD, follower=not compacted,
    )
    assert_refused(
        log, patch(data, ">i", LAST_OFFSET_DELTA, delta, fix_crc=False),
        CorruptRecordError, CORRUPT_MESSAGE,
    )
    assert_good_append_works(log)
    if compacted:
        leo = log.log_end_offset
        info = log.append_as_follower(
            patch(data, ">q", 0, leo, fix_crc=False)[:8]
            + patch(data, ">i", LAST_OFFSET_DELTA, delta, fix_crc=True)[8:]
        )
        assert info is not None and (info.first_offset, info.last_offset) == (leo, leo + delta)
        assert log.log_end_offset == leo + delta + 1


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_unknown_compression_codec_is_unsupported(log: Log, codec_id: int) -> None:
    data = good_batch(base_offset=2)
    attributes = struct.unpack_from(">h", data, ATTRIBUTES)[0] | codec_id
    bad = patch(data, ">h", ATTRIBUTES, attributes, fix_crc=True)
    assert_refused(log, bad, UnsupportedCompressionError, UNSUPPORTED_COMPRESSION)
    raw = patch(data, ">h", ATTRIBUTES, attributes, fix_crc=False)
    assert_refused(log, raw, CorruptRecordError, CORRUPT_MESSAGE)
    assert_good_append_works(log)


def test_empty_records_are_refused_by_the_leader(log: Log) -> None:
    assert_refused(log, b"", CorruptRecordError, CORRUPT_MESSAGE, follower=False)
    assert_good_append_works(log)


def test_empty_records_are_nothing_to_do_for_a_follower(log: Log) -> None:
    before = state(log)
    assert log.append_as_follower(b"") is None
    assert state(log) == before


def _flip_crc(data: bytes) -> bytes:
    return patch(data, ">I", CRC, struct.unpack_from(">I", data, CRC)[0] ^ 1, fix_crc=False)


BAD_SECOND: dict[str, Callable[[bytes], bytes]] = {
    "crc": _flip_crc,
    "magic": lambda d: patch(d, ">b", MAGIC, 1, fix_crc=False),
    "count": lambda d: patch(d, ">i", RECORDS_COUNT, -1, fix_crc=True),
    "codec": lambda d: patch(d, ">h", ATTRIBUTES, 7, fix_crc=True),
    "length": lambda d: patch(d, ">i", BATCH_LENGTH, 3, fix_crc=False),
}
SECOND_ERRORS = {
    "crc": CorruptRecordError, "magic": InvalidRecordError, "count": InvalidRecordError,
    "codec": UnsupportedCompressionError, "length": CorruptRecordError,
}


@pytest.mark.parametrize("kind", list(BAD_SECOND))
def test_good_then_bad_batch_refuses_the_whole_append(log: Log, kind: str) -> None:
    first = good_batch(base_offset=2)
    second = BAD_SECOND[kind](good_batch(base_offset=4, codec=Compression.GZIP))
    exc = SECOND_ERRORS[kind]
    assert_refused(log, first + second, exc, exc.error_code)
    assert_refused(log, second + first, exc, exc.error_code)
    assert_refused(log, first + first[:20] + second, CorruptRecordError, CORRUPT_MESSAGE,
                   follower=False)
    # The caller's writable buffer is not patched (offsets, epoch) by a refused append.
    buf = bytearray(first + second)
    with pytest.raises(exc):
        log.append_as_leader(buf, leader_epoch=NEW_EPOCH)
    assert buf == first + second
    assert_good_append_works(log)


def test_batch_larger_than_max_message_bytes_is_refused(tmp_path: Path) -> None:
    small = build_batch([Record(b"v" * 10)], partition_leader_epoch=NEW_EPOCH, now_ms=0)
    one_more = build_batch([Record(b"v" * 11)], now_ms=0)
    assert len(one_more) == len(small) + 1
    log = Log(tmp_path / "topic-0", LogConfig(max_message_bytes=len(small)))
    log.append_as_leader(small, leader_epoch=EXISTING_EPOCH)  # exactly the limit: fine
    assert_refused(log, one_more, RecordTooLargeError, 10, follower=False)
    big = good_batch(base_offset=1, n=3)
    assert_refused(log, big, RecordTooLargeError, 10, follower=False)
    assert_refused(log, small + big, RecordTooLargeError, 10, follower=False)
    assert log.append_as_leader(small, leader_epoch=NEW_EPOCH).first_offset == 1


def test_follower_ignores_max_message_bytes(tmp_path: Path) -> None:
    log = Log(tmp_path / "topic-0", LogConfig(max_message_bytes=100))
    big = good_batch(n=5)
    assert len(big) > 100
    info = log.append_as_follower(big)
    assert info is not None and log.log_end_offset == 5


# -- validate_records on its own --------------------------------------------------------------


def test_validate_records_finds_every_batch() -> None:
    a, b = good_batch(), good_batch(base_offset=2, codec=Compression.LZ4, n=3)
    views = validate_records(a + b)
    assert [(v.pos, v.size, v.base_offset, v.record_count) for v in views] == [
        (0, len(a), 0, 2), (len(a), len(b), 2, 3),
    ]


@pytest.mark.parametrize("cut", [1, 11, 12, 60, 61, -1])
def test_validate_records_drops_a_partial_tail_when_allowed(cut: int) -> None:
    a, b = good_batch(), good_batch(base_offset=2, n=3)
    blob = a + b[:cut]
    views = validate_records(blob, allow_partial_tail=True)
    assert [v.pos for v in views] == [0]
    assert sum(v.size for v in views) == len(a) < len(blob)
    with pytest.raises(CorruptRecordError):
        validate_records(blob)
    assert validate_records(b[:cut], allow_partial_tail=True) == []


def test_validate_records_partial_tail_does_not_excuse_corruption() -> None:
    a, b = good_batch(), good_batch(base_offset=2)
    with pytest.raises(CorruptRecordError):  # complete but bad CRC: not a partial tail
        validate_records(a + _flip_crc(b), allow_partial_tail=True)
    with pytest.raises(CorruptRecordError):  # bad length: not a partial tail either
        validate_records(a + patch(b, ">i", BATCH_LENGTH, -1, fix_crc=False)[:30],
                         allow_partial_tail=True)
    with pytest.raises(InvalidRecordError):
        validate_records(patch(a, ">i", RECORDS_COUNT, 0, fix_crc=True) + b[:30],
                         allow_partial_tail=True)
    with pytest.raises(CorruptRecordError):
        validate_records(b"", allow_partial_tail=True)
