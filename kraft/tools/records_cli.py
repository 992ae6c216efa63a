"""`kraft delete-records` and `kraft get-offsets`: kafka-delete-records.sh and
kafka-get-offsets.sh over the Kafka protocol (DeleteRecords and ListOffsets through
confluent-kafka's AdminClient).

    kraft delete-records --bootstrap-server HOST:PORT --offset-json-file FILE
    kraft get-offsets --bootstrap-server HOST:PORT [--topic REGEX] [--partitions 0,1]
        [--time -1|-2|-3|-4|-5|<ms>|latest|earliest|max-timestamp|...]

The offset JSON file is Kafka's: {"partitions": [{"topic": "t", "partition": 0,
"offset": 3}], "version": 1} (offset -1: the high watermark). delete-records prints
Kafka's lines, "Records delete operation completed:" then "partition: t-0\tlow_watermark:
3" or "partition: t-1\terror: ..." per partition (exit status 0, as Kafka's tool).
get-offsets prints "topic:partition:offset" per partition, sorted; partitions with no
such offset are left out and failed ones reported on stderr, as Kafka's GetOffsetShell.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

from kraft.tools.client_common import (
    AdminTool,
    CliError,
    bootstrap_parser,
    cluster_metadata,
    resolve_connection,
    run_reporting,
    timeout_parser,
)

COMMANDS = ("delete-records", "get-offsets")
OFFSET_JSON_VERSION = 1
# GetOffsetShell's names for ListOffsets' special timestamps.
TIME_NAMES = {
    "latest": -1,
    "earliest": -2,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}


def add_parser(sub: Any) -> None:
    d = sub.add_parser(
        "delete-records",
        parents=[bootstrap_parser(), timeout_parser()],
        help="delete records before offsets (kafka-delete-records)",
        description="Move partitions' log start offsets, as kafka-delete-records.sh.",
    )
    d.add_argument(
        "--offset-json-file",
        required=True,
        metavar="FILE",
        help='{"partitions": [{"topic": "t", "partition": 0, "offset": 3}], "version": 1}',
    )
    g = sub.add_parser(
        "get-offsets",
        parents=[bootstrap_parser(), timeout_parser()],
        help="list partition offsets (kafka-get-offsets)",
        description="Print topic:partition:offset lines, as kafka-get-offsets.sh.",
    )
    g.add_argument("--topic", help="a topic name or regular expression (default: all topics)")
    g.add_argument("--partitions", help="comma-separated partition ids (default: all)")
    g.add_argument(
        "--topic-partitions",
        help="topic:partitions patterns, comma-separated (t:0, t:1-3, t:2-, t)",
    )
    g.add_argument(
        "--time",
        default="-1",
        help="-1/latest, -2/earliest, -3/max-timestamp, -4/earliest-local, "
        "-5/latest-tiered, or a timestamp in ms (default -1)",
    )
    g.add_argument(
        "--exclude-internal-topics", action="store_true", help="leave internal topics out"
    )


def run(args: argparse.Namespace) -> int:
    if args.command == "delete-records":
        return run_reporting("delete-records", lambda: delete_records(args))
    return run_reporting("get-offsets", lambda: get_offsets(args))


# -- delete-records ----------------------------------------------------------------------------


def parse_offset_json(text: str, source: str) -> list[tuple[str, int, int]]:
    """Kafka's DeleteRecordsCommand.parseOffsetJsonStringWithoutDedup, then its check
    for duplicates."""
    try:
        data = json.loads(text)
        version = data.get("version", OFFSET_JSON_VERSION)
        if version != OFFSET_JSON_VERSION:
            raise CliError(f"Not supported version field value {version}")
        out = [(str(p["topic"]), int(p["partition"]), int(p["offset"])) for p in data["partitions"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise CliError(
            f'{source}: expected {{"partitions": [{{"topic": ..., "partition": ..., '
            f'"offset": ...}}], "version": 1}} ({exc})'
        ) from None
    seen = [(t, p) for t, p, _ in out]
    duplicates = sorted({f"{t}-{p}" for t, p in seen if seen.count((t, p)) > 1})
    if duplicates:
        raise CliError(
            "Offset json file contains duplicate topic partitions: " + ",".join(duplicates)
        )
    if not out:
        raise CliError(f"{source}: no partitions")
    return out


def delete_records(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition

    path = Path(args.offset_json_file)
    try:
        text = path.read_text()
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    asked = parse_offset_json(text, str(path))
    resolve_connection(args)
    tool = AdminTool(args)
    # Metadata first: librdkafka's DeleteRecords looks the leaders up once, and finds
    # none while the client is still connecting; this also reports unreachable brokers.
    cluster_metadata(tool.client, tool.bootstrap, tool.timeout_s)
    print("Executing records delete operation")
    futures = tool.client.delete_records(
        [TopicPartition(t, p, offset) for t, p, offset in asked],
        request_timeout=tool.timeout_s,
        operation_timeout=tool.timeout_s,
    )
    print("Records delete operation completed:")
    for tp, fut in futures.items():
        name = f"{tp.topic}-{tp.partition}"
        try:
            result = tool._get(fut)
            print(f"partition: {name}\tlow_watermark: {result.low_watermark}")
        except CliError as exc:
            print(f"partition: {name}\terror: {exc}")
    return 0


# -- get-offsets -------------------------------------------------------------------------------


def parse_time(text: str) -> int:
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    try:
        return int(text)
    except ValueError:
        raise CliError(
            f"Malformed time argument {text}. Please use -1 or latest / -2 or earliest / "
            "-3 or max-timestamp / -4 or earliest-local / -5 or latest-tiered, or a "
            "specified long format timestamp"
        ) from None


def _partition_ids(text: str) -> set[int]:
    try:
        return {int(x) for x in text.split(",") if x.strip()}
    except ValueError:
        raise CliError(f"--partitions takes partition ids separated by commas: {text}") from None


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise CliError(f"bad topic regular expression {text!r}: {exc}") from None


def _filters(args: argparse.Namespace) -> list[tuple[re.Pattern[str], Any]]:
    """(topic pattern, partition test) pairs, from --topic-partitions or
    --topic/--partitions, as GetOffsetShell builds them."""
    if args.topic_partitions:
        if args.topic or args.partitions:
            raise CliError("--topic-partitions cannot be used with --topic or --partitions")
        out = []
        for item in args.topic_partitions.split(","):
            topic, _, part = item.partition(":")
            pattern = _pattern(topic or ".*")
            if not part:
                out.append((pattern, lambda p: True))
            elif m := re.fullmatch(r"(\d*)-(\d*)", part):
                lo = int(m[1]) if m[1] else 0
                hi = int(m[2]) if m[2] else None
                out.append((pattern, lambda p, lo=lo, hi=hi: p >= lo and (hi is None or p < hi)))
            elif part.isdigit():
                out.append((pattern, lambda p, n=int(part): p == n))
            else:
                raise CliError(f"bad partition pattern {part!r} in --topic-partitions")
        return out
    ids = _partition_ids(args.partitions) if args.partitions else None
    return [(_pattern(args.topic or ".*"), lambda p: ids is None or p in ids)]


def get_offsets(args: argparse.Namespace) -> int:
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    when = parse_time(args.time)
    filters = _filters(args)
    resolve_connection(args)
    tool = AdminTool(args)
    metadata = cluster_metadata(tool.client, tool.bootstrap, tool.timeout_s)
    asked: list[tuple[str, int]] = []
    for name, topic in metadata.topics.items():
        if args.exclude_internal_topics and name.startswith("__"):
            continue
        for pattern, wanted in filters:
            if pattern.fullmatch(name):
                asked += [(name, p) for p in topic.partitions if wanted(p)]
                break
    asked = sorted(set(asked))
    if not asked:
        raise CliError("Could not match any topic-partitions with the specified filters")
    if when == -1:
        spec = OffsetSpec.latest()
    elif when == -2:
        spec = OffsetSpec.earliest()
    elif when == -3:
        spec = OffsetSpec.max_timestamp()
    else:  # a timestamp, or -4/-5 which confluent-kafka has no names for
        spec = OffsetSpec.for_timestamp(when)
    futures = tool.client.list_offsets(
        {TopicPartition(t, p): spec for t, p in asked}, request_timeout=tool.timeout_s
    )
    found: dict[tuple[str, int], int] = {}
    for tp, fut in futures.items():
        try:
            result = tool._get(fut)
        except CliError as exc:
            print(
                f"Skip getting offsets for topic-partition {tp.topic}:{tp.partition} "
                f"due to error: {exc}",
                file=sys.stderr,
            )
            continue
        if result.offset != -1:
            found[(tp.topic, tp.partition)] = result.offset
    for (topic, partition), offset in sorted(found.items()):
        print(f"{topic}:{partition}:{offset}")
    return 0
