"""The `kraft` command line.

`dev` (a local cluster), `controller`, `broker`, `topics`, `produce`, `consume`
(kafka-topics and the console producer/consumer, over the Kafka protocol), `metadata`
(like kafka-metadata-shell) and `dump-log` (like kafka-dump-log).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kraft import client_cli, groups_cli, metadata_cli
from storage.record_batch import RecordBatchError, validate_batch
from storage.records import decode_batch

NOT_BUILT: dict[str, str] = {}


def _dump_log(args: argparse.Namespace) -> int:
    """Print each batch of a segment file (and its records with --print-data-log)."""
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"kraft dump-log: {exc}", file=sys.stderr)
        return 2
    pos = 0
    print(f"Dumping {path}")
    while pos < len(data):
        try:
            view = validate_batch(data, pos)
        except RecordBatchError as exc:
            print(f"invalid batch at position {pos}: {exc}")
            return 1
        print(
            f"baseOffset: {view.base_offset} lastOffset: {view.last_offset} "
            f"count: {view.record_count} baseSequence: {view.base_sequence} "
            f"producerId: {view.producer_id} producerEpoch: {view.producer_epoch} "
            f"partitionLeaderEpoch: {view.partition_leader_epoch} "
            f"isTransactional: {str(view.is_transactional).lower()} "
            f"isControl: {str(view.is_control).lower()} position: {pos} "
            f"CreateTime: {view.max_timestamp} size: {view.size} "
            f"magic: {view.magic} compresscodec: {view.compression} crc: {view.crc} isvalid: true"
        )
        if args.print_data_log:
            for rec in decode_batch(view).records:
                key = rec.key.decode("utf-8", "replace") if rec.key is not None else None
                value = rec.value.decode("utf-8", "replace") if rec.value is not None else None
                print(
                    f"| offset: {rec.offset} CreateTime: {rec.timestamp} "
                    f"key: {key} payload: {value}"
                )
        pos += view.size
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kraft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dump = sub.add_parser("dump-log", help="print the batches of a .log segment file")
    dump.add_argument("file")
    dump.add_argument("--print-data-log", action="store_true", help="also print records")
    ctl = sub.add_parser("controller", help="run a controller (Raft voter + HTTP API)")
    ctl.add_argument("--config", required=True, help="controller.properties")
    ctl.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    metadata_cli.add_parser(sub)
    client_cli.add_parsers(sub)
    groups_cli.add_parser(sub)
    # `dev` and `broker` parse their own options (see kraft/dev.py and broker/main.py).
    sub.add_parser("dev", help="run a local cluster (3 controllers, 3 brokers)", add_help=False)
    sub.add_parser("broker", help="run a Kafka-protocol broker", add_help=False)
    for name, what in NOT_BUILT.items():
        sub.add_parser(name, help=f"(not built yet) {what}")
    # Options of the commands not built yet (e.g. `kraft dev --data-dir ./data`, which
    # `make run` passes) are accepted so that the message below is what the user sees.
    args, _unknown = parser.parse_known_args(argv)
    if args.command in ("dev", "broker"):
        rest = list(sys.argv[1:] if argv is None else argv)
        rest = rest[rest.index(args.command) + 1 :]
        if args.command == "dev":
            from kraft import dev  # imported late: only this command needs it

            return dev.main(rest)
        from broker import main as broker_main

        return broker_main.main(rest)
    known = ("dump-log", "metadata", "controller", *client_cli.COMMANDS, *groups_cli.COMMANDS)
    if args.command in known and _unknown:
        parser.error(f"unrecognized arguments: {' '.join(_unknown)}")
    if args.command == "dump-log":
        return _dump_log(args)
    if args.command == "metadata":
        return metadata_cli.run(args)
    if args.command in client_cli.COMMANDS:
        return client_cli.run(args)
    if args.command in groups_cli.COMMANDS:
        return groups_cli.run(args)
    if args.command == "controller":
        from kraft import controller_main  # imported late: it pulls in pysyncobj and aiohttp

        forwarded = ["--config", args.config]
        for item in args.override:
            forwarded += ["--override", item]
        return controller_main.main(forwarded)
    print(f"kraft {args.command}: not built yet: {NOT_BUILT[args.command]}.", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
