"""`kraft topics`, `kraft produce` and `kraft consume` as subprocesses against one real
`kraft dev` cluster (3 controllers, 3 brokers on free ports, data under tmp; SIGTERM at
the end). Every wait is a condition under a deadline.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import pytest

from tests.harness.cli import free_port, kraft, ok, one_line_error
from tests.harness.dev_cluster import Cluster, wait_until


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("client-cli"))
    try:
        c.start()
        yield c
        if c.current.proc.poll() is None:
            c.stop()
    finally:
        for d in c.procs:
            d.kill_everything()


def topic_names(bootstrap: str) -> list[str]:
    return ok(kraft("topics", "list", "--bootstrap-server", bootstrap)).split()


def test_topics_create_list_describe_delete(cluster: Cluster) -> None:
    b = cluster.bootstrap
    out = ok(
        kraft(
            "topics", "create", "--bootstrap-server", b, "--topic", "cli-admin",
            "--partitions", "4", "--replication-factor", "3",
            "--config", "retention.ms=3600000", "--config", "cleanup.policy=delete",
        )
    )  # fmt: skip
    assert out.strip() == "Created topic cli-admin."
    wait_until(lambda: "cli-admin" in topic_names(b), 30, "cli-admin listed")

    def described() -> list[str]:
        proc = kraft("topics", "describe", "--bootstrap-server", b, "--topic", "cli-admin")
        return ok(proc).splitlines()

    wait_until(lambda: "Leader: none" not in "\n".join(described()), 30, "leaders elected")
    lines = described()
    assert lines[0].split("\t")[0] == "Topic: cli-admin"
    assert "PartitionCount: 4" in lines[0] and "ReplicationFactor: 3" in lines[0]
    assert len(lines) == 5
    for i, line in enumerate(lines[1:]):
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        assert fields["Topic"] == "cli-admin"
        assert fields["Partition"] == str(i)
        replicas = fields["Replicas"].split(",")
        assert len(replicas) == 3 and len(set(replicas)) == 3
        assert fields["Leader"] in replicas
        assert set(fields["Isr"].split(",")) <= set(replicas)
        assert fields["Leader"] in fields["Isr"].split(",")

    # describe without --topic covers it too
    assert "Topic: cli-admin\tPartition: 3" in ok(
        kraft("topics", "describe", "--bootstrap-server", b)
    )

    one_line_error(
        kraft("topics", "create", "--bootstrap-server", b, "--topic", "cli-admin"),
        "already exists",
    )
    out = ok(kraft("topics", "delete", "--bootstrap-server", b, "--topic", "cli-admin"))
    assert out.strip() == "Deleted topic cli-admin."
    wait_until(lambda: "cli-admin" not in topic_names(b), 30, "cli-admin gone from list")


def test_produce_then_consume_100_keyed_lines(cluster: Cluster) -> None:
    b = cluster.bootstrap
    topic = "cli-data"
    ok(kraft("topics", "create", "--bootstrap-server", b, "--topic", topic,
             "--partitions", "3", "--replication-factor", "3"))  # fmt: skip
    sent = [f"key-{i % 7}:value {i}" for i in range(100)]
    proc = kraft(
        "produce", "--bootstrap-server", b, "--topic", topic,
        "--property", "parse.key=true", "--property", "key.separator=:",
        stdin="\n".join(sent) + "\n",
    )  # fmt: skip
    assert ok(proc) == "" and proc.stderr == ""

    proc = kraft(
        "consume", "--bootstrap-server", b, "--topic", topic, "--from-beginning",
        "--max-messages", "100", "--timeout-ms", "30000",
        "--property", "print.key=true", "--property", "key.separator=:",
    )  # fmt: skip
    got = ok(proc).splitlines()
    assert sorted(got) == sorted(sent)
    assert "Processed a total of 100 messages" in proc.stderr
    # One key lives in one partition: its records come back in the order they were sent.
    by_key_sent: dict[str, list[str]] = defaultdict(list)
    by_key_got: dict[str, list[str]] = defaultdict(list)
    for line in sent:
        by_key_sent[line.split(":", 1)[0]].append(line)
    for line in got:
        by_key_got[line.split(":", 1)[0]].append(line)
    assert by_key_got == by_key_sent

    # Without --max-messages, --timeout-ms ends it once the topic is drained: still 100.
    proc = kraft("consume", "--bootstrap-server", b, "--topic", topic,
                 "--from-beginning", "--timeout-ms", "3000")  # fmt: skip
    assert sorted(ok(proc).splitlines()) == sorted(line.split(":", 1)[1] for line in sent)

    # --partition with --offset reads one partition from that offset.
    whole = ok(kraft("consume", "--bootstrap-server", b, "--topic", topic, "--partition", "0",
                     "--offset", "earliest", "--timeout-ms", "3000"))  # fmt: skip
    part0 = whole.splitlines()
    assert part0, "partition 0 holds some keys"
    tail = ok(kraft("consume", "--bootstrap-server", b, "--topic", topic, "--partition", "0",
                    "--offset", "1", "--timeout-ms", "3000"))  # fmt: skip
    assert tail.splitlines() == part0[1:]

    # A line without the separator fails the producer.
    one_line_error(
        kraft("produce", "--bootstrap-server", b, "--topic", topic,
              "--property", "parse.key=true", stdin="no separator here\n"),
        "no key separator found on line number 1",
    )  # fmt: skip


def test_errors_are_one_line(cluster: Cluster) -> None:
    b = cluster.bootstrap
    one_line_error(
        kraft("topics", "describe", "--bootstrap-server", b, "--topic", "cli-missing"),
        "cli-missing", "does not exist",
    )  # fmt: skip
    one_line_error(
        kraft("topics", "delete", "--bootstrap-server", b, "--topic", "cli-missing"),
        "UNKNOWN_TOPIC_OR_PART",
    )
    one_line_error(
        kraft("consume", "--bootstrap-server", b, "--topic", "cli-missing", "--from-beginning",
              "--timeout-ms", "5000"),
        "cli-missing", "does not exist",
    )  # fmt: skip
    # Neither describe nor consume created it (the brokers auto-create topics).
    assert "cli-missing" not in topic_names(b)
    one_line_error(
        kraft("consume", "--bootstrap-server", b, "--topic", "x", "--offset", "5"),
        "--offset needs --partition",
    )

    # A delivery failure: the broker refuses a record above message.max.bytes (1 MB).
    one_line_error(
        kraft("produce", "--bootstrap-server", b, "--topic", "cli-big", "--timeout-ms", "20000",
              "--producer-property", "message.max.bytes=5000000", stdin="x" * 2_000_000 + "\n"),
        "not delivered", "MSG_SIZE_TOO_LARGE",
    )  # fmt: skip

    dead = f"127.0.0.1:{free_port()}"
    one_line_error(
        kraft("topics", "list", "--bootstrap-server", dead, "--timeout-ms", "2000"),
        "cannot reach", dead,
    )  # fmt: skip
    one_line_error(
        kraft("produce", "--bootstrap-server", dead, "--topic", "t", "--timeout-ms", "2000",
              stdin="hello\n"),
        "cannot reach", dead,
    )  # fmt: skip
    one_line_error(
        kraft("consume", "--bootstrap-server", dead, "--topic", "t", "--timeout-ms", "2000"),
        "cannot reach", dead,
    )  # fmt: skip
