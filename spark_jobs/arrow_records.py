"""Fetched Kafka record batches (magic v2) to pyarrow RecordBatches, vectorized.

Executors decode every record of a topic here, so the cost per record is what counts.
Python touches each *batch* (header, CRC32C, decompression) but, in the common case,
never each record: the record bytes of all batches are joined into one buffer; record
boundaries come from the C walk in spark_jobs._record_walk where it is built, else from
stepping every batch's records side by side with numpy (a plain Python loop when there
are only a few, big batches); every field is then decoded for all records at once, and
key/value columns are gathered by Arrow's C++ cast from a binary_view array built over
that buffer. The record layout and the correctness oracle
are `storage.records` (`decode_batch`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from common.varint import MalformedError, read_varint
from spark_jobs.aborted import ABORT, AbortedTransactions, control_type
from storage.compression import decompress
from storage.record_batch import (
    ATTRIBUTES,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CURRENT_MAGIC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MIN_BATCH_LENGTH,
    MIN_RECORD_SIZE,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
)

try:  # the record-length walk in C (setup.py builds it where a compiler is available)
    from spark_jobs._record_walk import record_heads as _c_record_heads
except ImportError:  # pragma: no cover - numpy lockstep or the Python loop instead
    _c_record_heads = None

_HEADER: Final = struct.Struct(">qiibIhiqqqhii")  # storage.record_batch's 61-byte layout
_PREFIX: Final = struct.Struct(">qi")  # baseOffset, batchLength
_PAD: Final = bytes(16)  # after the data, so fixed-width reads near its end stay inside
# Record boundaries, without the C walk: all batches stepped in lockstep with numpy when
# the rows number more than this many times the longest batch's; else a Python loop.
_LOCKSTEP_RATIO = 16
_TS_TYPE: Final = pa.timestamp("us", tz="UTC")
_HEADER_STRUCT: Final = pa.struct([("key", pa.string()), ("value", pa.binary())])
_HEADERS_TYPE: Final = pa.list_(_HEADER_STRUCT)

_ZIGZAG1: Final = np.array([(b >> 1) ^ -(b & 1) for b in range(256)], np.int64)
# Bytes a record-length varint plus its record take, by the varint's first byte (Python
# loop); for a 2-byte varint add (second byte << 6).
_STEP1: Final = [1 + (b >> 1) if b < 0x80 else 2 + ((b & 0x7F) >> 1) for b in range(256)]
# The same by the varint's first two bytes (little-endian uint16) for the numpy stepper;
# 0 marks a varint of 3+ bytes, which stalls the step so the check sends it to Python.
_w = np.arange(1 << 16, dtype=np.int32)
_STEP16: Final = np.where(
    (_w & 0x80) == 0,
    1 + ((_w & 0xFF) >> 1),
    np.where((_w & 0x8000) == 0, 2 + ((_w & 0x7F) >> 1) + ((_w >> 8) << 6), 0),
).astype(np.int32)
# Masks keeping the valid bytes of a binary_view's 12 inline bytes (3 little-endian int32
# words), by min(length, 13); 13 means "long": keep only the 4-byte prefix.
_kept = np.minimum(np.arange(14), 12)
_kept[13] = 4
_MASKS: Final = np.array(
    [((1 << 8 * np.clip(_kept - 4 * j, 0, 4)) - 1).astype(np.uint32) for j in range(3)]
).view(np.int32)
del _w, _kept


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Spark Kafka source's columns, in its order, all nullable."""
    fields = [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", _TS_TYPE),
        pa.field("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(pa.field("headers", _HEADERS_TYPE))
    return pa.schema(fields)


_SCHEMAS: Final = {flag: arrow_schema(flag) for flag in (False, True)}


class RecordsDecodeError(ValueError):
    """A corrupt batch: bad CRC, bad lengths, unknown magic, undecompressable payload."""


class _BadRecord(Exception):
    """Inside the vectorized decode: args are (record index in the fetch, reason)."""


def _corrupt(topic: str, partition: int, base_offset: int, why: str) -> RecordsDecodeError:
    return RecordsDecodeError(
        f"corrupt record batch at offset {base_offset} in {topic}-{partition}: {why}"
    )


def decode_records(
    records: bytes,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
    aborted: Iterable[tuple[int, int]] | None = None,
) -> tuple[pa.RecordBatch | None, int]:
    """Rows of one Fetch partition's `records` with start <= offset < end, and the offset
    to fetch next (last offset + 1 of the last complete batch seen, at least `start`).
    A truncated trailing batch is ignored; decoding stops at a batch based at >= end.
    Control batches (transaction markers) are never rows. `aborted` (read_committed:
    the answer's (producer id, first offset) list) skips aborted transactions' batches;
    the offsets they and the markers take are gaps, not data loss."""
    txns = AbortedTransactions(aborted) if aborted is not None else None
    mv = memoryview(records or b"")  # (a Fetch answer's records may be null)
    size = len(mv)
    pos = 0
    next_offset = start
    chunks: list[bytes | memoryview] = []
    # Per batch with rows: record count, base offset, base timestamp, max timestamp,
    # log-append-time flag.
    meta: list[tuple[int, int, int, int, bool]] = []
    while size - pos >= LOG_OVERHEAD:
        base, batch_length = _PREFIX.unpack_from(mv, pos)
        if base >= end:
            break
        if batch_length < MIN_BATCH_LENGTH:
            raise _corrupt(topic, partition, base, f"batch length {batch_length} is too small")
        batch_end = pos + batch_length + LOG_OVERHEAD
        if batch_end > size:
            break  # the partial batch a fetch may end with
        _, _, _, magic, crc, attrs, last_delta, base_ts, max_ts, producer, _, _, count = (
            _HEADER.unpack_from(mv, pos)
        )
        if magic != CURRENT_MAGIC:
            raise _corrupt(topic, partition, base, f"magic {magic} is not supported (only 2)")
        if crc32c(mv[pos + ATTRIBUTES : batch_end]) != crc:
            raise _corrupt(topic, partition, base, "CRC32C does not match its contents")
        if count < 0 or last_delta < 0:
            why = f"record count {count}, last offset delta {last_delta}"
            raise _corrupt(topic, partition, base, why)
        payload: bytes | memoryview = mv[pos + HEADER_SIZE : batch_end]
        pos = batch_end
        next_offset = max(next_offset, base + last_delta + 1)
        if txns is not None and producer >= 0:  # every batch in order, even those < start
            abort = bool(attrs & CONTROL_MASK) and _control_type(payload, attrs) == ABORT
            if txns.skip(producer, base + last_delta, bool(attrs & TRANSACTIONAL_MASK), abort):
                continue
        if attrs & CONTROL_MASK or base + last_delta < start:
            continue  # transaction markers are not rows; batches below start were read before
        if attrs & COMPRESSION_MASK:
            try:
                payload = decompress(attrs & COMPRESSION_MASK, payload)
            except ValueError as exc:
                raise _corrupt(topic, partition, base, str(exc)) from exc
        if count * MIN_RECORD_SIZE > len(payload) or (count == 0 and len(payload)):
            raise _corrupt(topic, partition, base, f"{count} records in {len(payload)} bytes")
        if count:
            chunks.append(payload)
            meta.append((count, base, base_ts, max_ts, bool(attrs & TIMESTAMP_TYPE_MASK)))
    if not meta:
        return None, next_offset
    counts = np.array([m[0] for m in meta], np.int64)
    starts = np.cumsum([0] + [len(c) for c in chunks[:-1]], dtype=np.int64)
    # One copy of the record bytes; _PAD lets fixed-width reads run past the end.
    data = b"".join([*chunks, _PAD])
    if len(data) >= 1 << 31:  # binary_view offsets are int32 (fetches are MiBs, not GiBs)
        raise ValueError(f"{len(data)} bytes of records in one fetch: over 2 GiB")
    try:
        columns = _decode(data, starts, counts, meta, start, end, include_headers)
    except _BadRecord as bad:
        index, why = bad.args
        batch = int(np.searchsorted(np.cumsum(counts), index, side="right"))
        raise _corrupt(topic, partition, meta[batch][1], why) from None
    if columns is None:
        return None, next_offset
    n = len(columns[0])
    columns[2:2] = [
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=_SCHEMAS[include_headers]), next_offset


def _control_type(payload: bytes | memoryview, attrs: int) -> int | None:
    if attrs & COMPRESSION_MASK:
        try:
            payload = decompress(attrs & COMPRESSION_MASK, payload)
        except ValueError:
            return None
    return control_type(payload)


def _decode(
    data: bytes,
    region_starts: np.ndarray,
    counts: np.ndarray,
    meta: list[tuple[int, int, int, int, bool]],
    start: int,
    end: int,
    include_headers: bool,
) -> list[pa.Array] | None:
    """Columns key, value, offset, timestamp, timestampType[, headers] of the records in
    [start, end) of `data`: the batches' record regions back to back, then _PAD."""
    u8 = np.frombuffer(data, np.uint8)
    data_end = len(data) - len(_PAD)
    # Record boundaries, checked by _bodies whichever way they were found.
    heads = bodies = None
    if _c_record_heads is not None:
        heads = np.empty(int(counts.sum()), np.int64)
        try:
            _c_record_heads(data, region_starts, counts, heads)
        except ValueError:  # corrupt lengths: the Python loop finds and names the batch
            heads = None
    elif int(counts.sum()) > _LOCKSTEP_RATIO * int(counts.max()):
        # A lockstep step costs a few numpy calls (~2 us here), as much as ~15 records of
        # the Python loop (~130 ns each), so it pays when there are many batches. It does
        # not follow 3+-byte record lengths (bodies >= 8 KiB): those fail _bodies' check
        # and are redone in Python.
        try:
            heads = _heads_numpy(data, region_starts, counts)
            bodies = _bodies(u8, heads, data_end)
        except (_BadRecord, IndexError):
            heads = None
    if heads is None:
        heads = _heads_python(data, region_starts, counts)
    body_start, body_end = bodies or _bodies(u8, heads, data_end)

    p = body_start + 1  # the record attributes byte: unused
    ts_delta, n = _varint(u8, p, 10)
    p = p + n
    offset_delta, n = _varint(u8, p, 5)
    p = p + n
    key_len, n = _varint(u8, p, 5)
    key_start = p + n
    p = key_start + (key_len if key_len.min() >= 0 else np.maximum(key_len, 0))
    value_len, n = _varint(u8, p, 5)
    value_start = p + n
    p = value_start + (value_len if value_len.min() >= 0 else np.maximum(value_len, 0))
    header_count, n = _varint(u8, p, 5)
    p = p + n
    headers = _headers(u8, p, body_end, header_count) if header_count.any() else None
    if headers is None:
        wrong = np.flatnonzero(p != body_end)
        if wrong.size:
            raise _BadRecord(int(wrong[0]), "record length does not match its fields")

    base_offset, base_ts, max_ts, append_time = (
        np.repeat(np.array([m[i] for m in meta], np.int64), counts) for i in range(1, 5)
    )
    # CreateTime: base + delta per record; LogAppendTime: the batch's max for every record.
    stamps = base_ts + ts_delta
    if append_time.any():
        stamps = np.where(append_time != 0, max_ts, stamps)
    fields = [key_start, key_len, value_start, value_len, base_offset + offset_delta, stamps]
    keep = (fields[4] >= start) & (fields[4] < end)
    if not keep.all():  # the fetch started inside a batch, or `end` cuts one
        if not keep.any():
            return None
        if headers is not None:
            slots = np.repeat(keep, header_count)
            headers = (*(a[slots] for a in headers[:4]), header_count[keep])
        fields = [a[keep] for a in (*fields, append_time)]
        append_time = fields.pop()
    key_start, key_len, value_start, value_len, offsets, stamps = fields
    rows = len(offsets)
    buf = pa.py_buffer(data)
    views = np.ndarray((len(data) - 11,), dtype="V12", buffer=data, strides=(1,))
    columns = [
        _binary(buf, views, key_start, key_len, pa.binary()),
        _binary(buf, views, value_start, value_len, pa.binary()),
        pa.array(offsets, pa.int64()),
        pa.Array.from_buffers(_TS_TYPE, rows, [None, pa.py_buffer(stamps * 1000)]),
        pa.array(append_time.astype(np.int32), pa.int32()),
    ]
    if include_headers:
        columns.append(_headers_column(data, buf, views, rows, headers))
    return columns


def _heads_python(data: bytes, region_starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Where each record (its length varint) starts: one Python step per record."""
    heads: list[int] = []
    append = heads.append
    step = _STEP1
    first = 0
    for pos, count in zip(region_starts.tolist(), counts.tolist(), strict=True):
        try:
            for _ in range(count):
                append(pos)
                b = data[pos]
                if b < 0x80:
                    pos += step[b]
                elif (b1 := data[pos + 1]) < 0x80:
                    pos += step[b] + (b1 << 6)
                else:
                    length, pos = read_varint(data, pos)
                    pos += max(length, 0)
        except (IndexError, MalformedError):
            raise _BadRecord(first, "record lengths run past the batch") from None
        first += count
    return np.array(heads, np.int64)


def _heads_numpy(data: bytes, region_starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """As _heads_python, one numpy step per record index for all batches at once;
    unchecked: _bodies verifies the result."""
    pairs = np.ndarray((len(data) - 1,), dtype="<u2", buffer=data, strides=(1,))
    step = _STEP16.take
    longest = int(counts.max())
    pos = region_starts.copy()
    heads = np.empty((longest, len(counts)), np.int64)
    for i in range(longest):  # an IndexError (garbage lengths) sends the caller to Python
        heads[i] = pos
        pos += step(pairs[pos])
    heads = heads.T
    if counts.min() == longest:
        return heads.ravel()
    return heads[np.arange(longest) < counts[:, None]]


def _bodies(u8: np.ndarray, heads: np.ndarray, data_end: int) -> tuple[np.ndarray, np.ndarray]:
    """Each record body's [start, end), checked: a record ends where the next begins, and
    a batch's last one where its region ends (the regions are back to back)."""
    length, n = _varint(u8, heads, 5)
    body_start = heads + n
    body_end = np.empty_like(heads)
    body_end[:-1] = heads[1:]
    body_end[-1] = data_end
    wrong = np.flatnonzero(body_start + length != body_end)
    if wrong.size:
        raise _BadRecord(int(wrong[0]), "record length does not match the batch")
    return body_start, body_end


def _varint(u8: np.ndarray, pos: np.ndarray, max_bytes: int) -> tuple[np.ndarray, np.ndarray | int]:
    """Zigzag varints at `pos` (clipped into u8): (values, sizes in bytes)."""
    b0 = u8.take(pos, mode="clip")
    if b0.max() < 0x80:  # every value in one byte: the usual case for most fields
        return _ZIGZAG1[b0], 1
    cont = (b0 >> 7).astype(np.int64)
    raw = (b0 & 0x7F).astype(np.uint64)
    b1 = u8.take(pos + 1, mode="clip")
    raw |= ((b1 & 0x7F) * cont).astype(np.uint64) << np.uint64(7)
    size = 1 + cont
    more = np.flatnonzero((b1 >> 7) & cont)
    shift = 14
    while more.size:  # 3+ byte varints: few (large lengths, timestamp deltas)
        if shift >= 7 * max_bytes:
            raise _BadRecord(int(more[0]), f"varint is longer than {max_bytes} bytes")
        b = u8.take(pos[more] + size[more], mode="clip")
        raw[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[more] += 1
        more = more[b >= 0x80]
        shift += 7
    return (raw >> np.uint64(1)).view(np.int64) ^ -(raw & np.uint64(1)).view(np.int64), size


def _headers(
    u8: np.ndarray, pos: np.ndarray, body_end: np.ndarray, count: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Walk the headers of every record at once, header index by header index; checks
    them; returns (key start, key length, value start, value length) per header in
    record order, and the per-record counts."""
    if count.min() < 0 or (count * 2 > body_end - pos).any():
        bad = np.flatnonzero((count < 0) | (count * 2 > body_end - pos))[0]
        raise _BadRecord(int(bad), f"record has an invalid header count {count[bad]}")
    wrong = np.flatnonzero((count == 0) & (pos != body_end))
    if wrong.size:
        raise _BadRecord(int(wrong[0]), "record length does not match its fields")
    total = int(count.sum())
    first_slot = np.cumsum(count) - count
    out = [np.empty(total, np.int64) for _ in range(4)]
    rec = np.flatnonzero(count)
    cur = pos[rec]
    for j in range(int(count.max())):
        slot = first_slot[rec] + j
        key_len, n = _varint(u8, cur, 5)
        if key_len.min() < 0:
            raise _BadRecord(int(rec[key_len.argmin()]), "record header key is null")
        out[0][slot], out[1][slot] = cur + n, key_len
        cur = cur + n + key_len
        value_len, n = _varint(u8, cur, 5)
        out[2][slot], out[3][slot] = cur + n, value_len
        cur = cur + n + np.maximum(value_len, 0)
        done = count[rec] == j + 1
        wrong = np.flatnonzero(np.where(done, cur != body_end[rec], cur > body_end[rec]))
        if wrong.size:
            raise _BadRecord(int(rec[wrong[0]]), "record length does not match its headers")
        rec, cur = rec[~done], cur[~done]
    return (*out, count)


def _binary(
    buf: pa.Buffer, views: np.ndarray, start: np.ndarray, length: np.ndarray, typ: pa.DataType
) -> pa.Array:
    """A binary (or string) column of buf[start:start+length] (null where length < 0),
    built as binary_view structs over `buf` and gathered by Arrow's cast."""
    rows = len(start)
    null = length < 0
    has_null = bool(null.any())
    if has_null:
        length = np.where(null, 0, length)
    view = np.empty((rows, 4), np.int32)
    view[:, 0] = length
    inline = views[start].view(np.int32).reshape(rows, 3)
    kind = np.minimum(length, 13)
    lo, hi = int(kind.min()), int(kind.max())
    if lo == hi:
        view[:, 1:] = inline & _MASKS[:, lo]
    else:
        for j in range(3):
            view[:, 1 + j] = inline[:, j] & _MASKS[j][kind]
    if lo == 13:  # long values: buffer index 0 (from the mask), then their offset
        view[:, 3] = start
    elif hi == 13:
        np.copyto(view[:, 3], start, where=kind == 13, casting="unsafe")
    validity = pa.py_buffer(np.packbits(~null, bitorder="little")) if has_null else None
    return pa.Array.from_buffers(
        pa.binary_view(), rows, [validity, pa.py_buffer(view), buf]
    ).cast(typ)


def _headers_column(
    data: bytes, buf: pa.Buffer, views: np.ndarray, rows: int, headers: tuple | None
) -> pa.Array:
    """list<struct<key string, value binary>>; records without headers get []."""
    offsets = np.zeros(rows + 1, np.int32)
    if headers is None or not len(headers[0]):  # (or only rows without headers kept)
        items = pa.array([], _HEADER_STRUCT)
    else:
        key_start, key_len, value_start, value_len, count = headers
        np.cumsum(count, out=offsets[1:])
        try:
            keys = _binary(buf, views, key_start, key_len, pa.string())
        except pa.ArrowInvalid:  # not UTF-8: decode as storage.records does, with U+FFFD
            spans = zip(key_start.tolist(), key_len.tolist(), strict=True)
            keys = pa.array([data[s : s + n].decode("utf-8", "replace") for s, n in spans])
        values = _binary(buf, views, value_start, value_len, pa.binary())
        items = pa.StructArray.from_arrays([keys, values], fields=list(_HEADER_STRUCT))
    return pa.ListArray.from_arrays(pa.array(offsets), items, type=_HEADERS_TYPE)
