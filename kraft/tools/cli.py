"""The `kraft` command line.

`dev` (a local cluster), `controller`, `broker`, `topics`, `produce`, `consume`
(kafka-topics and the console producer/consumer, over the Kafka protocol), `groups`
(kafka-consumer-groups), `acls` (kafka-acls), `configs` (kafka-configs for SCRAM
users), `transactions` (kafka-transactions), `metadata` (like kafka-metadata-shell)
and `dump-log` (like kafka-dump-log).
Every client command takes `--command-config client.properties`
(kraft/tools/client_common.py, client_config.py).
"""

from __future__ import annotations

import argparse
import sys

from kraft.tools import (  # issue 14: elections, describing
    acls_cli,
    client_cli,
    configs_cli,
    dump_log,
    elect_cli,
    groups_cli,
    log_dirs_cli,
    metadata_cli,
    quorum_cli,
    reassign_cli,
    records_cli,
    transactions_cli,
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="kraft", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    dump_log.add_parser(sub)
    ctl = sub.add_parser("controller", help="run a controller (Raft voter + HTTP API)")
    ctl.add_argument("--config", required=True, help="controller.properties")
    ctl.add_argument("--override", action="append", default=[], metavar="KEY=VALUE")
    metadata_cli.add_parser(sub)
    client_cli.add_parsers(sub)
    groups_cli.add_parser(sub)
    acls_cli.add_parser(sub)
    configs_cli.add_parser(sub)
    elect_cli.add_parser(sub)
    log_dirs_cli.add_parser(sub)
    reassign_cli.add_parser(sub)
    quorum_cli.add_parser(sub)
    records_cli.add_parser(sub)
    transactions_cli.add_parser(sub)
    # `dev` and `broker` parse their own options (see kraft/tools/dev.py, broker/main.py).
    sub.add_parser("dev", help="run a local cluster (3 controllers, 3 brokers)", add_help=False)
    sub.add_parser("broker", help="run a Kafka-protocol broker", add_help=False)
    # parse_known_args: `dev` and `broker` take the options after their name themselves.
    args, unknown = parser.parse_known_args(argv)
    if args.command in ("dev", "broker"):
        rest = list(sys.argv[1:] if argv is None else argv)
        rest = rest[rest.index(args.command) + 1 :]
        if args.command == "dev":
            from kraft.tools import dev  # imported late: only this command needs it

            return dev.main(rest)
        from broker import main as broker_main

        return broker_main.main(rest)
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "dump-log":
        return dump_log.run(args)
    if args.command == "metadata":
        return metadata_cli.run(args)
    if args.command in client_cli.COMMANDS:
        return client_cli.run(args)
    if args.command in groups_cli.COMMANDS:
        return groups_cli.run(args)
    if args.command in acls_cli.COMMANDS:
        return acls_cli.run(args)
    if args.command in configs_cli.COMMANDS:
        return configs_cli.run(args)
    for tool in (elect_cli, log_dirs_cli, quorum_cli, reassign_cli, records_cli, transactions_cli):
        if args.command in tool.COMMANDS:
            return tool.run(args)
    # The one command left: `controller`.
    from kraft import controller_main  # imported late: it pulls in pysyncobj and aiohttp

    forwarded = ["--config", args.config]
    for item in args.override:
        forwarded += ["--override", item]
    return controller_main.main(forwarded)


if __name__ == "__main__":
    sys.exit(main())
