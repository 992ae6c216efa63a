"""RecordBatch v2 (magic 2): a zero-copy view over the 61-byte header, validation,
and the in-place patches a broker makes (base offset, partition leader epoch).

Validation (`validate_batch`) is the one place a batch's header is parsed and its CRC
checked: it returns a `CheckedBatch` holding the header fields it read, and the layers
below (producer state, `Log.append_checked_as_leader`) use those instead of parsing
again.

Everything here works per batch; nothing looks at individual records. Record-level
encoding and decoding (for tools and tests) lives in `storage.records`.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Final

from crc32c import crc32c

from common.errors import Errors

# Field positions inside a batch (Kafka's DefaultRecordBatch layout).
BASE_OFFSET: Final = 0  # int64
BATCH_LENGTH: Final = 8  # int32, bytes after this field
PARTITION_LEADER_EPOCH: Final = 12  # int32 (outside the CRC)
MAGIC: Final = 16  # int8
CRC: Final = 17  # uint32, CRC32C of bytes [ATTRIBUTES, end)
ATTRIBUTES: Final = 21  # int16
LAST_OFFSET_DELTA: Final = 23  # int32
BASE_TIMESTAMP: Final = 27  # int64
MAX_TIMESTAMP: Final = 35  # int64
PRODUCER_ID: Final = 43  # int64
PRODUCER_EPOCH: Final = 51  # int16
BASE_SEQUENCE: Final = 53  # int32
RECORDS_COUNT: Final = 57  # int32
HEADER_SIZE: Final = 61
LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the part not counted by batchLength
MIN_BATCH_LENGTH: Final = HEADER_SIZE - LOG_OVERHEAD
CURRENT_MAGIC: Final = 2
# The smallest possible record: length, attributes, timestamp delta, offset delta,
# key length, value length and header count, one byte each.
MIN_RECORD_SIZE: Final = 7
# A compressed batch's count cannot be bounded by its size exactly; codecs reach
# about 1000:1 on runs of equal bytes, so anything past this is refused as absurd.
MAX_COMPRESSION_RATIO: Final = 1100

COMPRESSION_MASK: Final = 0x07
TIMESTAMP_TYPE_MASK: Final = 0x08
TRANSACTIONAL_MASK: Final = 0x10
CONTROL_MASK: Final = 0x20
DELETE_HORIZON_MASK: Final = 0x40

NO_PRODUCER_ID: Final = -1
NO_PARTITION_LEADER_EPOCH: Final = -1

_HEADER = struct.Struct(">qiibIhiqqqhii")
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")
_I16 = struct.Struct(">h")
assert _HEADER.size == HEADER_SIZE


class RecordBatchError(ValueError):
    """A batch that must be refused. `error_code` is the Kafka error for a produce response."""

    error_code: int = Errors.INVALID_RECORD


class CorruptRecordError(RecordBatchError):
    """Bytes that are not a well-formed batch: bad CRC, bad sizes, a torn header."""

    error_code = Errors.CORRUPT_MESSAGE


class InvalidRecordError(RecordBatchError):
    """A well-formed batch whose contents break the rules (magic, counts, offsets)."""

    error_code = Errors.INVALID_RECORD


class UnsupportedCompressionError(RecordBatchError):
    error_code = Errors.UNSUPPORTED_COMPRESSION_TYPE


class RecordBatchView:
    """Zero-copy view of one batch at `pos` in `buf`; fields are read on access."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> None:
        self.buf = buf
        self.pos = pos

    @property
    def base_offset(self) -> int:
        return _I64.unpack_from(self.buf, self.pos + BASE_OFFSET)[0]

    @property
    def batch_length(self) -> int:
        return _I32.unpack_from(self.buf, self.pos + BATCH_LENGTH)[0]

    @property
    def size(self) -> int:
        """Bytes of the whole batch, LOG_OVERHEAD included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def partition_leader_epoch(self) -> int:
        return _I32.unpack_from(self.buf, self.pos + PARTITION_LEADER_EPOCH)[0]

    @property
    def magic(self) -> int:
        return self.buf[self.pos + MAGIC]

    @property
    def crc(self) -> int:
        return _U32.unpack_from(self.buf, self.pos + CRC)[0]

    @property
    def attributes(self) -> int:
        return _I16.unpack_from(self.buf, self.pos + ATTRIBUTES)[0]

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def is_log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_offset_delta(self) -> int:
        return _I32.unpack_from(self.buf, self.pos + LAST_OFFSET_DELTA)[0]

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def base_timestamp(self) -> int:
        return _I64.unpack_from(self.buf, self.pos + BASE_TIMESTAMP)[0]

    @property
    def max_timestamp(self) -> int:
        return _I64.unpack_from(self.buf, self.pos + MAX_TIMESTAMP)[0]

    @property
    def producer_id(self) -> int:
        return _I64.unpack_from(self.buf, self.pos + PRODUCER_ID)[0]

    @property
    def producer_epoch(self) -> int:
        return _I16.unpack_from(self.buf, self.pos + PRODUCER_EPOCH)[0]

    @property
    def base_sequence(self) -> int:
        return _I32.unpack_from(self.buf, self.pos + BASE_SEQUENCE)[0]

    @property
    def record_count(self) -> int:
        return _I32.unpack_from(self.buf, self.pos + RECORDS_COUNT)[0]

    def memory(self) -> memoryview:
        """The batch's bytes, without copying."""
        return memoryview(self.buf)[self.pos : self.pos + self.size]

    def __repr__(self) -> str:
        return (
            f"RecordBatchView(base_offset={self.base_offset}, last_offset={self.last_offset}, "
            f"size={self.size}, epoch={self.partition_leader_epoch}, count={self.record_count})"
        )


class CheckedBatch(RecordBatchView):
    """A batch that passed `validate_batch`, with the 13 header fields it read then
    (`header_fields` order: baseOffset .. recordCount). The fields are as the batch
    came in: the in-place patches of an append (offsets, leader epoch, LogAppendTime)
    change the bytes, which the view's properties read, not these."""

    __slots__ = ("fields",)

    def __init__(self, buf: bytes | bytearray | memoryview, pos: int, fields: tuple) -> None:
        self.buf = buf
        self.pos = pos
        self.fields = fields


def validate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    end: int | None = None,
    *,
    compacted: bool = False,
) -> CheckedBatch:
    """Check the batch at `pos` and return a view of it, or raise a RecordBatchError.

    Checks sizes, magic, CRC32C, attributes and record-count bounds: everything the
    broker can check without decoding records. With `compacted` (batches already in a
    log: recovery, replication), a batch may hold fewer records than its offset range:
    the log cleaner keeps a rebuilt batch's base and last offsets, as Kafka's does, so
    producer sequence numbers survive compaction. A produce is always checked strictly.
    """
    if end is None:
        end = len(buf)
    available = end - pos
    if available < HEADER_SIZE:
        raise CorruptRecordError(
            f"record batch header is truncated: {available} bytes, need {HEADER_SIZE}"
        )
    fields = _HEADER.unpack_from(buf, pos)
    (
        _base_offset,
        batch_length,
        _epoch,
        magic,
        crc,
        attributes,
        last_offset_delta,
        _base_ts,
        _max_ts,
        _pid,
        _pepoch,
        _seq,
        count,
    ) = fields
    if magic < 0 or magic > CURRENT_MAGIC:
        raise CorruptRecordError(f"invalid magic {magic} found in record batch")
    if magic != CURRENT_MAGIC:
        raise InvalidRecordError(f"record batch magic {magic} is not supported (only 2)")
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"record batch length {batch_length} is smaller than the minimum {MIN_BATCH_LENGTH}"
        )
    size = batch_length + LOG_OVERHEAD
    if size > available:
        raise CorruptRecordError(
            f"record batch length {batch_length} runs past the {available} bytes available"
        )
    if crc32c(memoryview(buf)[pos + ATTRIBUTES : pos + size]) != crc:
        raise CorruptRecordError("record batch CRC32C does not match its contents")
    codec = attributes & COMPRESSION_MASK
    if codec > 4:
        raise UnsupportedCompressionError(f"unknown compression codec {codec}")
    payload = size - HEADER_SIZE
    if count < 1:
        raise InvalidRecordError(f"record batch has an invalid record count {count}")
    limit = payload // MIN_RECORD_SIZE
    if codec:
        limit *= MAX_COMPRESSION_RATIO
    if count > limit:
        raise InvalidRecordError(
            f"record count {count} is impossible for a {payload}-byte record payload"
        )
    if last_offset_delta != count - 1 and not (compacted and last_offset_delta > count - 1):
        raise InvalidRecordError(
            f"last offset delta {last_offset_delta} does not match record count {count}"
        )
    return CheckedBatch(buf, pos, fields)


def validate_records(
    buf: bytes | bytearray | memoryview,
    *,
    allow_partial_tail: bool = False,
    compacted: bool = False,
) -> list[CheckedBatch]:
    """Validate every batch in a records blob (one produce partition, one fetch answer).

    With `allow_partial_tail`, a trailing incomplete batch (as a fetch may return) is
    dropped instead of refused; the caller sees it as `sum(b.size) < len(buf)`.
    `compacted`: see `validate_batch`.
    """
    views: list[CheckedBatch] = []
    pos = 0
    end = len(buf)
    if end == 0:
        raise CorruptRecordError("records are empty")
    while pos < end:
        if allow_partial_tail and _is_partial(buf, pos, end):
            break
        view = validate_batch(buf, pos, end, compacted=compacted)
        views.append(view)
        pos += view.fields[1] + LOG_OVERHEAD  # batchLength
    return views


def _is_partial(buf: bytes | bytearray | memoryview, pos: int, end: int) -> bool:
    if end - pos < LOG_OVERHEAD:
        return True
    batch_length = _I32.unpack_from(buf, pos + BATCH_LENGTH)[0]
    return batch_length >= MIN_BATCH_LENGTH and pos + LOG_OVERHEAD + batch_length > end


def iter_batches(buf: bytes | bytearray | memoryview) -> Iterator[RecordBatchView]:
    """Walk complete batches by their length fields, without CRC checks.

    Stops quietly at a partial trailing batch; used on trusted bytes (our own log).
    """
    pos = 0
    end = len(buf)
    while end - pos >= HEADER_SIZE:
        size = _I32.unpack_from(buf, pos + BATCH_LENGTH)[0] + LOG_OVERHEAD
        if size < HEADER_SIZE or pos + size > end:
            return
        yield RecordBatchView(buf, pos)
        pos += size


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign offsets: baseOffset is outside the CRC, so this is a plain patch."""
    _I64.pack_into(buf, pos + BASE_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """Stamp the leader epoch: also outside the CRC."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH, epoch)


def set_log_append_time(
    buf: bytearray | memoryview,
    pos: int,
    timestamp_ms: int,
    payload: bytes | bytearray | memoryview | None = None,
) -> None:
    """Switch a batch to LogAppendTime with `timestamp_ms` as its max timestamp.

    Both fields are inside the CRC, so the CRC is recomputed (in C, per batch). When
    `buf` holds only the 61-byte header, `payload` is the rest of the batch.
    """
    attributes = _I16.unpack_from(buf, pos + ATTRIBUTES)[0] | TIMESTAMP_TYPE_MASK
    _I16.pack_into(buf, pos + ATTRIBUTES, attributes)
    _I64.pack_into(buf, pos + MAX_TIMESTAMP, timestamp_ms)
    mv = memoryview(buf)
    if payload is None:
        size = _I32.unpack_from(buf, pos + BATCH_LENGTH)[0] + LOG_OVERHEAD
        crc = crc32c(mv[pos + ATTRIBUTES : pos + size])
    else:
        crc = crc32c(payload, crc32c(mv[pos + ATTRIBUTES : pos + HEADER_SIZE]))
    _U32.pack_into(buf, pos + CRC, crc)


def header_fields(buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple:
    """All 13 header fields at once (baseOffset .. recordCount): one struct call."""
    return _HEADER.unpack_from(buf, pos)

