"""`kraft transactions`: kafka-transactions.sh over the Kafka protocol (ListTransactions,
DescribeTransactions, DescribeProducers, WriteTxnMarkers through kafka-python's admin
client: confluent-kafka has none of these calls).

    kraft transactions --bootstrap-server HOST:PORT list
    kraft transactions --bootstrap-server HOST:PORT describe --transactional-id ID
    kraft transactions --bootstrap-server HOST:PORT describe-producers --topic T --partition P
    kraft transactions --bootstrap-server HOST:PORT abort --topic T --partition P --start-offset N

Output is Kafka's TransactionsCommand: a table whose every cell is padded to its
column's width and followed by a tab (ToolsUtils.prettyPrintTable). `abort` finds the
producer whose open transaction starts at --start-offset on the partition leader
(DescribeProducers) and writes an ABORT marker there with its producer id, epoch and
coordinator epoch (Admin.abortTransaction); --producer-id, --producer-epoch and
--coordinator-epoch name it directly instead, as for brokers older than 3.0.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kraft.tools.client_common import (
    CliError,
    bootstrap_parser,
    describe_error,
    resolve_connection,
    run_reporting,
    timeout_parser,
)
from kraft.tools.python_admin import admin_client

COMMANDS = ("transactions",)

LIST_HEADERS = ("TransactionalId", "Coordinator", "ProducerId", "TransactionState")
DESCRIBE_HEADERS = (
    "CoordinatorId",
    "TransactionalId",
    "ProducerId",
    "ProducerEpoch",
    "TransactionState",
    "TransactionTimeoutMs",
    "CurrentTransactionStartTimeMs",
    "TransactionDurationMs",
    "TopicPartitions",
)
PRODUCERS_HEADERS = (
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "transactions",
        parents=[bootstrap_parser(), timeout_parser()],
        help="list, describe and abort transactions (kafka-transactions)",
        description="Analyze the transactional state of producers in the cluster and "
        "recover from hanging transactions, as kafka-transactions.sh.",
    )
    cmds = p.add_subparsers(dest="transactions_command", required=True, metavar="COMMAND")
    # The connection options also after the command (`transactions list --bootstrap-server
    # ...`); suppressed defaults there keep values given before it.
    conn = [_suppressed(bootstrap_parser()), _suppressed(timeout_parser())]

    def command(name: str, help: str) -> argparse.ArgumentParser:
        return cmds.add_parser(name, parents=conn, help=help)  # type: ignore[no-any-return]

    ls = command("list", help="list transactions")
    ls.add_argument(
        "--duration-filter",
        type=int,
        metavar="MS",
        help="only transactions running longer than this (ListTransactions v1)",
    )
    d = command("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True, help="transactional id")
    dp = command(
        "describe-producers", help="describe the states of active producers for a partition"
    )
    dp.add_argument("--broker-id", type=int, help="a replica to ask (default: the leader)")
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=int, required=True, help="partition number")
    a = command("abort", help="abort a hanging transaction (requires administrative privileges)")
    a.add_argument("--topic", required=True, help="topic name")
    a.add_argument("--partition", type=int, required=True, help="partition number")
    a.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    a.add_argument("--producer-id", type=int, help="producer id (brokers older than 3.0)")
    a.add_argument("--producer-epoch", type=int, help="producer epoch (brokers older than 3.0)")
    a.add_argument(
        "--coordinator-epoch", type=int, help="coordinator epoch (brokers older than 3.0)"
    )


def _suppressed(parent: argparse.ArgumentParser) -> argparse.ArgumentParser:
    for action in parent._actions:
        action.default = argparse.SUPPRESS
    return parent


# -- rendering (pure) -----------------------------------------------------------------------


def pretty_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """ToolsUtils.prettyPrintTable: each cell left-justified to its column's widest
    value, then a tab; one line per row, the headers first."""
    rows = [list(r) for r in rows]
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, r, strict=True)]
    lines = ["".join(c.ljust(w) + "\t" for c, w in zip(row, widths, strict=True))
             for row in [list(headers), *rows]]  # fmt: skip
    return "\n".join(lines) + "\n"


def _state(state: Any) -> str:
    return str(getattr(state, "value", state))


def list_rows(by_broker: Mapping[int, Sequence[Any]]) -> list[list[str]]:
    """ListTransactionsCommand's rows: per coordinator (broker id order), its listings."""
    return [
        [t.transactional_id, str(broker), str(t.producer_id), _state(t.state)]
        for broker, listings in sorted(by_broker.items())
        for t in listings
    ]


def describe_row(transactional_id: str, d: Any, now_ms: int) -> list[str]:
    """DescribeTransactionsCommand's row; start time and duration "None" when no
    transaction is open (start time -1)."""
    start = d.transaction_start_time_ms
    started = start is not None and start >= 0
    parts = sorted((tp.topic, tp.partition) for tp in d.topic_partitions)
    return [
        str(d.coordinator_id),
        transactional_id,
        str(d.producer_id),
        str(d.producer_epoch),
        _state(d.state),
        str(d.transaction_timeout_ms),
        str(start) if started else "None",
        str(now_ms - start) if started else "None",
        ",".join(f"{t}-{p}" for t, p in parts),
    ]


def producer_rows(producers: Sequence[Any]) -> list[list[str]]:
    """DescribeProducersCommand's rows ("None": no open transaction)."""
    return [
        [
            str(p.producer_id),
            str(p.producer_epoch),
            str(p.coordinator_epoch if p.coordinator_epoch >= 0 else -1),
            str(p.last_sequence),
            str(p.last_timestamp),
            str(p.current_transaction_start_offset)
            if p.current_transaction_start_offset >= 0
            else "None",
        ]
        for p in producers
    ]


def find_open_transaction(
    producers: Sequence[Any], topic: str, partition: int, start_offset: int
) -> tuple[int, int, int]:
    """(producer id, epoch, coordinator epoch) of the producer whose open transaction
    starts at `start_offset` (AbortTransactionCommand.buildAbortSpec: a coordinator
    epoch DescribeProducers does not know is 0)."""
    for p in producers:
        if p.current_transaction_start_offset == start_offset:
            return p.producer_id, p.producer_epoch, max(p.coordinator_epoch, 0)
    raise CliError(
        f"Could not find any open transactions starting at offset {start_offset} "
        f"on partition {topic}-{partition}"
    )


# -- commands --------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    def action() -> int:
        resolve_connection(args)
        admin = admin_client(args)
        try:
            print(_COMMANDS[args.transactions_command](admin, args), end="")
        finally:
            admin.close()
        return 0

    return run_reporting(f"transactions {args.transactions_command}", action)


def _failed(what: str, exc: Exception) -> CliError:
    """printErrorAndExit(message, cause) in Kafka's words."""
    return CliError(f"{what}: {describe_error(exc)}. Enable debug logging for additional detail.")


def _list(admin: Any, args: argparse.Namespace) -> str:
    try:
        found = admin.list_transactions(duration_filter_ms=args.duration_filter)
    except Exception as exc:  # noqa: BLE001 - one line, Kafka's wording
        raise _failed("Failed to list transactions", exc) from None
    return pretty_table(LIST_HEADERS, list_rows(found))


def _describe(admin: Any, args: argparse.Namespace) -> str:
    tid = args.transactional_id
    try:
        d = admin.describe_transactions([tid])[tid]
    except Exception as exc:  # noqa: BLE001
        what = f"Failed to describe transaction state of transactional-id `{tid}`"
        raise _failed(what, exc) from None
    now_ms = int(time.time() * 1000)
    return pretty_table(DESCRIBE_HEADERS, [describe_row(tid, d, now_ms)])


def _producers(admin: Any, args: argparse.Namespace) -> Sequence[Any]:
    from kafka.structs import TopicPartition

    tp = TopicPartition(args.topic, args.partition)
    return admin.describe_producers([tp], broker_id=getattr(args, "broker_id", None))[
        tp
    ].active_producers


def _describe_producers(admin: Any, args: argparse.Namespace) -> str:
    try:
        producers = _producers(admin, args)
    except Exception as exc:  # noqa: BLE001
        on = f"broker {args.broker_id}" if args.broker_id is not None else "leader"
        raise _failed(
            f"Failed to describe producers for partition {args.topic}-{args.partition} on {on}",
            exc,
        ) from None
    return pretty_table(PRODUCERS_HEADERS, producer_rows(producers))


def _abort(admin: Any, args: argparse.Namespace) -> str:
    from kafka.admin._transactions import AbortTransactionSpec
    from kafka.structs import TopicPartition

    where = f"{args.topic}-{args.partition}"
    if args.start_offset is None and args.producer_id is None:
        raise CliError(
            "The transaction to abort must be identified either with --start-offset (for "
            "brokers on 3.0 or above) or with --producer-id, --producer-epoch, and "
            "--coordinator-epoch (for older brokers)"
        )
    if args.start_offset is None:
        if args.producer_epoch is None:
            raise CliError("Missing required argument --producer-epoch")
        if args.coordinator_epoch is None:
            raise CliError("Missing required argument --coordinator-epoch")
        # A transaction that hung before its producer's first marker has coordinator
        # epoch -1; 0 is at most any real one (as Kafka's tool does).
        pid, epoch, coordinator_epoch = (
            args.producer_id,
            args.producer_epoch,
            max(args.coordinator_epoch, 0),
        )
    else:
        args.broker_id = None  # the leader's view
        try:
            producers = _producers(admin, args)
        except Exception as exc:  # noqa: BLE001
            what = f"Failed to validate producer state for partition {where}"
            raise _failed(what, exc) from None
        pid, epoch, coordinator_epoch = find_open_transaction(
            producers, args.topic, args.partition, args.start_offset
        )
    spec = AbortTransactionSpec(
        TopicPartition(args.topic, args.partition), pid, epoch, coordinator_epoch
    )
    try:
        admin.abort_transaction(spec)
    except Exception as exc:  # noqa: BLE001
        raise _failed(
            f"Failed to abort transaction AbortTransactionSpec(topicPartition={where}, "
            f"producerId={pid}, producerEpoch={epoch}, coordinatorEpoch={coordinator_epoch})",
            exc,
        ) from None
    return ""


_COMMANDS: dict[str, Callable[[Any, argparse.Namespace], str]] = {
    "list": _list,
    "describe": _describe,
    "describe-producers": _describe_producers,
    "abort": _abort,
}
