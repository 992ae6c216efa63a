"""The oracle for the Arrow records decoder (spark_jobs.arrow_records): the rows and next
offset `decode_records` must give, computed with storage.records.decode_batch (the
per-record reference decoder); the decoder run in each of its stepping modes (pure
Python, C walk, both in lockstep); and record batches to feed it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

import pyarrow as pa
from crc32c import crc32c

from spark_jobs import arrow_records
from spark_jobs.arrow_records import arrow_schema, decode_records
from storage.record_batch import (
    ATTRIBUTES,
    BATCH_LENGTH,
    CRC,
    LOG_OVERHEAD,
    RecordBatchView,
)
from storage.records import (
    Record,
    decode_batch,
)

TOPIC, PARTITION = "events", 3
FAR = 1 << 62
Row = tuple


def expected(
    batches: Sequence[bytes], start: int, end: int, include_headers: bool
) -> tuple[list[Row], int]:
    """Rows and next offset per decode_records' contract, from decode_batch."""
    rows: list[Row] = []
    next_offset = start
    for data in batches:
        view = RecordBatchView(data)
        if view.base_offset >= end:
            break
        next_offset = max(next_offset, view.next_offset)
        if view.is_control:
            continue
        for rec in decode_batch(view).records:
            if start <= rec.offset < end:
                row = (
                    rec.key,
                    rec.value,
                    TOPIC,
                    PARTITION,
                    rec.offset,
                    rec.timestamp * 1000,
                    int(view.is_log_append_time),
                )
                rows.append(row + ((list(rec.headers),) if include_headers else ()))
    return rows, next_offset


def actual(
    records: bytes, start: int = 0, end: int = FAR, include_headers: bool = False
) -> tuple[list[Row] | None, int]:
    batch, next_offset = decode_records(records, TOPIC, PARTITION, start, end, include_headers)
    if batch is None:
        return None, next_offset
    batch.validate(full=True)
    assert batch.schema == arrow_schema(include_headers)
    # Timestamps as integers: datetime cannot hold every int64 microsecond.
    cols = {
        name: (col.cast(pa.int64()) if name == "timestamp" else col).to_pylist()
        for name, col in zip(batch.schema.names, batch.columns, strict=True)
    }
    if include_headers:
        cols["headers"] = [[(h["key"], h["value"]) for h in hs] for hs in cols["headers"]]
    return list(zip(*cols.values(), strict=True)), next_offset


def check(
    batches: Sequence[bytes],
    tail: bytes = b"",
    start: int = 0,
    end: int = FAR,
    include_headers: bool = False,
) -> list[Row]:
    """decode_records == the oracle, whichever way record boundaries are found."""
    rows, next_offset = expected(batches, start, end, include_headers)
    data = b"".join(batches) + tail
    for mode in MODES:
        with stepping(mode):
            got, got_next = actual(data, start, end, include_headers)
        assert (got or [], got_next) == (rows, next_offset), mode
        assert got is None or got, "an empty batch must be None"
    return rows


# The ways record boundaries are found: the C walk (where built); without it, numpy
# lockstep or the Python loop as the rows per batch choose, or either one forced.
C_WALK = arrow_records._c_record_heads is not None


MODES = ("no c", "python", "lockstep") + (("c",) if C_WALK else ())


@contextmanager
def stepping(mode: str) -> Iterator[None]:
    c_walk = arrow_records._c_record_heads if mode == "c" else None
    ratio = {"python": FAR, "lockstep": 0}.get(mode, arrow_records._LOCKSTEP_RATIO)
    with (
        mock.patch.object(arrow_records, "_c_record_heads", c_walk),
        mock.patch.object(arrow_records, "_LOCKSTEP_RATIO", ratio),
    ):
        yield


def recs(n: int, ts: int = 1_700_000_000_000, **kw: object) -> list[Record]:
    return [Record(value=b"v%d" % i, key=b"k%d" % i, timestamp=ts + i, **kw) for i in range(n)]


def reseal(batch: bytes | bytearray) -> bytes:
    """Recompute the length and CRC after editing a batch, so only the record checks
    can object."""
    out = bytearray(batch)
    struct.pack_into(">i", out, BATCH_LENGTH, len(out) - LOG_OVERHEAD)
    struct.pack_into(">I", out, CRC, crc32c(bytes(out[ATTRIBUTES:])))
    return bytes(out)
