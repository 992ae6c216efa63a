"""The example jobs, run through their `main([...])` against 3 controllers + 3 brokers.

Known records are produced with confluent-kafka (keys, a null key, a key that is not
UTF-8, a tombstone, headers, chosen partitions and timestamps); the Parquet the jobs
write is read back with pyarrow, and the printed lines are compared exactly.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from spark_jobs import export_parquet, key_counts
from tests.harness.cluster_procs import ProcCluster
from tests.harness.kafka_records import create_topic, produce

TOPIC = "jobs-input"
T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
T0_MS = int(T0.timestamp() * 1000)
# (key, value, partition, ms after T0, headers), produced in this order.
RECORDS: list[tuple[bytes | None, bytes | None, int, int, list[tuple[str, bytes | None]]]] = [
    (b"a", b"1", 0, 0, [("h", b"x")]),
    (b"b", b"22", 0, 1000, []),
    (None, b"333", 0, 2000, []),
    (b"a", None, 1, 3500, [("h1", None), ("h2", b"y")]),  # a tombstone
    (b"a", b"4444", 1, 4000, []),
    (b"c", b"55555", 1, 500, []),
    (b"c", b"x", 2, 6123, []),
    (b"\xff", b"yy", 2, 7000, []),  # not UTF-8
    (b"b", b"zzz", 2, 999, []),
]


@pytest.fixture(scope="module")
def bootstrap(spark_cluster: ProcCluster) -> str:
    """The Spark tests' shared cluster (conftest), with this module's topic produced."""
    c = spark_cluster
    create_topic(c.bootstrap, TOPIC, partitions=3)
    produce(c.bootstrap, TOPIC, [(k, v, p, T0_MS + dt, h) for k, v, p, dt, h in RECORDS])
    return c.bootstrap


def expected_rows(headers: bool) -> list[dict[str, Any]]:
    """The records as the Kafka source's columns, in (partition, offset) order."""
    out, next_offset = [], {0: 0, 1: 0, 2: 0}
    for key, value, p, dt, hs in RECORDS:
        row = {"key": key, "value": value, "topic": TOPIC, "partition": p,
               "offset": next_offset[p], "timestamp": T0 + timedelta(milliseconds=dt),
               "timestampType": 0}
        if headers:
            row["headers"] = [{"key": k, "value": v} for k, v in hs]
        out.append(row)
        next_offset[p] += 1
    return sorted(out, key=lambda r: (r["partition"], r["offset"]))


def read_parquet(out: Path) -> list[dict[str, Any]]:
    return pq.read_table(out).to_pylist()


def test_export_parquet_keeps_every_column(
    spark: Any, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "export"
    assert export_parquet.main(["--bootstrap-server", bootstrap, "--topic", TOPIC,
                                "--out", str(out), "--include-headers"]) == 0
    rows = sorted(read_parquet(out), key=lambda r: (r["partition"], r["offset"]))
    assert rows == expected_rows(headers=True)
    files = len(list(out.glob("part-*.parquet")))
    assert capsys.readouterr().out == (
        f"exported {len(RECORDS)} rows of topic {TOPIC} to {files} Parquet files in {out}\n"
    )


def test_export_parquet_offset_range_without_headers(
    spark: Any, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "range"
    start = json.dumps({TOPIC: {"0": 1, "1": -2, "2": 2}})
    end = json.dumps({TOPIC: {"0": 2, "1": 1, "2": -1}})
    export_parquet.main(["--bootstrap-server", bootstrap, "--topic", TOPIC, "--out", str(out),
                         "--starting-offsets", start, "--ending-offsets", end])
    want = [r for r in expected_rows(headers=False)
            if (r["partition"], r["offset"]) in {(0, 1), (1, 0), (2, 2)}]
    assert sorted(read_parquet(out), key=lambda r: r["partition"]) == want
    assert capsys.readouterr().out.startswith(f"exported 3 rows of topic {TOPIC} to ")


TABLE = """\
key     count  value_bytes  first_timestamp          last_timestamp
a           3            5  2024-05-01 12:00:00.000  2024-05-01 12:00:04.000
b           2            5  2024-05-01 12:00:00.999  2024-05-01 12:00:01.000
c           2            6  2024-05-01 12:00:00.500  2024-05-01 12:00:06.123
(null)      1            3  2024-05-01 12:00:02.000  2024-05-01 12:00:02.000
\\xff        1            2  2024-05-01 12:00:07.000  2024-05-01 12:00:07.000
"""


def test_key_counts_prints_the_top_keys(
    spark: Any, bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert key_counts.main(["--bootstrap-server", bootstrap, "--topic", TOPIC,
                            "--top", "2"]) == 0
    assert capsys.readouterr().out == "\n".join([
        f"top 2 of 5 keys of topic {TOPIC} by count",
        "key  count  value_bytes  first_timestamp          last_timestamp",
        "a        3            5  2024-05-01 12:00:00.000  2024-05-01 12:00:04.000",
        "b        2            5  2024-05-01 12:00:00.999  2024-05-01 12:00:01.000",
    ]) + "\n"


def test_key_counts_writes_every_key_to_parquet(
    spark: Any, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "counts"
    key_counts.main(["--bootstrap-server", bootstrap, "--topic", TOPIC, "--top", "5",
                     "--out", str(out)])
    assert capsys.readouterr().out == (
        f"top 5 of 5 keys of topic {TOPIC} by count\n{TABLE}wrote 5 rows to {out}\n"
    )

    def ts(ms: int) -> datetime:
        return T0 + timedelta(milliseconds=ms)

    assert sorted(read_parquet(out), key=lambda r: repr(r["key"])) == sorted([
        {"key": b"a", "count": 3, "value_bytes": 5, "first_timestamp": ts(0),
         "last_timestamp": ts(4000)},
        {"key": b"b", "count": 2, "value_bytes": 5, "first_timestamp": ts(999),
         "last_timestamp": ts(1000)},
        {"key": b"c", "count": 2, "value_bytes": 6, "first_timestamp": ts(500),
         "last_timestamp": ts(6123)},
        {"key": None, "count": 1, "value_bytes": 3, "first_timestamp": ts(2000),
         "last_timestamp": ts(2000)},
        {"key": b"\xff", "count": 1, "value_bytes": 2, "first_timestamp": ts(7000),
         "last_timestamp": ts(7000)},
    ], key=lambda r: repr(r["key"]))


def test_missing_topic_gives_empty_results(
    spark: Any, bootstrap: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Like Spark's Kafka source, a subscribed topic that does not exist reads as empty.
    topic = "jobs-missing"
    assert key_counts.main(["--bootstrap-server", bootstrap, "--topic", topic]) == 0
    assert capsys.readouterr().out == (
        f"top 0 of 0 keys of topic {topic} by count\n"
        "key  count  value_bytes  first_timestamp  last_timestamp\n"
    )
    out = tmp_path / "empty"
    assert export_parquet.main(["--bootstrap-server", bootstrap, "--topic", topic,
                                "--out", str(out), "--include-headers"]) == 0
    assert read_parquet(out) == []
    assert capsys.readouterr().out.startswith(f"exported 0 rows of topic {topic} to ")
