"""`spark.read.format("kraft")` against 3 controllers + 3 brokers (real processes).

100,000 records with keys, headers and CreateTime timestamps go to 6 partitions (record
i to partition i % 6, timestamp BASE_TS + i), so every expected subset can be computed
here: whole topic, offsets by JSON, timestamps, `assign`, `subscribePattern`,
`minPartitions` splits, retention-deleted ranges, and a leader dying mid-read.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, TopicPartition

from spark_jobs.kafka_client import KafkaCallError, KafkaClient
from spark_jobs.options import EARLIEST, LATEST
from spark_jobs.planner import OffsetRange
from spark_jobs.range_reader import ReadSettings, read_range
from spark_jobs.source import spark_schema
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.indexed_records import (
    BASE_TS,
    create_topic,
    headers_of,
    key_of,
    produce,
    value_of,
)

N = 100_000
PARTITIONS = 6
TOPIC = "events"


def restart(c: ProcCluster, ids: list[int]) -> None:
    state = c.cluster_state()
    assert state is not None
    for b in ids:
        c.restart_broker(b)
    c.wait_brokers_unfenced(set(ids), int(state["metadata_offset"]), 60)


@pytest.fixture(scope="module")
def events(spark_cluster: ProcCluster) -> ProcCluster:
    cluster = spark_cluster
    create_topic(cluster, TOPIC, PARTITIONS)
    produce(cluster, TOPIC, ((i, i % PARTITIONS) for i in range(N)))
    return cluster


def load(spark: Any, c: ProcCluster, **options: str) -> Any:
    reader = spark.read.format("kraft").option("kafka.bootstrap.servers", c.bootstrap)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def rows_of(df: Any) -> pa.Table:
    return df.toArrow().sort_by([("partition", "ascending"), ("offset", "ascending")])


def indexes(table: pa.Table) -> list[int]:
    """Record indexes read back, checked against every column of what was produced."""
    out = []
    cols = table.to_pydict()
    for n in range(table.num_rows):
        i = int(cols["value"][n][6:14])
        assert cols["key"][n] == key_of(i)
        assert cols["value"][n] == value_of(i)
        assert cols["topic"][n] == TOPIC
        assert cols["partition"][n] == i % PARTITIONS
        assert cols["offset"][n] == i // PARTITIONS  # one producer: offsets in send order
        assert int(cols["timestamp"][n].timestamp() * 1000) == BASE_TS + i
        assert cols["timestampType"][n] == 0
        if "headers" in cols:
            assert [(h["key"], h["value"]) for h in cols["headers"][n]] == headers_of(i)
        out.append(i)
    return out


def expected(lo: dict[int, int], hi: dict[int, int]) -> list[int]:
    """Indexes in [lo, hi) offsets of each partition, in (partition, offset) order."""
    return [o * PARTITIONS + p for p in range(PARTITIONS) for o in range(lo[p], hi[p])]


ALL = expected(dict.fromkeys(range(PARTITIONS), 0),
               {p: len(range(p, N, PARTITIONS)) for p in range(PARTITIONS)})


def test_whole_topic_reads_back_exactly_with_the_kafka_sources_columns(
    spark: Any, events: ProcCluster
) -> None:
    df = load(spark, events, subscribe=TOPIC, includeHeaders="true")
    assert df.schema == spark_schema(include_headers=True)
    assert [f.name for f in df.schema.fields] == [
        "key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert indexes(rows_of(df)) == ALL
    plain = load(spark, events, subscribe=TOPIC)
    assert plain.schema == spark_schema(include_headers=False)
    assert plain.count() == N


def test_offsets_by_json_select_exactly_that_range(spark: Any, events: ProcCluster) -> None:
    lo = {p: 10 * p + 3 for p in range(PARTITIONS)}
    hi = {p: 16_000 - 700 * p for p in range(PARTITIONS)}
    starting = {TOPIC: {str(p): n for p, n in lo.items()}}
    ending = {TOPIC: {str(p): n for p, n in hi.items()}}
    starting[TOPIC]["5"] = EARLIEST
    lo[5] = 0
    ending[TOPIC]["4"] = LATEST
    hi[4] = len(range(4, N, PARTITIONS))
    df = load(spark, events, subscribe=TOPIC, startingOffsets=json.dumps(starting),
              endingOffsets=json.dumps(ending))
    assert indexes(rows_of(df)) == expected(lo, hi)


def test_timestamps_select_the_records_at_or_after_them(spark: Any, events: ProcCluster) -> None:
    # Global: records with timestamp in [BASE_TS + 600, BASE_TS + 1200).
    df = load(spark, events, subscribe=TOPIC, startingTimestamp=str(BASE_TS + 600),
              endingTimestamp=str(BASE_TS + 1200))
    assert sorted(indexes(rows_of(df))) == list(range(600, 1200))
    # Per partition; an ending timestamp past every record reads to the end.
    # (offset o of partition p holds record 6 * o + p, stamped BASE_TS + 6 * o + p)
    by_ts_start = {TOPIC: {str(p): BASE_TS + 6 * 100 + p for p in range(PARTITIONS)}}
    by_ts_end = {TOPIC: {str(p): BASE_TS + 6 * 200 + p for p in range(PARTITIONS)}}
    by_ts_end[TOPIC]["0"] = BASE_TS + 10 * N
    df = load(spark, events, subscribe=TOPIC,
              startingOffsetsByTimestamp=json.dumps(by_ts_start),
              endingOffsetsByTimestamp=json.dumps(by_ts_end))
    lo = dict.fromkeys(range(PARTITIONS), 100)
    hi = dict.fromkeys(range(PARTITIONS), 200)
    hi[0] = len(range(0, N, PARTITIONS))
    assert indexes(rows_of(df)) == expected(lo, hi)
    # A starting timestamp past every record: Spark's default strategy is an error.
    late = load(spark, events, subscribe=TOPIC, startingTimestamp=str(BASE_TS + 10 * N))
    with pytest.raises(Exception, match="No offset matched the starting timestamp"):
        late.count()
    empty = load(spark, events, subscribe=TOPIC, startingTimestamp=str(BASE_TS + 10 * N),
                 startingOffsetsByTimestampStrategy="latest")
    assert empty.count() == 0


def test_assign_and_subscribe_pattern_pick_their_partitions(
    spark: Any, events: ProcCluster
) -> None:
    df = load(spark, events, assign=json.dumps({TOPIC: [1, 4]}))
    got = indexes(rows_of(df))
    assert got == [i for i in ALL if i % PARTITIONS in (1, 4)]
    create_topic(events, "evx", 1)
    create_topic(events, "other", 1)
    produce(events, "evx", ((i, 0) for i in range(5)))
    produce(events, "other", ((i, 0) for i in range(7)))
    counts = (load(spark, events, subscribePattern="ev.*").groupBy("topic").count().collect())
    assert {r["topic"]: r["count"] for r in counts} == {TOPIC: N, "evx": 5}
    # The pattern matches whole names only, and never internal topics.
    assert load(spark, events, subscribePattern="ev").count() == 0
    # A commit puts a record in __consumer_offsets: an internal topic for ".*" to skip.
    Consumer({"bootstrap.servers": events.bootstrap, "group.id": "g"}).commit(
        offsets=[TopicPartition(TOPIC, 0, 5)], asynchronous=False)
    every = load(spark, events, subscribePattern=".*").select("topic").distinct().toArrow()
    names = set(every.column("topic").to_pylist())
    assert {TOPIC, "evx", "other"} <= names and "__consumer_offsets" not in names
    with pytest.raises(Exception, match="partitions not in the cluster: evx-3"):
        load(spark, events, assign=json.dumps({"evx": [3]})).count()


def test_min_partitions_splits_without_overlap_or_gap(spark: Any, events: ProcCluster) -> None:
    df = load(spark, events, subscribe=TOPIC, minPartitions="20")
    assert df.rdd.getNumPartitions() == 18  # 6 equal ranges, round(16667 / 5000) = 3 each
    per_task = df.rdd.mapPartitions(
        lambda rows: [sorted((r["partition"], r["offset"]) for r in rows)]
    ).collect()
    spans = sorted((p[0][0], p[0][1], p[-1][1]) for p in per_task if p)
    assert len(spans) == 18
    for part in range(PARTITIONS):
        mine = [(a, b) for p, a, b in spans if p == part]
        assert mine[0][0] == 0 and mine[-1][1] == len(range(part, N, PARTITIONS)) - 1
        assert all(x[1] + 1 == y[0] for x, y in zip(mine, mine[1:], strict=False))
    assert sum(len(p) for p in per_task) == N
    assert df.select("partition", "offset").distinct().count() == N


def earliest(c: ProcCluster, topic: str) -> int:
    with KafkaClient([(h, int(p)) for h, p in (a.split(":") for a in c.bootstrap.split(","))]) as k:
        return k.list_offsets({(topic, 0): EARLIEST})[(topic, 0)]


def test_a_range_deleted_by_retention_fails_or_is_skipped(spark: Any, events: ProcCluster) -> None:
    # Month-old timestamps in small segments: time retention deletes them, while the
    # records after them, ten minutes old, stay.
    create_topic(events, "retained", 1, {"segment.bytes": "4096", "retention.ms": "86400000"})
    produce(events, "retained", ((i, 0) for i in range(300)), BASE_TS - 30 * 86_400_000, 2000)
    produce(events, "retained", ((i, 0) for i in range(300)), batch_bytes=2000)
    start = wait_for(lambda: earliest(events, "retained") or None, 30, "retention to delete")
    assert 0 < start <= 300
    from_zero = json.dumps({"retained": {"0": 0}})
    df = load(spark, events, subscribe="retained", startingOffsets=from_zero)
    with pytest.raises(Exception, match=r"Cannot fetch records in \[0, \d+\) of retained-0"):
        df.count()
    kept = load(spark, events, subscribe="retained", startingOffsets=from_zero,
                failOnDataLoss="false").select("offset").toArrow()
    assert kept.column("offset").to_pylist() == list(range(start, 600))


def settings(c: ProcCluster, **kw: Any) -> ReadSettings:
    hosts = [(h, int(p)) for h, p in (a.split(":") for a in c.bootstrap.split(","))]
    base = dict(bootstrap=hosts, client_id="t", request_timeout_ms=5000, api_timeout_ms=30_000,
                max_partition_fetch_bytes=16_384, read_committed=False,
                fail_on_data_loss=True, include_headers=False)
    return ReadSettings(**{**base, **kw})


def test_the_leader_dying_mid_read_is_retried_on_the_new_leader(events: ProcCluster) -> None:
    # Small batches and small fetches, so the read is many fetches long.
    create_topic(events, "moving", 1, {"min.insync.replicas": "2"})
    produce(events, "moving", ((i, 0) for i in range(20_000)), batch_bytes=16_384)
    s = settings(events)
    with KafkaClient(s.bootstrap) as k:
        leader = k.leaders([("moving", 0)])[("moving", 0)]
    reader = read_range(OffsetRange("moving", 0, 0, 20_000), s)
    first = next(reader)  # the reader is mid-range, talking to `leader`
    assert 0 < first.num_rows < 20_000
    events.kill_broker(leader)
    try:
        rest = list(reader)
        offsets = first.column("offset").to_pylist() + [
            o for b in rest for o in b.column("offset").to_pylist()]
        assert offsets == list(range(20_000))  # every record once: no short read
        with KafkaClient(s.bootstrap) as k:
            assert k.leaders([("moving", 0)])[("moving", 0)] != leader
    finally:
        restart(events, [leader])


def test_no_leader_at_all_is_a_clear_error_not_a_short_read(
    spark: Any, events: ProcCluster
) -> None:
    create_topic(events, "lonely", 1, replication=1)
    produce(events, "lonely", ((i, 0) for i in range(50)))
    s = settings(events, api_timeout_ms=3000, max_partition_fetch_bytes=1)
    with KafkaClient(s.bootstrap) as k:
        leader = k.leaders([("lonely", 0)])[("lonely", 0)]
    reader = read_range(OffsetRange("lonely", 0, 0, 50), s)
    events.kill_broker(leader)  # the only replica
    try:
        with pytest.raises(KafkaCallError, match=r"lonely-0: read \[0, 50\) stopped at offset 0"):
            list(reader)
        # The same through Spark: the task fails and the query says why.
        df = load(spark, events, assign=json.dumps({"lonely": [0]}),
                  startingOffsets=json.dumps({"lonely": {"0": 0}}),
                  endingOffsets=json.dumps({"lonely": {"0": 50}}),
                  **{"kafka.default.api.timeout.ms": "3000"})
        with pytest.raises(Exception, match=r"lonely-0: read \[0, 50\) stopped at offset 0"):
            df.count()
    finally:
        restart(events, [leader])
