"""`kraft groups list|describe|reset-offsets|delete` as subprocesses against one real
cluster (3 controllers + 3 brokers, processes; `__consumer_offsets` with replication
factor 3 fits it). Groups are made by real confluent-kafka consumers that join, commit
and leave. Every wait is a condition under a deadline.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.harness.cli import free_port, kraft, ok, one_line_error
from tests.harness.cluster_procs import ProcCluster, wait_for

BROKER_PROPS = {
    "offsets.topic.num.partitions": "6",  # fewer partitions to create and load
    "group.initial.rebalance.delay.ms": "300",  # a first join waits this long (Kafka: 3 s)
}
PARTITIONS = 3
PER_PARTITION = 10
BASE_TS = 1_700_000_000_000  # record timestamps for --to-datetime: BASE_TS + 1000 * offset


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    data = Path(tmp_path_factory.mktemp("groups-cli"))
    with ProcCluster(data, broker_props=BROKER_PROPS) as c:
        c.start()
        yield c


def groups(c: ProcCluster, *argv: str) -> list[str]:
    """A `kraft groups ...` command that must succeed: its stdout lines."""
    return ok(kraft("groups", *argv, "--bootstrap-server", c.bootstrap)).splitlines()


def offsets(c: ProcCluster, group: str) -> dict[int, tuple[str, str, str, str]]:
    """`describe --group`: partition -> (CURRENT-OFFSET, LOG-END-OFFSET, LAG, CONSUMER-ID)."""
    lines = groups(c, "describe", "--group", group)
    assert lines[0].split() == [
        "GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
        "CONSUMER-ID", "HOST", "CLIENT-ID",
    ]  # fmt: skip
    out = {}
    for line in lines[1:]:
        g, _topic, p, current, end, lag, member, _host, _client = line.split()
        assert g == group
        out[int(p)] = (current, end, lag, member)
    return out


def state_row(c: ProcCluster, group: str) -> str:
    lines = groups(c, "describe", "--group", group, "--state")
    assert lines[0].split() == [
        "GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"
    ], lines  # fmt: skip
    return lines[1]


def wait_state(c: ProcCluster, group: str, state: str) -> None:
    wait_for(lambda: state in state_row(c, group).split(), 30, f"{group} {state}", c.logs)


def make_topic(c: ProcCluster, topic: str) -> None:
    """PARTITIONS partitions of PER_PARTITION records; offset o has timestamp BASE_TS + 1000*o."""
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)])[topic].result(30)
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all"})
    for part in range(PARTITIONS):
        for o in range(PER_PARTITION):
            p.produce(topic, value=b"v%d" % o, partition=part, timestamp=BASE_TS + 1000 * o)
    assert p.flush(30) == 0, "records left unacknowledged"


def new_consumer(c: ProcCluster, group: str, topic: str) -> Consumer:
    consumer = Consumer({
        "bootstrap.servers": c.bootstrap, "group.id": group, "client.id": "cli-test-client",
        "enable.auto.commit": False, "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([topic])
    return consumer


def make_group(c: ProcCluster, group: str, topic: str, commits: dict[int, int]) -> None:
    """A member joins, consumes up to `commits` (partition -> next offset), commits exactly
    those offsets and leaves: the group is Empty with those committed offsets."""
    make_topic(c, topic)
    consumer = new_consumer(c, group, topic)
    seen: dict[int, int] = {}

    def consumed_enough() -> bool:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            seen[msg.partition()] = max(seen.get(msg.partition(), -1), msg.offset())
        return all(seen.get(p, -1) >= o - 1 for p, o in commits.items())

    try:
        wait_for(consumed_enough, 30, f"{group} to consume", c.logs)
        tps = [TopicPartition(topic, p, o) for p, o in commits.items()]
        assert all(tp.error is None for tp in consumer.commit(offsets=tps, asynchronous=False))
    finally:
        consumer.close()  # LeaveGroup: the group becomes Empty
    wait_state(c, group, "Empty")


class Polling:
    """A subscribed consumer polling in a thread until closed: the group stays Stable."""

    def __init__(self, c: ProcCluster, group: str, topic: str) -> None:
        self.c, self.group, self.topic = c, group, topic
        self.member_id: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        consumer = new_consumer(self.c, self.group, self.topic)
        try:
            while not self._stop.is_set():
                consumer.poll(0.1)
                if consumer.assignment():
                    self.member_id = consumer.memberid()
        finally:
            consumer.close()

    def __enter__(self) -> Polling:
        self._thread.start()
        wait_state(self.c, self.group, "Stable")
        wait_for(lambda: self.member_id, 30, "the member id")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive()


# -- tests -------------------------------------------------------------------------------


def test_list_and_describe_committed_offsets(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-describe", "gc-describe-t", {0: 4, 1: 7})
    assert "gc-describe" in groups(cluster, "list")
    listed = [ln.split() for ln in groups(cluster, "list", "--state")]
    assert listed[0] == ["GROUP", "STATE"] and ["gc-describe", "Empty"] in listed
    # States filter the list (in the ListGroups request), case-insensitively.
    assert ["gc-describe", "Empty"] in [ln.split() for ln in groups(cluster, "list", "--state",
                                                                    "Stable,Empty")]  # fmt: skip
    assert "gc-describe" not in "\n".join(groups(cluster, "list", "--state", "stable"))

    # One row per partition with a committed offset (partition 2 has none and no member).
    assert offsets(cluster, "gc-describe") == {
        0: ("4", "10", "6", "-"),
        1: ("7", "10", "3", "-"),
    }
    proc = kraft("groups", "describe", "--group", "gc-describe", "--members",
                 "--bootstrap-server", cluster.bootstrap)  # fmt: skip
    assert ok(proc) == ""
    assert "Consumer group 'gc-describe' has no active members." in proc.stderr
    row = state_row(cluster, "gc-describe")
    assert row.split()[0] == "gc-describe" and row.split()[-2:] == ["Empty", "0"]
    assert re.search(r" 127\.0\.0\.1:\d+ \(\d+\) ", row), row


def test_active_group_described_and_reset_refused(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-active", "gc-active-t", {0: 2})
    with Polling(cluster, "gc-active", "gc-active-t") as member:
        # Every assigned partition has a row naming its member, committed or not.
        rows = offsets(cluster, "gc-active")
        assert rows == {
            0: ("2", "10", "8", member.member_id),
            1: ("-", "10", "-", member.member_id),
            2: ("-", "10", "-", member.member_id),
        }
        lines = groups(cluster, "describe", "--group", "gc-active", "--members")
        assert lines[0].split() == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        assert [ln.split() for ln in lines[1:]] == [
            ["gc-active", member.member_id, "/127.0.0.1", "cli-test-client", "3"]
        ]
        row = state_row(cluster, "gc-active").split()
        assert row[0] == "gc-active" and row[-3:] == ["range", "Stable", "1"]

        err = one_line_error(
            kraft("groups", "reset-offsets", "--group", "gc-active", "--topic", "gc-active-t",
                  "--to-earliest", "--execute", "--bootstrap-server", cluster.bootstrap),
        )  # fmt: skip
        assert err.endswith(
            "Assignments can only be reset if the group 'gc-active' is inactive, "
            "but the current state is Stable."
        ), err
        assert offsets(cluster, "gc-active")[0][:3] == ("2", "10", "8")


def test_reset_to_earliest_and_latest(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-ends", "gc-ends-t", {0: 4, 1: 7})
    lines = groups(cluster, "reset-offsets", "--group", "gc-ends", "--topic", "gc-ends-t",
                   "--to-earliest", "--execute")  # fmt: skip
    assert [ln.split() for ln in lines] == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        *[["gc-ends", "gc-ends-t", str(p), "0"] for p in range(PARTITIONS)],
    ]
    # Every partition of the topic was reset, the uncommitted partition 2 too.
    assert offsets(cluster, "gc-ends") == {p: ("0", "10", "10", "-") for p in range(PARTITIONS)}
    groups(cluster, "reset-offsets", "--group", "gc-ends", "--topic", "gc-ends-t:1",
           "--to-latest", "--execute")  # fmt: skip
    assert offsets(cluster, "gc-ends")[1] == ("10", "10", "0", "-")
    assert offsets(cluster, "gc-ends")[0] == ("0", "10", "10", "-")


def test_reset_shift_by_and_to_offset_are_clamped(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-shift", "gc-shift-t", {0: 4, 1: 7})
    b = cluster.bootstrap

    def reset(*argv: str) -> list[list[str]]:
        proc = kraft("groups", "reset-offsets", "--group", "gc-shift", *argv, "--execute",
                     "--bootstrap-server", b)  # fmt: skip
        return [ln.split()[2:] for ln in ok(proc).splitlines()[1:]]

    assert reset("--topic", "gc-shift-t:0,1", "--shift-by", "-3") == [["0", "1"], ["1", "4"]]
    assert offsets(cluster, "gc-shift") == {0: ("1", "10", "9", "-"), 1: ("4", "10", "6", "-")}
    assert reset("--all-topics", "--shift-by", "5") == [["0", "6"], ["1", "9"]]
    # Beyond the log's end or start: the end or the start, as Kafka's tool does.
    assert reset("--topic", "gc-shift-t:1", "--shift-by", "100") == [["1", "10"]]
    assert reset("--topic", "gc-shift-t:0", "--shift-by", "-100") == [["0", "0"]]
    assert reset("--topic", "gc-shift-t:0,2", "--to-offset", "3") == [["0", "3"], ["2", "3"]]
    assert reset("--topic", "gc-shift-t:2", "--to-offset", "99") == [["2", "10"]]
    assert offsets(cluster, "gc-shift") == {
        0: ("3", "10", "7", "-"),
        1: ("10", "10", "0", "-"),
        2: ("10", "10", "0", "-"),
    }


def test_reset_to_datetime(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-time", "gc-time-t", {0: 1})

    def at(when: str) -> list[str]:
        lines = groups(cluster, "reset-offsets", "--group", "gc-time", "--topic", "gc-time-t:0",
                       "--to-datetime", when, "--execute")  # fmt: skip
        return [ln.split()[3] for ln in lines[1:]]

    # Offset o was written with timestamp BASE_TS + 1000 * o: 2023-11-14T22:13:20Z + o s.
    assert at("2023-11-14T22:13:25Z") == ["5"]
    assert at("2023-11-14T23:13:25.500+01:00") == ["6"]  # the first record at or after
    assert offsets(cluster, "gc-time")[0] == ("6", "10", "4", "-")
    assert at("2000-01-01T00:00:00Z") == ["0"]
    assert at("2100-01-01T00:00:00Z") == ["10"]  # no record that late: the log's end


def test_dry_run_changes_nothing(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-dry", "gc-dry-t", {0: 4})
    base = ["groups", "reset-offsets", "--group", "gc-dry", "--topic", "gc-dry-t:0",
            "--to-earliest", "--bootstrap-server", cluster.bootstrap]  # fmt: skip
    for mode in (["--dry-run"], []):
        proc = kraft(*base, *mode)
        assert ok(proc).splitlines()[1].split() == ["gc-dry", "gc-dry-t", "0", "0"]
        # Without --dry-run or --execute it is a dry run, and says so.
        assert ("--execute option is missing" in proc.stderr) == (mode == [])
        assert offsets(cluster, "gc-dry") == {0: ("4", "10", "6", "-")}


def test_delete_group(cluster: ProcCluster) -> None:
    make_group(cluster, "gc-delete", "gc-delete-t", {0: 1})
    lines = groups(cluster, "delete", "--group", "gc-delete")
    assert lines == ["Deletion of requested consumer groups ('gc-delete') was successful."]
    assert "gc-delete" not in groups(cluster, "list")
    one_line_error(
        kraft("groups", "describe", "--group", "gc-delete", "--bootstrap-server",
              cluster.bootstrap),
        "Consumer group 'gc-delete' does not exist.",
    )  # fmt: skip


def test_unknown_group_and_bad_arguments_are_one_line_errors(cluster: ProcCluster) -> None:
    b = cluster.bootstrap
    make_group(cluster, "gc-errors", "gc-errors-t", {0: 4})

    def fails(*argv: str) -> str:
        return one_line_error(kraft("groups", *argv, "--bootstrap-server", b))

    err = fails("describe", "--group", "gc-nobody")
    assert err == "kraft groups describe: Consumer group 'gc-nobody' does not exist."
    assert "gc-nobody" in fails("describe", "--group", "gc-nobody", "--state")
    assert "GROUP_ID_NOT_FOUND" in fails("delete", "--group", "gc-nobody")
    assert "'sleepy': one of" in fails("list", "--state", "sleepy")
    reset = ["reset-offsets", "--group", "gc-errors"]
    assert "topic 'gc-missing' does not exist" in fails(*reset, "--topic", "gc-missing",
                                                        "--to-earliest")  # fmt: skip
    assert "has no partition 7" in fails(*reset, "--topic", "gc-errors-t:7", "--to-earliest")
    assert "partitions are numbers" in fails(*reset, "--topic", "gc-errors-t:x", "--to-latest")
    assert "--to-datetime 'yesterday'" in fails(*reset, "--topic", "gc-errors-t",
                                                "--to-datetime", "yesterday")  # fmt: skip
    assert "no current committed offset" in fails(*reset, "--topic", "gc-errors-t:1",
                                                  "--shift-by", "1", "--execute")  # fmt: skip
    assert offsets(cluster, "gc-errors") == {0: ("4", "10", "6", "-")}
    # Two of --to-*: argparse's usage error (exit 2), naming both.
    proc = kraft("groups", *reset, "--topic", "gc-errors-t", "--to-earliest", "--to-latest")
    assert proc.returncode == 2 and "not allowed with argument" in proc.stderr

    dead = f"127.0.0.1:{free_port()}"
    for argv in (["list"], ["describe", "--group", "g"]):
        one_line_error(
            kraft("groups", *argv, "--bootstrap-server", dead, "--timeout-ms", "2000"),
            "cannot reach", dead,
        )  # fmt: skip
