"""spark_jobs.arrow_records: the vectorized Fetch-records-to-Arrow decoder, checked
against storage.records.decode_batch (the per-record reference decoder)."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spark_jobs import arrow_records
from spark_jobs.arrow_records import RecordsDecodeError, arrow_schema, decode_records
from storage.compression import Compression
from storage.record_batch import (
    HEADER_SIZE,
    RecordBatchView,
)
from storage.records import (
    CorruptRecordError,
    Record,
    build_batch,
    decode_batch,
    rebuild_batch,
)
from tests.harness.arrow_oracle import (
    C_WALK,
    FAR,
    PARTITION,
    TOPIC,
    actual,
    check,
    expected,
    recs,
    reseal,
    stepping,
)

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
