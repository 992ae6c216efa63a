"""The Kafka source's options and Spark's range splitting, without Spark or a cluster."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_jobs.options import Position, SourceOptionError, parse_options
from spark_jobs.planner import OffsetRange, offset_ranges, split_ranges
from spark_jobs.stream import rate_limit

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def test_defaults_are_the_kafka_sources() -> None:
    o = parse_options(BASE)
    assert o.bootstrap == [("127.0.0.1", 9092)]
    assert o.subscription.kind == "subscribe" and o.subscription.topics == ("t",)
    assert o.starting == Position("earliest") and o.ending == Position("latest")
    assert o.fail_on_data_loss and not o.include_headers and o.min_partitions is None
    assert parse_options(BASE, streaming=True).starting == Position("latest")


def test_options_are_case_insensitive_and_parsed() -> None:
    o = parse_options({
        "KAFKA.BOOTSTRAP.SERVERS": "a:1,b:2",
        "Assign": '{"x":[1,0],"y":[2]}',
        "STARTINGOFFSETS": '{"x":{"0":5,"1":-2},"y":{"2":7}}',
        "endingOffsets": '{"x":{"0":-1,"1":9},"y":{"2":8}}',
        "failOnDataLoss": "FALSE",
        "minPartitions": "12",
        "includeHeaders": "true",
    })
    assert o.bootstrap == [("a", 1), ("b", 2)]
    assert o.subscription.partitions == (("x", 0), ("x", 1), ("y", 2))
    assert o.starting.offsets == {("x", 0): 5, ("x", 1): -2, ("y", 2): 7}
    assert o.ending.offsets[("x", 0)] == -1
    assert not o.fail_on_data_loss and o.min_partitions == 12 and o.include_headers


def test_a_timestamp_wins_over_offsets() -> None:
    o = parse_options({**BASE, "startingOffsets": "earliest", "startingTimestamp": "1000",
                       "endingOffsetsByTimestamp": '{"t":{"0":2000}}'})
    assert o.starting == Position("timestamp", timestamp=1000)
    assert o.ending == Position("timestamps", timestamps={("t", 0): 2000})


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"subscribe": None}, "One of the following options must be specified"),
        ({"assign": '{"t":[0]}'}, "Only one of the following options"),
        ({"kafka.bootstrap.servers": None}, "'kafka.bootstrap.servers' must be specified"),
        ({"kafka.bootstrap.servers": "nohostport"}, "is not host:port"),
        ({"startingOffsets": "latest"}, "starting offset can't be latest for batch"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, "starting offset can't be latest for batch"),
        ({"endingOffsets": "earliest"}, "ending offset can't be earliest for batch"),
        ({"startingOffsets": "{bad json"}, "is not valid JSON"),
        ({"startingOffsets": '{"t":[0]}'}, "Expected e.g."),
        ({"minPartitions": "0"}, "minpartitions must be a positive integer"),
        ({"failOnDataLoss": "maybe"}, "failondataloss must be true or false"),
        ({"kafka.auto.offset.reset": "earliest"}, "Use startingOffsets"),
        ({"subscribePattern": "(", "subscribe": None}, "not a valid regex"),
        ({"startingTimestamp": "soon"}, "must be a number of ms"),
        ({"kafka.isolation.level": "dirty"}, "kafka.isolation.level"),
    ],
)
def test_bad_options_are_refused_with_sparks_words(extra: dict, message: str) -> None:
    opts = {**BASE, **extra}
    opts = {k: v for k, v in opts.items() if v is not None}
    with pytest.raises(SourceOptionError, match=message):
        parse_options(opts)


def test_streaming_refuses_ending_offsets() -> None:
    with pytest.raises(SourceOptionError, match="Ending offset not valid in streaming"):
        parse_options({**BASE, "endingOffsets": "latest"}, streaming=True)


def test_ending_before_starting_is_refused() -> None:
    with pytest.raises(SourceOptionError, match="Beginning offset 9 is after the ending offset 3"):
        offset_ranges([("t", 0)], {("t", 0): 9}, {("t", 0): 3})


def test_split_is_sparks_kafka_offset_range_calculator() -> None:
    ranges = [OffsetRange("t", 0, 0, 100), OffsetRange("t", 1, 0, 300), OffsetRange("t", 2, 5, 5)]
    assert split_ranges(ranges, None) == ranges
    assert split_ranges(ranges, 3) == ranges  # already as many ranges as asked for
    out = split_ranges(ranges, 8)
    # 400 offsets in 8 parts: 100 -> 2 pieces, 300 -> 6; the empty range is dropped.
    assert [(r.partition, r.from_offset, r.until_offset) for r in out] == [
        (0, 0, 50), (0, 50, 100),
        (1, 0, 50), (1, 50, 100), (1, 100, 150), (1, 150, 200), (1, 200, 250), (1, 250, 300),
    ]
    capped = split_ranges([OffsetRange("t", 0, 10, 35)], None, max_records_per_partition=10)
    assert [(r.from_offset, r.until_offset) for r in capped] == [(10, 18), (18, 26), (26, 35)]


@given(
    sizes=st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 5000)), min_size=1,
                   max_size=12),
    min_partitions=st.integers(1, 200),
    max_records=st.one_of(st.none(), st.integers(1, 3000)),
)
def test_splits_cover_every_range_without_overlap_or_gap(
    sizes: list[tuple[int, int]], min_partitions: int, max_records: int | None
) -> None:
    ranges = [OffsetRange("t", p, start, start + n) for p, (start, n) in enumerate(sizes)]
    out = split_ranges(ranges, min_partitions, max_records)
    for r in ranges:
        pieces = sorted((x.from_offset, x.until_offset) for x in out if x.partition == r.partition)
        if r.size == 0:
            assert all(a == b for a, b in pieces)
            continue
        assert pieces[0][0] == r.from_offset and pieces[-1][1] == r.until_offset
        assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:], strict=False))
        assert all(b > a for a, b in pieces)
        if max_records:
            assert all(b - a <= max_records for a, b in pieces)
    total = sum(r.size for r in ranges)
    if total and max_records is None and len(ranges) < min_partitions:
        assert len(out) >= min(min_partitions // 2, total)


def test_rate_limit_shares_by_backlog_as_spark_does() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    latest = {("t", 0): 300, ("t", 1): 200, ("t", 2): 7}
    assert rate_limit(100, start, latest) == {("t", 0): 75, ("t", 1): 125, ("t", 2): 7}
    assert rate_limit(10_000, start, latest) == latest
    # A share below one record still moves by one (ceil), so nothing starves.
    assert rate_limit(1, {("t", 0): 0, ("t", 1): 0}, {("t", 0): 5, ("t", 1): 5}) == {
        ("t", 0): 1, ("t", 1): 1}
