"""`kraft leader-election`: kafka-leader-election.sh over the Kafka protocol (ElectLeaders
through confluent-kafka's AdminClient).

    kraft leader-election --bootstrap-server HOST:PORT --election-type PREFERRED \\
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file FILE)

The JSON file is Kafka's: {"partitions": [{"topic": "t", "partition": 0}, ...]}. Output
is Kafka's: "Successfully completed leader election (PREFERRED) for partitions t-0, t-1",
"Valid replica already elected for partitions t-2", and for each failure "Error
completing leader election (PREFERRED) for partition: t-3: <error>", then exit status 1
("N replica(s) could not be elected").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kraft.tools.client_common import (
    AdminTool,
    CliError,
    bootstrap_parser,
    resolve_connection,
    run_reporting,
    timeout_parser,
)

COMMANDS = ("leader-election",)
ELECTION_TYPES = ("PREFERRED", "UNCLEAN")


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "leader-election",
        parents=[bootstrap_parser(), timeout_parser()],
        help="elect preferred or unclean leaders (kafka-leader-election)",
        description="Run preferred or unclean leader elections, as kafka-leader-election.sh.",
    )
    p.add_argument(
        "--election-type",
        required=True,
        type=str.upper,
        choices=ELECTION_TYPES,
        help="PREFERRED (the first replica, if in sync) or UNCLEAN (any live replica of a "
        "partition without a leader)",
    )
    p.add_argument("--topic", help="the topic (with --partition)")
    p.add_argument("--partition", type=int, help="the partition (with --topic)")
    p.add_argument(
        "--all-topic-partitions", action="store_true", help="every partition of the cluster"
    )
    p.add_argument(
        "--path-to-json-file",
        metavar="FILE",
        help='{"partitions": [{"topic": "t", "partition": 0}, ...]}',
    )
    # Kafka's own name for --command-config in this tool.
    p.add_argument("--admin.config", dest="admin_config", metavar="FILE", help=argparse.SUPPRESS)


def partitions_of(args: argparse.Namespace) -> list[tuple[str, int]] | None:
    """The partitions asked for (None: all), checked as Kafka's tool checks them."""
    given = [args.topic is not None, args.all_topic_partitions, bool(args.path_to_json_file)]
    if sum(given) != 1:
        raise CliError(
            "give exactly one of --topic/--partition, --all-topic-partitions, --path-to-json-file"
        )
    if args.all_topic_partitions:
        if args.partition is not None:
            raise CliError("--partition goes with --topic")
        return None
    if args.topic is not None:
        if args.partition is None:
            raise CliError("--topic needs --partition")
        return [(args.topic, args.partition)]
    return _from_json(Path(args.path_to_json_file))


def _from_json(path: Path) -> list[tuple[str, int]]:
    try:
        data = json.loads(path.read_text())
        out = [(str(p["topic"]), int(p["partition"])) for p in data["partitions"]]
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except (ValueError, KeyError, TypeError) as exc:
        raise CliError(
            f'{path}: expected {{"partitions": [{{"topic": ..., "partition": ...}}]}} ({exc})'
        ) from None
    duplicates = sorted({f"{t}-{p}" for t, p in out if out.count((t, p)) > 1})
    if duplicates:
        raise CliError(f"Replica election data contains duplicate partitions: {duplicates}")
    if not out:
        raise CliError(f"{path}: no partitions")
    return out


def run(args: argparse.Namespace) -> int:
    def action() -> int:
        from confluent_kafka import ElectionType, TopicPartition

        if args.admin_config and not args.command_config:
            args.command_config = args.admin_config
        asked = partitions_of(args)
        resolve_connection(args)
        tool = AdminTool(args)
        kind = ElectionType[args.election_type]
        tps = None if asked is None else [TopicPartition(t, p) for t, p in asked]
        # No request_timeout: confluent-kafka 2.16's elect_leaders fails to parse its
        # keyword arguments; the tool's own wait bounds the call (--timeout-ms).
        results = tool._get(tool.client.elect_leaders(kind, tps))
        return report(args.election_type, results)

    return run_reporting("leader-election", action)


def report(election_type: str, results: dict[Any, Any]) -> int:
    """Kafka's LeaderElectionCommand output; 1 when some election failed."""
    from confluent_kafka import KafkaError

    succeeded, noop, failed = [], [], []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        name = f"{tp.topic}-{tp.partition}"
        if err is None:
            succeeded.append(name)
        elif err.code() == KafkaError.ELECTION_NOT_NEEDED:  # a KafkaError per partition
            noop.append(name)
        else:
            failed.append((name, f"{err.str()} ({err.name()})"))
    if succeeded:
        print(
            f"Successfully completed leader election ({election_type}) for partitions "
            + ", ".join(succeeded)
        )
    if noop:
        print("Valid replica already elected for partitions " + ", ".join(noop))
    for name, why in failed:
        print(f"Error completing leader election ({election_type}) for partition: {name}: {why}")
    if failed:
        raise CliError(f"{len(failed)} replica(s) could not be elected")
    return 0
