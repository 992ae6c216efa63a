"""Records inside a v2 batch: build batches and decode them.

For tools, tests, timestamp lookups and readers. The produce, fetch and replication
paths never come here: they work on whole batches (`storage.record_batch`).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from crc32c import crc32c

from common.varint import MalformedError, read_varint, write_varint
from storage.compression import Compression, compress, decompress
from storage.record_batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    CorruptRecordError,
    RecordBatchView,
)

_HEADER_NO_CRC = struct.Struct(">qiib")  # baseOffset, batchLength, epoch, magic
_AFTER_CRC = struct.Struct(">hiqqqhii")  # attributes .. recordCount


@dataclass(frozen=True, slots=True)
class Record:
    """One record. `timestamp` is absolute ms; `offset` is set when read from a batch."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    offset: int = -1


@dataclass(frozen=True, slots=True)
class DecodedBatch:
    base_offset: int
    partition_leader_epoch: int
    log_append_time: bool
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    is_transactional: bool
    is_control: bool
    records: list[Record] = field(default_factory=list)


def _write_bytes(out: bytearray, data: bytes | None) -> None:
    if data is None:
        write_varint(out, -1)
    else:
        write_varint(out, len(data))
        out += data


def build_batch(
    records: Sequence[Record],
    *,
    base_offset: int = 0,
    compression: Compression | int = Compression.NONE,
    log_append_time: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    partition_leader_epoch: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    now_ms: int | None = None,
) -> bytes:
    """Encode `records` as one magic-2 batch (records without a timestamp get `now_ms`)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    if now_ms is None:
        now_ms = int(time.time() * 1000)
    stamps = [now_ms if r.timestamp is None else r.timestamp for r in records]
    attributes = int(compression)
    if log_append_time:
        attributes |= TIMESTAMP_TYPE_MASK
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    return _encode_batch(
        records,
        stamps,
        range(len(records)),
        base_offset=base_offset,
        last_offset_delta=len(records) - 1,
        base_timestamp=stamps[0],
        max_timestamp=max(stamps),
        attributes=attributes,
        partition_leader_epoch=partition_leader_epoch,
        producer=(producer_id, producer_epoch, base_sequence),
    )


def rebuild_batch(
    original: RecordBatchView, retained: Sequence[Record], delete_horizon_ms: int | None
) -> bytes:
    """The log cleaner's copy of `original` holding only `retained` (decoded from it).

    As Kafka's MemoryRecords.filterTo: the base and last offsets, producer id, epoch and
    base sequence, partition leader epoch, attributes and codec stay; records keep their
    offsets and timestamps. With a delete horizon (KIP-534) the batch is flagged and its
    base timestamp field holds the horizon; record timestamps stay right because they are
    stored as deltas from that field.
    """
    if not retained:
        raise ValueError("a rebuilt batch needs at least one record")
    base = original.base_offset
    attributes = original.attributes & ~DELETE_HORIZON_MASK
    if original.is_log_append_time:
        stamps = [original.max_timestamp] * len(retained)
    else:
        stamps = [r.timestamp if r.timestamp is not None else -1 for r in retained]
    base_ts = stamps[0]
    if delete_horizon_ms is not None:
        attributes |= DELETE_HORIZON_MASK
        base_ts = delete_horizon_ms
    return _encode_batch(
        retained,
        stamps,
        [r.offset - base for r in retained],
        base_offset=base,
        last_offset_delta=original.last_offset_delta,
        base_timestamp=base_ts,
        max_timestamp=original.max_timestamp if original.is_log_append_time else max(stamps),
        attributes=attributes,
        partition_leader_epoch=original.partition_leader_epoch,
        producer=(original.producer_id, original.producer_epoch, original.base_sequence),
    )


def _encode_batch(
    records: Sequence[Record],
    stamps: Sequence[int],
    offset_deltas: Iterable[int],
    *,
    base_offset: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    attributes: int,
    partition_leader_epoch: int,
    producer: tuple[int, int, int],
) -> bytes:
    body = bytearray()
    for rec, ts, delta in zip(records, stamps, offset_deltas, strict=True):
        rec_out = bytearray()
        rec_out.append(0)  # record attributes: unused
        write_varint(rec_out, ts - base_timestamp)
        write_varint(rec_out, delta)
        _write_bytes(rec_out, rec.key)
        _write_bytes(rec_out, rec.value)
        write_varint(rec_out, len(rec.headers))
        for hkey, hval in rec.headers:
            _write_bytes(rec_out, hkey.encode())
            _write_bytes(rec_out, hval)
        write_varint(body, len(rec_out))
        body += rec_out
    payload = compress(attributes & COMPRESSION_MASK, bytes(body))
    after_crc = _AFTER_CRC.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        *producer,
        len(records),
    )
    crc = crc32c(after_crc + payload)
    batch_length = HEADER_SIZE - LOG_OVERHEAD + len(payload)
    head = _HEADER_NO_CRC.pack(base_offset, batch_length, partition_leader_epoch, 2)
    return head + struct.pack(">I", crc) + after_crc + payload


def decode_batch(view: RecordBatchView) -> DecodedBatch:
    """Decode every record of one (already validated) batch."""
    mv = view.memory()
    payload = mv[HEADER_SIZE:]
    if view.compression:
        try:
            payload = memoryview(decompress(view.compression, payload))
        except ValueError as exc:
            raise CorruptRecordError(str(exc)) from exc
    base_offset = view.base_offset
    base_ts = view.base_timestamp
    append_time = view.is_log_append_time
    max_ts = view.max_timestamp
    try:
        records = _decode_records(
            payload, view.record_count, base_offset, base_ts, max_ts, append_time
        )
    except MalformedError as exc:  # a varint past the record, or too long
        raise CorruptRecordError(str(exc)) from exc
    return DecodedBatch(
        base_offset=base_offset,
        partition_leader_epoch=view.partition_leader_epoch,
        log_append_time=append_time,
        max_timestamp=max_ts,
        producer_id=view.producer_id,
        producer_epoch=view.producer_epoch,
        base_sequence=view.base_sequence,
        is_transactional=view.is_transactional,
        is_control=view.is_control,
        records=records,
    )


def _decode_records(
    payload: memoryview,
    count: int,
    base_offset: int,
    base_ts: int,
    max_ts: int,
    append_time: bool,
) -> list[Record]:
    """The records of a batch payload; varint errors are the caller's to map."""
    records: list[Record] = []
    pos = 0
    for _ in range(count):
        length, pos = read_varint(payload, pos)
        end = pos + length
        if length < 0 or end > len(payload):
            raise CorruptRecordError("record length runs past the batch")
        pos += 1  # attributes
        ts_delta, pos = read_varint(payload, pos)
        off_delta, pos = read_varint(payload, pos)
        key, pos = _read_bytes(payload, pos, end)
        value, pos = _read_bytes(payload, pos, end)
        n_headers, pos = read_varint(payload, pos)
        if n_headers < 0 or n_headers > length:
            raise CorruptRecordError(f"record has an invalid header count {n_headers}")
        headers = []
        for _h in range(n_headers):
            hkey, pos = _read_bytes(payload, pos, end)
            hval, pos = _read_bytes(payload, pos, end)
            if hkey is None:
                raise CorruptRecordError("record header key is null")
            headers.append((hkey.decode("utf-8", "replace"), hval))
        if pos != end:
            raise CorruptRecordError("record length does not match its fields")
        records.append(
            Record(
                value=value,
                key=key,
                headers=tuple(headers),
                timestamp=max_ts if append_time else base_ts + ts_delta,
                offset=base_offset + off_delta,
            )
        )
    if pos != len(payload):
        raise CorruptRecordError("bytes left over after the batch's last record")
    return records


def _read_bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    n, pos = read_varint(buf, pos)
    if n < 0:
        return None, pos
    if pos + n > end:
        raise CorruptRecordError("record field runs past the record")
    return bytes(buf[pos : pos + n]), pos + n
