"""spark_jobs.arrow_records: the vectorized Fetch-records-to-Arrow decoder, checked
against storage.records.decode_batch (the per-record reference decoder)."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spark_jobs import arrow_records
from spark_jobs.arrow_records import RecordsDecodeError, arrow_schema, decode_records
from storage.compression import Compression
from storage.record_batch import (
    ATTRIBUTES,
    BATCH_LENGTH,
    CRC,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    RECORDS_COUNT,
    RecordBatchView,
)
from storage.records import (
    CorruptRecordError,
    Record,
    build_batch,
    decode_batch,
    rebuild_batch,
    write_varint,
)

TOPIC, PARTITION = "events", 3
FAR = 1 << 62
Row = tuple


# -- the oracle -------------------------------------------------------------------------


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


# -- property: equivalence to the reference decoder -------------------------------------

_BOUNDARY = st.integers(0, 16) | st.integers(8100, 8300)  # inline <= 12 < 13; 3-byte lengths
_BYTES = (
    st.none()
    | st.binary(max_size=20)
    | st.builds(lambda n, b: bytes([b]) * n, _BOUNDARY, st.integers(0, 255))
)
_RECORD = st.builds(
    Record,
    value=_BYTES,
    key=_BYTES,
    headers=st.lists(
        st.tuples(st.text(max_size=6), st.none() | st.binary(max_size=14)), max_size=3
    ).map(tuple),
    timestamp=st.integers(-(2**50), 2**50),  # deltas of any sign, varlongs up to 8 bytes
)
_BATCH = st.tuples(
    st.lists(_RECORD, min_size=1, max_size=6),
    st.sampled_from(list(Compression)),
    st.booleans(),  # log append time
    st.booleans() | st.just(False),  # control (less often)
    st.integers(0, 3),  # offset gap before the batch
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(_BATCH, min_size=1, max_size=7),
    cut=st.tuples(st.integers(0, 60), st.integers(0, 60)),
    tail_len=st.integers(0, 200),
    include_headers=st.booleans(),
)
def test_matches_reference_decoder(
    specs: list, cut: tuple[int, int], tail_len: int, include_headers: bool
) -> None:
    batches, base = [], 5
    for records, codec, append_time, control, gap in specs:
        base += gap
        batches.append(
            build_batch(
                records,
                base_offset=base,
                compression=codec,
                log_append_time=append_time,
                is_control=control,
            )
        )
        base += len(records)
    tail = batches[0][: min(tail_len, len(batches[0]) - 1)]  # a batch cut short
    start, end = min(cut) + 3, max(cut) + 3  # may be empty
    check(batches, tail, start, end, include_headers)
    check(batches, tail, 0, FAR, include_headers)


@settings(max_examples=150, deadline=None)
@given(
    records=st.lists(_RECORD, min_size=1, max_size=5),
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=3),
)
def test_corrupt_records_with_a_valid_crc_raise_or_match(
    records: list[Record], edits: list[tuple[int, int]]
) -> None:
    """Bytes edited inside the records (CRC recomputed): decode_records either raises
    RecordsDecodeError or returns exactly what the reference decodes; never crashes."""
    data = bytearray(build_batch(records, base_offset=10))
    for at, byte in edits:
        data[HEADER_SIZE + at % (len(data) - HEADER_SIZE)] = byte
    data = reseal(data)
    try:
        want = expected([data], 0, FAR, True)
    except CorruptRecordError:
        want = None
    try:
        rows, next_offset = actual(data, 0, FAR, True)
    except RecordsDecodeError as exc:
        # Stricter than the reference only on over-long varints (as Kafka is).
        assert want is None or "longer than" in str(exc)
        return
    assert want is not None
    assume(all(-(2**63) <= row[5] < 2**63 for row in want[0]))
    assert (rows or [], next_offset) == want


# -- contract cases ---------------------------------------------------------------------


def test_empty_and_partial_input_give_no_rows_and_the_start_offset() -> None:
    batch = build_batch(recs(3), base_offset=40)
    for data in (b"", batch[:5], batch[:20], batch[:-1]):
        assert decode_records(data, TOPIC, PARTITION, 40, FAR, True) == (None, 40)
    none = None  # a Fetch answer's null records
    assert decode_records(none, TOPIC, PARTITION, 40, FAR, True) == (None, 40)  # type: ignore[arg-type]


def test_partial_trailing_batch_is_ignored() -> None:
    first, second = build_batch(recs(2)), build_batch(recs(2), base_offset=2)
    rows = check([first], tail=second[:-7])
    assert [r[4] for r in rows] == [0, 1]


def test_batch_starting_below_start_is_cut_and_batches_below_are_skipped() -> None:
    batches = [build_batch(recs(5), base_offset=0), build_batch(recs(5), base_offset=5)]
    assert [r[4] for r in check(batches, start=7)] == [7, 8, 9]
    assert [r[4] for r in check(batches, start=3)] == [3, 4, 5, 6, 7, 8, 9]
    # Everything below start: no rows, and the next fetch is never before start.
    assert actual(batches[0], start=20) == (None, 20)


def test_stops_at_the_first_batch_at_or_past_end() -> None:
    batches = [build_batch(recs(5), base_offset=b) for b in (0, 5, 10)]
    assert actual(b"".join(batches), 0, 5)[1] == 5
    assert [r[4] for r in check(batches, end=5)] == [0, 1, 2, 3, 4]
    assert [r[4] for r in check(batches, end=7)] == [0, 1, 2, 3, 4, 5, 6]
    assert actual(b"".join(batches), 0, 7)[1] == 10
    # A corrupt batch past `end` is never looked at.
    broken = batches[2][:30] + b"\xff" + batches[2][31:]
    assert actual(batches[0] + broken, 0, 10)[1] == 5


def test_compacted_batch_with_offset_gaps() -> None:
    original = build_batch(recs(10), base_offset=100)
    kept = [
        r for r in decode_batch(RecordBatchView(original)).records if r.offset in (100, 103, 107)
    ]
    compacted = rebuild_batch(RecordBatchView(original), kept, None)
    rows = check([compacted])
    assert [r[4] for r in rows] == [100, 103, 107]
    assert actual(compacted)[1] == 110  # last offset + 1, not the last record's
    assert [r[4] for r in check([compacted], start=101, end=107)] == [103]


def test_control_batches_give_no_rows_but_advance_next_offset() -> None:
    data = [build_batch(recs(3)), build_batch(recs(1), base_offset=3, is_control=True)]
    assert [r[4] for r in check(data)] == [0, 1, 2]
    assert actual(b"".join(data))[1] == 4
    assert actual(data[1], start=3) == (None, 4)


def test_timestamps_create_time_and_log_append_time() -> None:
    stamps = [1_000, 5_000, -3_000, 2**45]  # negative delta, large varlong
    create = build_batch([Record(b"v", timestamp=t) for t in stamps])
    append = build_batch(recs(3, ts=7_000), base_offset=4, log_append_time=True)
    rows = check([create, append])
    assert [(r[5], r[6]) for r in rows] == [(t * 1000, 0) for t in stamps] + [(7_002_000, 1)] * 3


def test_null_and_empty_keys_values_and_the_inline_boundary() -> None:
    sizes = [None, 0, 1, 4, 5, 8, 11, 12, 13, 16, 100, 9000]

    def blob(n: int | None) -> bytes | None:
        return None if n is None else bytes(i % 251 for i in range(n))

    mixed = [Record(blob(v), blob(k), timestamp=1) for v, k in zip(sizes, sizes[::-1], strict=True)]
    rows = check([build_batch(mixed)])
    assert rows[0][1] is None and rows[-1][0] is None and rows[1][1] == b""
    for n in (0, 12, 13, 40):  # all the same length: the uniform fast path
        check([build_batch([Record(b"a" * n, b"b" * n, timestamp=1)] * 3)])


def test_headers_column() -> None:
    data = build_batch(
        [
            Record(b"v", headers=(("trace", b"abc"), ("empty", b""), ("nul", None))),
            Record(b"w"),
            Record(b"x", headers=(("", b"z"),)),
        ]
    )
    rows = check([data], include_headers=True)
    assert [r[7] for r in rows] == [
        [("trace", b"abc"), ("empty", b""), ("nul", None)],
        [],  # no headers: an empty list, not null
        [("", b"z")],
    ]
    assert check([build_batch(recs(2))], include_headers=True)[0][7] == []
    assert len(check([data], include_headers=False)[0]) == 7


def test_headers_only_on_rows_outside_the_range() -> None:
    data = build_batch([Record(b"a"), Record(b"b", headers=(("h", b"x"),)), Record(b"c")])
    assert [r[7] for r in check([data], start=2, include_headers=True)] == [[]]
    assert [r[7] for r in check([data], start=1, include_headers=True)] == [[("h", b"x")], []]


def test_binary_views_are_valid_arrow() -> None:
    """The binary_view structs behind key/value columns: inline bytes zero-padded (Arrow's
    full validation checks it), long values pointing into the buffer."""
    data = bytes(range(256)) * 4 + bytes(16)
    spans = [(3, 0), (5, 1), (7, 4), (9, 5), (11, 8), (2, 11), (40, 12), (50, 13), (60, 300)]
    spans.append((70, -1))
    views = np.ndarray((len(data) - 11,), dtype="V12", buffer=data, strides=(1,))
    for chosen in (spans, spans[:1], spans[6:7], spans[7:], spans[-2:]):
        start = np.array([s for s, _ in chosen], np.int64)
        length = np.array([n for _, n in chosen], np.int64)
        arr = arrow_records._binary(pa.py_buffer(data), views, start, length, pa.binary_view())
        assert arr.type == pa.binary_view()
        arr.validate(full=True)
        assert arr.to_pylist() == [data[s : s + n] if n >= 0 else None for s, n in chosen]


def test_header_key_that_is_not_utf8_is_replaced_like_the_reference() -> None:
    data = build_batch([Record(b"v", headers=(("KEY!", b"h"),)), Record(b"w")])
    data = reseal(data.replace(b"KEY!", b"\xff\xfeY!"))
    rows = check([data], include_headers=True)
    assert rows[0][7] == [("\ufffd\ufffdY!", b"h")]


def test_many_small_batches_and_long_records_take_every_stepping_path() -> None:
    batches = [build_batch(recs(2 + i % 3), base_offset=10 * i) for i in range(40)]
    check(batches)  # the numpy lockstep by default
    # ...which finds the boundaries itself, for equal and unequal batches: a silent
    # fallback to the Python loop would be correct, but several times slower.
    python = mock.patch.object(arrow_records, "_heads_python", side_effect=AssertionError)
    for chosen in (batches, [build_batch(recs(4), base_offset=4 * i) for i in range(40)]):
        for mode in ("no c", "c") if C_WALK else ("no c",):  # lockstep; the C walk
            with stepping(mode), python:
                assert actual(b"".join(chosen))[0]
    # A 3-byte record length (a body over 8 KiB) makes the lockstep redo it in Python.
    batches[17] = build_batch([Record(b"x" * 9000, timestamp=1)] * 2, base_offset=170)
    check(batches, start=15, end=300)


@pytest.mark.skipif(not C_WALK, reason="spark_jobs._record_walk is not built")
def test_the_c_walk_is_used_where_built() -> None:
    batch = build_batch(recs(5))
    with (
        mock.patch.object(arrow_records, "_heads_python", side_effect=AssertionError),
        mock.patch.object(arrow_records, "_heads_numpy", side_effect=AssertionError),
    ):
        assert actual(batch)[1] == 5


# -- corruption -------------------------------------------------------------------------


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


# -- schema -----------------------------------------------------------------------------


@pytest.mark.parametrize("include_headers", [False, True])
def test_schema_is_the_spark_kafka_source_columns(include_headers: bool) -> None:
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        header = pa.struct([("key", pa.string()), ("value", pa.binary())])
        fields.append(("headers", pa.list_(header)))
    want = pa.schema([pa.field(name, typ, nullable=True) for name, typ in fields])
    schema = arrow_schema(include_headers)
    assert schema.equals(want, check_metadata=True)
    assert [f.name for f in schema] == [name for name, _ in fields]
    assert all(f.nullable for f in schema)
    batch, _ = decode_records(build_batch(recs(2)), TOPIC, PARTITION, 0, FAR, include_headers)
    assert batch is not None and batch.schema.equals(want)
