"""Export a topic to Parquet, every Kafka column kept.

    python -m spark_jobs.export_parquet --bootstrap-server 127.0.0.1:9092 \\
        --topic events --out /tmp/events.parquet [--include-headers] \\
        [--starting-offsets JSON] [--ending-offsets JSON] [--mode overwrite]

Prints one line: rows, files and the output directory. The counts are read back from
the footers of the files this run wrote, so they say what is on disk.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pyarrow.parquet as pq

from spark_jobs.job_common import (
    add_source_args,
    job_session,
    parquet_timestamps_as_micros,
    read_topic,
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m spark_jobs.export_parquet",
                                     description=__doc__.splitlines()[0])
    add_source_args(parser)
    parser.add_argument("--out", required=True, type=Path, help="output directory")
    parser.add_argument("--include-headers", action="store_true",
                        help="add the headers column (array<struct<key,value>>)")
    parser.add_argument("--mode", default="errorifexists",
                        choices=["errorifexists", "overwrite", "append", "ignore"],
                        help="Spark save mode when --out exists (default: errorifexists)")
    return parser.parse_args(argv)


def parquet_files(out: Path) -> set[Path]:
    return set(out.glob("part-*.parquet"))


def parquet_rows(files: set[Path]) -> int:
    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    before = parquet_files(args.out)  # --mode append: count only this run's files
    with job_session("kraft-export-parquet") as spark:
        df = read_topic(spark, args, include_headers=args.include_headers)
        with parquet_timestamps_as_micros(spark):
            df.write.mode(args.mode).parquet(str(args.out))
    files = parquet_files(args.out) - before
    print(f"exported {parquet_rows(files)} rows of topic {args.topic} to {len(files)} "
          f"Parquet files in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
