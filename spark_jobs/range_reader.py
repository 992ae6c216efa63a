"""Executor side: read one offset range of one partition into Arrow batches, exactly.

A task reads [from_offset, until_offset) and either yields every record in it or
raises; it never ends early in silence. What can happen on the way:
- the leader moves or dies: the fetch fails or answers NOT_LEADER_OR_FOLLOWER; the
  reader finds the new leader through Metadata and goes on from the same offset;
- the new leader's high watermark is still below the range's end: it fetches again
  until the records are there or `kafka.default.api.timeout.ms` runs out, and then
  raises naming the offsets it could not read;
- retention deleted the start of the range (OFFSET_OUT_OF_RANGE below the log start):
  with failOnDataLoss (the default) a `DataLossError` in Spark's words; without it,
  the lost part is skipped and reading resumes at the log start offset;
- records the planner saw are gone from the log's end (an unclean leader election):
  an error, or the rest of the range skipped without failOnDataLoss.
Offsets missing inside the range without an error (compaction, transaction markers)
are not data loss.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from common.errors import Errors
from spark_jobs.arrow_records import decode_records
from spark_jobs.kafka_client import RETRY_BACKOFF_S, KafkaCallError, KafkaClient
from spark_jobs.options import EARLIEST, LATEST, SourceOptions
from spark_jobs.planner import OffsetRange
from spark_jobs.security import ClientSecurity

log = logging.getLogger(__name__)

MIN_ROWS_PER_BATCH = 8192  # Arrow batches below this cost Spark more per row
MAX_FETCH_BYTES = 256 * 1024 * 1024  # cap when growing a fetch for one oversized batch
MAX_GROWN_FETCH_BYTES = 16 * 1024 * 1024  # cap when growing a fetch to fill a batch

INSTRUCTION_FOR_FAIL_ON_DATA_LOSS = (
    "Some data may have been lost because they are not available in Kafka any more; "
    "either the data was aged out by Kafka or the topic may have been deleted before all "
    "the data in the topic was processed. If you want your query to skip such data "
    'instead of failing, set the source option "failOnDataLoss" to "false".'
)


class DataLossError(RuntimeError):
    """Records of the planned range are no longer in the partition."""


@dataclass(frozen=True)
class ReadSettings:
    """What an executor needs of the options (plain data, so it pickles)."""

    bootstrap: list[tuple[str, int]]
    client_id: str
    request_timeout_ms: int
    api_timeout_ms: int
    max_partition_fetch_bytes: int
    read_committed: bool
    fail_on_data_loss: bool
    include_headers: bool
    security: ClientSecurity = ClientSecurity()

    @classmethod
    def of(cls, o: SourceOptions) -> ReadSettings:
        return cls(
            o.bootstrap,
            o.client_id,
            o.request_timeout_ms,
            o.api_timeout_ms,
            o.max_partition_fetch_bytes,
            o.read_committed,
            o.fail_on_data_loss,
            o.include_headers,
            o.security,
        )


def read_range(r: OffsetRange, s: ReadSettings) -> Iterator[pa.RecordBatch]:
    """Every record of `r`, in offset order, in Arrow batches of >= 8k rows (bar the last)."""
    if r.size <= 0:
        return
    with KafkaClient(
        s.bootstrap, s.client_id, s.request_timeout_ms, s.api_timeout_ms, s.security
    ) as c:
        pending: list[pa.RecordBatch] = []
        rows = 0
        for batch in _fetch_batches(c, r, s):
            pending.append(batch)
            rows += batch.num_rows
            if rows >= MIN_ROWS_PER_BATCH:
                yield _concat(pending)
                pending, rows = [], 0
        if pending:
            yield _concat(pending)


def _concat(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    return batches[0] if len(batches) == 1 else pa.concat_batches(batches)


def _fetch_batches(c: KafkaClient, r: OffsetRange, s: ReadSettings) -> Iterator[pa.RecordBatch]:
    tp = (r.topic, r.partition)
    offset = r.from_offset
    max_bytes = s.max_partition_fetch_bytes
    deadline = time.monotonic() + c.api_timeout_s
    last_problem = ""
    leader: int | None = None
    while offset < r.until_offset:
        if time.monotonic() > deadline:
            raise KafkaCallError(
                f"{r.topic}-{r.partition}: read [{r.from_offset}, {r.until_offset}) stopped at "
                f"offset {offset}: no progress within {c.api_timeout_s:g} s "
                f"(kafka.default.api.timeout.ms); last problem: {last_problem}"
            )
        try:
            if leader is None:  # first, or after an error: ask Metadata, else keep it
                leader = c.leaders([tp])[tp]
            got = c.fetch_once(leader, tp, offset, max_bytes, s.read_committed)
        except KafkaCallError as e:  # no leader found within the deadline
            raise KafkaCallError(
                f"{r.topic}-{r.partition}: read [{r.from_offset}, "
                f"{r.until_offset}) stopped at offset {offset}: {e}"
            ) from e
        except OSError as e:
            last_problem = f"broker unreachable ({e})"
            leader = None
            c.forget_metadata()
            time.sleep(RETRY_BACKOFF_S)  # retry.backoff.ms before asking for a new leader
            continue
        if got.error == Errors.OFFSET_OUT_OF_RANGE:
            leader = None
            offset = _after_out_of_range(c, r, offset, s)
            deadline = time.monotonic() + c.api_timeout_s
            continue
        if got.error != Errors.NONE:
            if not got.error.retriable:
                raise KafkaCallError(f"Fetch {r.topic}-{r.partition} at {offset}: {got.error.name}")
            last_problem = got.error.name
            leader = None
            c.forget_metadata()
            time.sleep(RETRY_BACKOFF_S)
            continue
        if not got.records:
            # The leader has nothing at `offset` yet: a new leader whose high watermark
            # has not caught up. Fetch waits up to max_wait on the broker, so no sleep.
            last_problem = f"no records at {offset} (high watermark {got.high_watermark})"
            continue
        rows, next_offset = decode_records(
            got.records,
            r.topic,
            r.partition,
            offset,
            r.until_offset,
            s.include_headers,
            got.aborted if s.read_committed else None,
        )
        if next_offset <= offset:
            # Only a partial batch came back: one batch is larger than we asked for.
            if max_bytes >= MAX_FETCH_BYTES:
                raise KafkaCallError(
                    f"{r.topic}-{r.partition}: the batch at {offset} is "
                    f"larger than {MAX_FETCH_BYTES} bytes"
                )
            max_bytes = min(max_bytes * 2, MAX_FETCH_BYTES)
            continue
        offset = next_offset
        deadline = time.monotonic() + c.api_timeout_s
        if rows is not None and rows.num_rows:
            # Ask for enough bytes that one fetch makes a whole Arrow batch at the record
            # sizes seen: gluing small batches together would copy every column again.
            want = len(got.records) * MIN_ROWS_PER_BATCH * 5 // (4 * rows.num_rows)
            max_bytes = max(max_bytes, min(want, MAX_GROWN_FETCH_BYTES))
            yield rows


def _after_out_of_range(c: KafkaClient, r: OffsetRange, offset: int, s: ReadSettings) -> int:
    """Where to go on after OFFSET_OUT_OF_RANGE at `offset` (or raise: data loss)."""
    tp = (r.topic, r.partition)
    earliest = c.list_offsets({tp: EARLIEST}, s.read_committed)[tp]
    latest = c.list_offsets({tp: LATEST}, s.read_committed)[tp]
    if offset < earliest:
        lost_until = min(earliest, r.until_offset)
        problem = f"Cannot fetch records in [{offset}, {lost_until}) of {r.topic}-{r.partition}"
        resume = lost_until
    elif offset >= latest:
        problem = (
            f"Cannot fetch records in [{offset}, {r.until_offset}) of "
            f"{r.topic}-{r.partition}: the log now ends at {latest}"
        )
        resume = r.until_offset
    else:
        return offset  # the partition moved on while we asked (a new leader): try again
    if s.fail_on_data_loss:
        raise DataLossError(f"{problem}. {INSTRUCTION_FOR_FAIL_ON_DATA_LOSS}")
    log.warning("%s; skipped (failOnDataLoss=false)", problem)
    return resume
