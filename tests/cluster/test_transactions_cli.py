"""`kraft transactions`: Kafka's TransactionsCommand output and abort flow, against a
fake admin client (no cluster; the CLI end to end runs with the transactions e2e)."""

from __future__ import annotations

import argparse
from types import SimpleNamespace
from typing import Any

import pytest
from kafka.admin._transactions import (
    PartitionProducerState,
    ProducerState,
    TransactionDescription,
    TransactionListing,
    TransactionState,
)
from kafka.errors import TransactionalIdNotFoundError
from kafka.structs import TopicPartition

from kraft.tools import cli, client_cli, transactions_cli
from kraft.tools.client_cli import _consumer_conf
from kraft.tools.client_common import CliError
from kraft.tools.transactions_cli import find_open_transaction, pretty_table

B = ["--bootstrap-server", "127.0.0.1:9092"]


class FakeAdmin:
    def __init__(self) -> None:
        self.aborted: list[Any] = []
        self.producers = [
            ProducerState(11, 0, 41, 1_700_000_000_000, -1, -1),  # idempotent, no txn
            ProducerState(12, 3, 7, 1_700_000_000_001, 5, 120),  # open txn at 120
            ProducerState(13, 1, 2, 1_700_000_000_002, -1, 300),  # no marker yet
        ]

    def list_transactions(self, duration_filter_ms: int | None = None) -> Any:
        return {
            2: [TransactionListing("payments", 12, TransactionState.ONGOING)],
            1: [
                TransactionListing("orders-0", 7, TransactionState.COMPLETE_COMMIT),
                TransactionListing("o", 8, TransactionState.EMPTY),
            ],
        }

    def describe_transactions(self, ids: list[str]) -> Any:
        if ids == ["nope"]:
            raise TransactionalIdNotFoundError("no such transactional id")
        tps = {TopicPartition("out", 1), TopicPartition("out", 0), TopicPartition("a", 2)}
        started = ids == ["payments"]
        return {
            ids[0]: TransactionDescription(
                2,
                TransactionState.ONGOING if started else TransactionState.EMPTY,
                12,
                3,
                60000,
                1_000 if started else -1,
                tps if started else set(),
            )
        }

    def describe_producers(self, tps: list[Any], broker_id: int | None = None) -> Any:
        return {tps[0]: PartitionProducerState(self.producers)}

    def abort_transaction(self, spec: Any) -> None:
        self.aborted.append(spec)

    def close(self) -> None:
        pass


@pytest.fixture
def admin(monkeypatch: pytest.MonkeyPatch) -> FakeAdmin:
    fake = FakeAdmin()
    monkeypatch.setattr(transactions_cli, "admin_client", lambda args: fake)
    monkeypatch.setattr(transactions_cli.time, "time", lambda: 5.0)  # now: 5000 ms
    return fake


def test_pretty_table_pads_every_cell_and_ends_it_with_a_tab() -> None:
    out = pretty_table(("A", "Long"), [["xyz", "1"], ["", "22"]])
    assert out == "A  \tLong\t\nxyz\t1   \t\n   \t22  \t\n"


def test_list_prints_each_coordinators_listings(admin: FakeAdmin, capsys: Any) -> None:
    assert cli.main(["transactions", *B, "list"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "TransactionalId\tCoordinator\tProducerId\tTransactionState\t",
        "orders-0       \t1          \t7         \tCompleteCommit  \t",
        "o              \t1          \t8         \tEmpty           \t",
        "payments       \t2          \t12        \tOngoing         \t",
    ]


def test_describe_an_open_and_an_idle_transactional_id(admin: FakeAdmin, capsys: Any) -> None:
    assert cli.main(["transactions", "describe", "--transactional-id", "payments", *B]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split("\t")[:-1] == list(transactions_cli.DESCRIBE_HEADERS)
    cells = [c.strip() for c in row.split("\t")[:-1]]
    assert cells == ["2", "payments", "12", "3", "Ongoing", "60000", "1000", "4000",
                     "a-2,out-0,out-1"]  # fmt: skip
    assert cli.main(["transactions", *B, "describe", "--transactional-id", "idle"]) == 0
    _, row = capsys.readouterr().out.splitlines()
    cells = [c.strip() for c in row.split("\t")[:-1]]
    assert cells[4:] == ["Empty", "60000", "None", "None", ""]


def test_describe_failure_is_kafkas_one_line(admin: FakeAdmin, capsys: Any) -> None:
    assert cli.main(["transactions", *B, "describe", "--transactional-id", "nope"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "Failed to describe transaction state of transactional-id `nope`" in err
    assert err.endswith("Enable debug logging for additional detail.")


def test_describe_producers(admin: FakeAdmin, capsys: Any) -> None:
    argv = ["transactions", *B, "describe-producers", "--topic", "t", "--partition", "0"]
    assert cli.main(argv) == 0
    rows = [[c.strip() for c in line.split("\t")[:-1]]
            for line in capsys.readouterr().out.splitlines()]  # fmt: skip
    assert rows == [
        list(transactions_cli.PRODUCERS_HEADERS),
        ["11", "0", "-1", "41", "1700000000000", "None"],
        ["12", "3", "5", "7", "1700000000001", "120"],
        ["13", "1", "-1", "2", "1700000000002", "300"],
    ]


def test_abort_by_start_offset_uses_that_producers_ids(admin: FakeAdmin) -> None:
    argv = ["transactions", *B, "abort", "--topic", "t", "--partition", "3"]
    assert cli.main([*argv, "--start-offset", "120"]) == 0
    [spec] = admin.aborted
    assert (spec.topic_partition, spec.producer_id, spec.producer_epoch) == (
        TopicPartition("t", 3), 12, 3)  # fmt: skip
    assert spec.coordinator_epoch == 5
    assert cli.main([*argv, "--start-offset", "300"]) == 0
    assert admin.aborted[-1].coordinator_epoch == 0  # unknown (-1) becomes 0, as Kafka's


def test_abort_refusals(admin: FakeAdmin, capsys: Any) -> None:
    argv = ["transactions", *B, "abort", "--topic", "t", "--partition", "3"]
    assert cli.main([*argv, "--start-offset", "121"]) == 1
    assert "Could not find any open transactions starting at offset 121 on partition t-3" in (
        capsys.readouterr().err
    )
    assert cli.main(argv) == 1
    assert "must be identified either with --start-offset" in capsys.readouterr().err
    assert cli.main([*argv, "--producer-id", "5"]) == 1
    assert "Missing required argument --producer-epoch" in capsys.readouterr().err
    assert admin.aborted == []
    # the pre-3.0 form names the producer itself
    extra = ["--producer-id", "5", "--producer-epoch", "2", "--coordinator-epoch", "-1"]
    assert cli.main([*argv, *extra]) == 0
    [spec] = admin.aborted
    assert (spec.producer_id, spec.producer_epoch, spec.coordinator_epoch) == (5, 2, 0)


def test_find_open_transaction_names_the_partition() -> None:
    p = SimpleNamespace(current_transaction_start_offset=4, producer_id=1, producer_epoch=0,
                        coordinator_epoch=9)  # fmt: skip
    assert find_open_transaction([p], "t", 0, 4) == (1, 0, 9)
    with pytest.raises(CliError, match="t-0"):
        find_open_transaction([p], "t", 0, 5)


def test_consume_takes_an_isolation_level() -> None:
    parser_args = ["consume", "--topic", "t", *B]
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    client_cli.add_parsers(sub)
    args = parser.parse_args(parser_args)
    args.client_settings = {}
    assert _consumer_conf(args)["isolation.level"] == "read_uncommitted"  # as Kafka's tool
    args = parser.parse_args([*parser_args, "--isolation-level", "read_committed"])
    args.client_settings = {}
    assert _consumer_conf(args)["isolation.level"] == "read_committed"
    with pytest.raises(SystemExit):
        parser.parse_args([*parser_args, "--isolation-level", "serializable"])
