"""The Spark reader's hand-written Fetch v12 answer parser against kio's encoder."""

from __future__ import annotations

import datetime
import io
import struct

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.response import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
)
from kio.schema.types import BrokerId, ProducerId, TopicName
from kio.serial import entity_writer
from kio.static.primitive import i32, i64

from spark_jobs.kafka_client import parse_fetch_v12


def part(index: int, records: bytes | None, **kw: object) -> PartitionData:
    return PartitionData(
        partition_index=i32(index), error_code=kw.get("error", ErrorCode.none),
        high_watermark=i64(kw.get("hw", 100)), log_start_offset=i64(kw.get("start", 3)),
        aborted_transactions=kw.get("aborted"), preferred_read_replica=BrokerId(-1),
        records=records,
        diverging_epoch=kw.get("diverging", EpochEndOffset()),
        current_leader=kw.get("leader", LeaderIdAndEpoch()),
    )


def encode(resp: FetchResponse) -> tuple[bytearray, int]:
    """A frame as the connection hands it over: correlation id, no tags, then the body."""
    buf = io.BytesIO()
    buf.write(struct.pack(">i", 7) + b"\0")
    entity_writer(FetchResponse)(buf, resp)
    return bytearray(buf.getvalue()), 5


def response(*topics: tuple[str, list[PartitionData]], error: ErrorCode = ErrorCode.none
             ) -> FetchResponse:
    return FetchResponse(
        throttle_time=datetime.timedelta(0), error_code=error, session_id=i32(0),
        responses=tuple(FetchableTopicResponse(topic=TopicName(t), partitions=tuple(ps))
                        for t, ps in topics),
    )


def test_finds_its_partition_past_others_with_tags_and_aborted_transactions() -> None:
    aborted = (AbortedTransaction(producer_id=ProducerId(9), first_offset=i64(4)),)
    frame, pos = encode(response(
        ("a", [part(0, b"x" * 10, aborted=aborted, diverging=EpochEndOffset(epoch=i32(2),
                                                                            end_offset=i64(5)))]),
        ("b", [part(0, None, leader=LeaderIdAndEpoch(leader_id=BrokerId(3))),
               part(1, b"records!", hw=42, start=7)]),
    ))
    got = parse_fetch_v12(frame, pos, ("b", 1))
    assert (got.error, got.high_watermark, got.log_start_offset) == (ErrorCode.none, 42, 7)
    assert bytes(got.records) == b"records!"
    assert isinstance(got.records, memoryview)  # a view of the frame, not a copy
    empty = parse_fetch_v12(frame, pos, ("b", 0))
    assert len(empty.records) == 0
    assert bytes(parse_fetch_v12(frame, pos, ("a", 0)).records) == b"x" * 10


def test_errors_missing_partitions_and_truncation() -> None:
    frame, pos = encode(response(("t", [part(0, None, error=ErrorCode.offset_out_of_range)])))
    assert parse_fetch_v12(frame, pos, ("t", 0)).error == ErrorCode.offset_out_of_range
    frame, pos = encode(response(error=ErrorCode.unknown_server_error))
    assert parse_fetch_v12(frame, pos, ("t", 0)).error == ErrorCode.unknown_server_error
    frame, pos = encode(response(("t", [part(0, b"abc")])))
    with pytest.raises(ValueError, match="no answer for t-1"):
        parse_fetch_v12(frame, pos, ("t", 1))
    with pytest.raises((ValueError, IndexError, struct.error)):
        parse_fetch_v12(frame[:-6], pos, ("t", 0))
