"""read_committed in the Spark reader: Fetch answers' aborted-transaction lists and
hand-built transactional batches and markers (no cluster)."""

from __future__ import annotations

import datetime
import io
import struct

from hypothesis import given, settings
from hypothesis import strategies as st
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

from common.errors import Errors
from spark_jobs.aborted import ABORT, COMMIT, AbortedTransactions, control_type
from spark_jobs.arrow_records import decode_records
from spark_jobs.kafka_client import FetchedPartition, parse_fetch_v12
from spark_jobs.planner import OffsetRange
from spark_jobs.range_reader import ReadSettings, _fetch_batches
from storage.compression import Compression
from storage.record_batch import HEADER_SIZE
from storage.records import Record, build_batch

TOPIC, PARTITION, FAR = "t", 0, 1 << 40


def data(pid: int, base: int, *values: bytes, txn: bool = True) -> bytes:
    return build_batch(
        [Record(value=v, key=None) for v in values],
        base_offset=base,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=txn,
        now_ms=1000,
    )


def marker(pid: int, offset: int, kind: int, compression: Compression = Compression.NONE) -> bytes:
    return build_batch(
        [Record(value=struct.pack(">hi", 0, 5), key=struct.pack(">hh", 0, kind))],
        base_offset=offset,
        producer_id=pid,
        producer_epoch=0,
        is_transactional=True,
        is_control=True,
        compression=compression,
        now_ms=1000,
    )


def values(records: bytes, start: int, aborted: list[tuple[int, int]] | None) -> list[bytes]:
    rows, _ = decode_records(records, TOPIC, PARTITION, start, FAR, False, aborted)
    return [] if rows is None else rows.column("value").to_pylist()


# offsets: 0-1 p7 (committed), 2-3 p8 (aborted), 4 p7 COMMIT, 5 plain, 6 p8 ABORT, 7 p8
# again (a new transaction, committed), 8 p8 COMMIT
LOG = b"".join(
    [
        data(7, 0, b"c0", b"c1"),
        data(8, 2, b"a2", b"a3"),
        marker(7, 4, COMMIT),
        data(-1, 5, b"p5", txn=False),
        marker(8, 6, ABORT),
        data(8, 7, b"c7"),
        marker(8, 8, COMMIT),
    ]
)
ABORTED = [(8, 2)]


def test_read_committed_skips_the_aborted_transaction_and_every_marker() -> None:
    assert values(LOG, 0, ABORTED) == [b"c0", b"c1", b"p5", b"c7"]
    rows, next_offset = decode_records(LOG, TOPIC, PARTITION, 0, FAR, False, ABORTED)
    assert rows is not None and rows.column("offset").to_pylist() == [0, 1, 5, 7]
    assert next_offset == 9  # past the last marker: the gaps are read, not lost


def test_read_uncommitted_sees_aborted_records_but_never_markers() -> None:
    assert values(LOG, 0, None) == [b"c0", b"c1", b"a2", b"a3", b"p5", b"c7"]


def test_the_same_producer_after_its_abort_marker_is_read_again() -> None:
    """The abort marker closes the aborted range: its next transaction is visible."""
    assert values(LOG, 6, ABORTED) == [b"c7"]


def test_a_fetch_starting_inside_an_aborted_transaction() -> None:
    """The broker lists a transaction that began before the fetch offset."""
    assert values(LOG, 3, ABORTED) == [b"p5", b"c7"]
    only_tail = b"".join([data(8, 3, b"a3"), marker(8, 6, ABORT), data(8, 7, b"c7")])
    assert values(only_tail, 3, [(8, 2)]) == [b"c7"]


def test_an_aborted_list_of_a_later_transaction_does_not_hide_an_earlier_one() -> None:
    """p8's transaction at 2 committed; the list names p8's next one at 7 only."""
    log = b"".join(
        [data(8, 2, b"c2"), marker(8, 3, COMMIT), data(8, 4, b"a4"), marker(8, 5, ABORT)]
    )
    assert values(log, 0, [(8, 4)]) == [b"c2"]


def test_a_compressed_abort_marker_still_closes_the_range() -> None:
    log = b"".join(
        [data(8, 0, b"a0"), marker(8, 1, ABORT, Compression.GZIP), data(8, 2, b"c2")]
    )
    assert values(log, 0, [(8, 0)]) == [b"c2"]


def test_only_markers_and_aborted_batches_still_move_the_offset_on() -> None:
    log = b"".join([data(8, 0, b"a0"), marker(8, 1, ABORT)])
    assert decode_records(log, TOPIC, PARTITION, 0, FAR, False, [(8, 0)]) == (None, 2)


def test_control_type_reads_the_marker_key() -> None:
    assert control_type(marker(1, 0, ABORT)[HEADER_SIZE:]) == ABORT
    assert control_type(marker(1, 0, COMMIT)[HEADER_SIZE:]) == COMMIT
    assert control_type(b"\x02") is None


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.sampled_from(["data", "commit", "abort"])),
        max_size=30,
    )
)
def test_model_a_record_is_skipped_iff_its_transaction_aborted(
    steps: list[tuple[int, str]],
) -> None:
    """Random interleavings of three producers' transactions: with the broker's aborted
    list (first offset of every aborted transaction), exactly the records of committed
    (or still open) transactions are rows."""
    parts: list[bytes] = []
    open_first: dict[int, int] = {}
    open_values: dict[int, list[bytes]] = {}
    aborted: list[tuple[int, int]] = []
    visible: list[bytes] = []
    for offset, (pid, what) in enumerate(steps):
        if what == "data":
            v = f"{pid}@{offset}".encode()
            parts.append(data(pid, offset, v))
            open_first.setdefault(pid, offset)
            open_values.setdefault(pid, []).append(v)
            continue
        parts.append(marker(pid, offset, COMMIT if what == "commit" else ABORT))
        if pid in open_first:
            first = open_first.pop(pid)
            done = open_values.pop(pid)
            if what == "commit":
                visible += done
            else:
                aborted.append((pid, first))
    # still open at the end: visible under read_uncommitted semantics of this walk
    # (the broker's LSO keeps a read_committed fetch below them in practice)
    for done in open_values.values():
        visible += done
    got = values(b"".join(parts), 0, aborted) if parts else []
    assert sorted(got) == sorted(visible)


def _encode(aborted: tuple[AbortedTransaction, ...] | None) -> tuple[bytearray, int]:
    part = PartitionData(
        partition_index=i32(0),
        error_code=ErrorCode.none,
        high_watermark=i64(100),
        last_stable_offset=i64(42),
        log_start_offset=i64(3),
        aborted_transactions=aborted,
        preferred_read_replica=BrokerId(-1),
        records=b"r",
        diverging_epoch=EpochEndOffset(),
        current_leader=LeaderIdAndEpoch(),
    )
    resp = FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=ErrorCode.none,
        session_id=i32(0),
        responses=(FetchableTopicResponse(topic=TopicName("t"), partitions=(part,)),),
    )
    buf = io.BytesIO()
    buf.write(struct.pack(">i", 7) + b"\0")
    entity_writer(FetchResponse)(buf, resp)
    return bytearray(buf.getvalue()), 5


def test_the_fetch_parser_returns_the_aborted_list_and_the_lso() -> None:
    aborted = (
        AbortedTransaction(producer_id=ProducerId(9), first_offset=i64(4)),
        AbortedTransaction(producer_id=ProducerId(2), first_offset=i64(1)),
    )
    got = parse_fetch_v12(*_encode(aborted), ("t", 0))
    assert got.aborted == ((9, 4), (2, 1)) and got.last_stable_offset == 42
    assert parse_fetch_v12(*_encode(None), ("t", 0)).aborted == ()


def test_aborted_transactions_ignores_non_producer_batches() -> None:
    txns = AbortedTransactions([(8, 0)])
    assert not txns.skip(-1, 5, False, False)
    assert txns.skip(8, 5, True, False)
    assert not txns.skip(8, 6, False, True)  # its abort marker
    assert not txns.skip(8, 7, True, False)


class _FakeClient:
    """One leader that answers every fetch from `log` at the asked offset, with the
    aborted list a broker gives read_committed fetches: the (producer id, first offset)
    of the aborted transactions whose last offset is at or past the fetch offset
    (read_uncommitted: none)."""

    api_timeout_s = 5.0

    def __init__(self, batches: list[tuple[int, bytes]], aborted: list[tuple[int, int, int]]):
        self.batches, self.aborted = batches, aborted
        self.isolation: list[bool] = []

    def leaders(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return dict.fromkeys(tps, 1)

    def fetch_once(
        self, leader: int, tp: tuple[str, int], offset: int, max_bytes: int, rc: bool = False
    ) -> FetchedPartition:
        self.isolation.append(rc)
        # one batch per answer, so the reader walks the gaps fetch by fetch
        nxt = [raw for base, raw in self.batches if base >= offset][:1]
        listed = tuple((pid, first) for pid, first, last in self.aborted if last >= offset)
        records = nxt[0] if nxt else b""
        return FetchedPartition(Errors.NONE, 100, 0, records, 9, listed if rc else ())


def _settings(read_committed: bool) -> ReadSettings:
    return ReadSettings([("h", 1)], "c", 1000, 5000, 1 << 20, read_committed, True, False)


def test_the_range_reader_reads_through_the_gaps_with_the_aborted_list() -> None:
    """A range ending at the LSO (9) whose tail is markers and aborted batches: every
    committed record, no error for the offsets with no row, and one fetch per batch."""
    batches = [
        (0, data(7, 0, b"c0", b"c1")),
        (2, data(8, 2, b"a2", b"a3")),
        (4, marker(7, 4, COMMIT)),
        (5, data(-1, 5, b"p5", txn=False)),
        (6, marker(8, 6, ABORT)),
        (7, data(8, 7, b"c7")),
        (8, marker(8, 8, COMMIT)),
    ]
    for committed, want in ((True, [b"c0", b"c1", b"p5", b"c7"]),
                            (False, [b"c0", b"c1", b"a2", b"a3", b"p5", b"c7"])):  # fmt: skip
        c = _FakeClient(batches, [(8, 2, 6)])
        rows = list(_fetch_batches(c, OffsetRange(TOPIC, 0, 0, 9), _settings(committed)))  # type: ignore[arg-type]
        assert [v for b in rows for v in b.column("value").to_pylist()] == want
        assert set(c.isolation) == {committed}
