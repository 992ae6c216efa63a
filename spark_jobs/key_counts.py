"""Per-key summary of a topic: record count, value bytes, first and last timestamp.

    python -m spark_jobs.key_counts --bootstrap-server 127.0.0.1:9092 --topic events \\
        [--top 10] [--out /tmp/key_counts.parquet] [--starting-offsets JSON] ...

Prints the top N keys by count (ties by key) as a table. `--out` writes every key's row
to Parquet (a directory that must not exist yet). A null key is a key of its own, shown
as (null); a null value (a tombstone) counts as a record of 0 bytes. First and last are
the smallest and largest record timestamps, in UTC.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from spark_jobs.job_common import (
    add_source_args,
    job_session,
    parquet_timestamps_as_micros,
    read_topic,
)

TS_FORMAT = "yyyy-MM-dd HH:mm:ss.SSS"  # Spark datetime pattern; the session is in UTC
COLUMNS = ("key", "count", "value_bytes", "first_timestamp", "last_timestamp")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.key_counts",
                                     description=__doc__.splitlines()[0])
    add_source_args(parser)
    parser.add_argument("--top", type=int, default=10, metavar="N",
                        help="keys to print (default 10)")
    parser.add_argument("--out", type=Path,
                        help="also write every key's row to Parquet here (a new directory)")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    return args


def key_counts(df: Any) -> Any:
    """One row per key: key, count, value_bytes, first_timestamp, last_timestamp."""
    from pyspark.sql import functions as F

    return df.groupBy("key").agg(
        F.count(F.lit(1)).alias("count"),
        # length() of a binary is its byte count; sum() of only nulls is null, hence 0.
        F.coalesce(F.sum(F.length("value")), F.lit(0)).cast("long").alias("value_bytes"),
        F.min("timestamp").alias("first_timestamp"),
        F.max("timestamp").alias("last_timestamp"),
    )


def top_rows(counts: Any, n: int) -> list[tuple[str, ...]]:
    """The top `n` rows by count as display strings (timestamps formatted by Spark, in
    the session's UTC: collect() would give datetimes in the local zone)."""
    from pyspark.sql import functions as F

    rows = (
        counts.orderBy(F.desc("count"), F.asc_nulls_first("key"))
        .limit(n)
        .select("key", "count", "value_bytes",
                F.date_format("first_timestamp", TS_FORMAT),
                F.date_format("last_timestamp", TS_FORMAT))
        .collect()
    )
    return [(show_key(r[0]), str(r[1]), str(r[2]), r[3], r[4]) for r in rows]


def show_key(key: bytes | bytearray | None) -> str:
    if key is None:
        return "(null)"
    return bytes(key).decode("utf-8", errors="backslashreplace")


NUMERIC = {"count", "value_bytes"}  # right-aligned; the rest left-aligned


def format_table(rows: list[tuple[str, ...]]) -> str:
    """Columns padded to their widest cell, two spaces apart."""
    cells = [COLUMNS, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(COLUMNS))]
    lines = []
    for r in cells:
        parts = [c.rjust(w) if name in NUMERIC else c.ljust(w)
                 for name, c, w in zip(COLUMNS, r, widths, strict=True)]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with job_session("kraft-key-counts") as spark:
        counts = key_counts(read_topic(spark, args)).cache()
        try:
            keys = counts.count()
            rows = top_rows(counts, args.top)
            if args.out is not None:
                with parquet_timestamps_as_micros(spark):
                    counts.write.parquet(str(args.out))  # refuses an existing --out
        finally:
            counts.unpersist()
    print(f"top {len(rows)} of {keys} keys of topic {args.topic} by count")
    print(format_table(rows))
    if args.out is not None:
        print(f"wrote {keys} rows to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
