"""The security tools against one real `kraft dev --secure` cluster (3 controllers,
3 brokers on SASL_SSL, the authorizer on): the client config it prints works with
confluent-kafka and with every client tool's `--command-config`; `kraft acls` grants,
lists and removes; `kraft configs` manages SCRAM users. Every wait is a condition under
a deadline (ACLs and credentials reach the brokers through the metadata log).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from common.client_config import load_command_config
from common.properties import read_properties
from tests.harness.cli import kraft, ok, one_line_error
from tests.harness.dev_cluster import Cluster, wait_until

PREFIXED_ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("secure-tools"), secure=True)
    try:
        c.start()
        yield c
        if c.current.proc.poll() is None:
            c.stop()
    finally:
        for d in c.procs:
            d.kill_everything()


def as_admin(cluster: Cluster, *argv: str, stdin: str = "") -> subprocess.CompletedProcess:
    assert cluster.admin_config is not None
    return kraft(*argv, "--command-config", str(cluster.admin_config), stdin=stdin)


def as_alice(cluster: Cluster, *argv: str, stdin: str = "") -> subprocess.CompletedProcess:
    assert cluster.client_config is not None
    return kraft(*argv, "--command-config", str(cluster.client_config), stdin=stdin)


def secrets_of(cluster: Cluster) -> list[str]:
    values = read_properties(cluster.data / "security" / "secrets.properties")
    return [values["admin.password"], values["controller.quorum.http.token"],
            values["user.password"]]  # fmt: skip


def no_secret(cluster: Cluster, *texts: str) -> None:
    for secret in secrets_of(cluster):
        for text in texts:
            assert secret not in text


def create_topic(cluster: Cluster, topic: str) -> None:
    out = ok(as_admin(cluster, "topics", "create", "--topic", topic, "--partitions", "2"))
    assert out.strip() == f"Created topic {topic}."


def test_printed_config_works_with_confluent_kafka(cluster: Cluster) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    assert cluster.client_config is not None
    create_topic(cluster, "orders-direct")
    # Kafka's producer and consumer conveniences: Write, Describe, Create and Read on the
    # topic, Read on the group.
    ok(as_admin(cluster, "acls", "--add", "--allow-principal", "User:alice", "--producer",
                "--consumer", "--topic", "orders-direct", "--group", "direct"))  # fmt: skip
    conf = load_command_config(cluster.client_config)  # bootstrap.servers included
    producer = Producer({**conf, "log_level": 0})

    def produced() -> bool:
        errors: list[object] = []
        producer.produce(
            "orders-direct", b"v", partition=0, on_delivery=lambda e, m: errors.append(e)
        )
        producer.flush(10)
        return errors == [None]

    wait_until(produced, 30, "alice may write orders-direct")
    consumer = Consumer({**conf, "group.id": "direct", "log_level": 0})
    consumer.assign([TopicPartition("orders-direct", 0, 0)])
    msg = consumer.poll(15)
    consumer.close()
    assert msg is not None and msg.error() is None and msg.value() == b"v"


def test_a_wrong_password_is_an_authentication_error(cluster: Cluster, tmp_path: Path) -> None:
    assert cluster.client_config is not None
    text = cluster.client_config.read_text()
    password = read_properties(cluster.client_config)["sasl.jaas.config"].split('password="')[1]
    bad = tmp_path / "bad.properties"
    bad.write_text(text.replace(password.split('"')[0], "not-the-password"))
    proc = kraft("topics", "list", "--command-config", str(bad), "--timeout-ms", "5000")
    err = one_line_error(proc, "cannot reach", "Authentication")
    no_secret(cluster, err, proc.stdout)


def test_acls_add_list_remove_and_what_they_allow(cluster: Cluster) -> None:
    create_topic(cluster, "orders-1")
    create_topic(cluster, "payments-1")
    # No ACLs yet: alice may not write.
    denied = as_alice(cluster, "produce", "--topic", "orders-1", "--timeout-ms", "5000",
                      stdin="nope\n")  # fmt: skip
    one_line_error(denied, "TOPIC_AUTHORIZATION_FAILED")

    grant = ["--allow-principal", "User:alice", "--operation", "Write", "--operation", "Read",
             "--topic", "orders-", "--resource-pattern-type", "prefixed"]  # fmt: skip
    out = ok(as_admin(cluster, "acls", "--add", *grant))
    entries = [
        "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)",
        "(principal=User:alice, host=*, operation=WRITE, permissionType=ALLOW)",
    ]
    assert out.splitlines() == [
        f"Adding ACLs for resource `{PREFIXED_ORDERS}`: ",
        f" \t{entries[0]}",
        f"\t{entries[1]}",
        "",
    ]
    current = [f"Current ACLs for resource `{PREFIXED_ORDERS}`:", *(f"\t{e}" for e in entries), ""]

    def listing(*extra: str) -> list[str]:
        return ok(as_admin(cluster, "acls", "--list", *extra)).splitlines()

    prefixed = ("--topic", "orders-", "--resource-pattern-type", "prefixed")
    for broker in cluster.bootstrap.split(","):
        wait_until(
            lambda b=broker: listing(*prefixed, "--bootstrap-server", b) == current,
            10,
            f"the ACLs listed by {broker}",
        )
    # Added again: every broker has them now, so nothing is added.
    again = ok(as_admin(cluster, "acls", "--add", *grant)).splitlines()
    assert again == [f"Acl (pattern={PREFIXED_ORDERS}, entry={e}) already exists." for e in entries]
    alices = listing("--principal", "User:alice")  # with the other tests' ACLs too
    assert alices[0] == "ACLs for principal `User:alice`"
    assert "\n".join(current) in "\n".join(alices)
    assert listing("--principal", "User:bob") == ["ACLs for principal `User:bob`"]
    assert listing("--topic", "orders-1", "--resource-pattern-type", "match") == current
    assert listing("--topic", "orders-1") == []  # literal: no such binding

    def produce(topic: str) -> subprocess.CompletedProcess:
        return as_alice(cluster, "produce", "--topic", topic, "--timeout-ms", "5000",
                        stdin="a\nb\nc\n")  # fmt: skip

    ok(produce("orders-1"))
    consumed = as_alice(cluster, "consume", "--topic", "orders-1", "--from-beginning",
                        "--max-messages", "3", "--timeout-ms", "10000")  # fmt: skip
    assert sorted(ok(consumed).split()) == ["a", "b", "c"]
    one_line_error(produce("payments-1"), "TOPIC_AUTHORIZATION_FAILED")
    # alice sees only the topics she may use.
    topics = ok(as_alice(cluster, "topics", "list")).split()
    assert "orders-1" in topics and "payments-1" not in topics

    remove = ["--allow-principal", "User:alice", "--operation", "Write", "--topic", "orders-",
              "--resource-pattern-type", "prefixed", "--force"]  # fmt: skip
    assert ok(as_admin(cluster, "acls", "--remove", *remove)) == ""
    wait_until(lambda: listing(*prefixed) == [current[0], current[1], ""], 10, "WRITE removed")
    one_line_error(produce("orders-1"), "TOPIC_AUTHORIZATION_FAILED")
    # Without a principal, --remove takes every ACL of the resource.
    assert ok(as_admin(cluster, "acls", "--remove", *prefixed)) == ""
    wait_until(lambda: listing(*prefixed) == [], 10, "every ACL of orders- removed")


def test_scram_users_add_describe_delete(cluster: Cluster, tmp_path: Path) -> None:
    secret = "bob-Secret-42"
    add = f"SCRAM-SHA-512=[iterations=8192,password={secret}]"
    out = as_admin(cluster, "configs", "--alter", "--entity-type", "users", "--entity-name",
                   "bob", "--add-config", add)  # fmt: skip
    assert ok(out).strip() == "Completed updating config for user bob."
    no_secret(cluster, out.stdout, out.stderr)
    assert secret not in out.stdout + out.stderr
    bob = tmp_path / "bob.properties"
    assert cluster.client_config is not None
    java = read_properties(cluster.client_config)
    java["sasl.jaas.config"] = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{secret}";'
    )
    bob.write_text("".join(f"{k}={v}\n" for k, v in java.items()))

    def describe(*extra: str) -> str:
        return ok(as_admin(cluster, "configs", "--describe", "--entity-type", "users", *extra))

    line = "SCRAM credential configs for user-principal 'bob' are SCRAM-SHA-512=iterations=8192"
    assert describe("--entity-name", "bob").strip() == line
    everyone = describe()
    assert line in everyone.splitlines()
    assert "user-principal 'alice' are SCRAM-SHA-512=iterations=4096" in everyone
    assert secret not in everyone

    def bob_lists_topics() -> int:
        proc = kraft("topics", "list", "--command-config", str(bob), "--timeout-ms", "3000")
        return proc.returncode

    wait_until(lambda: bob_lists_topics() == 0, 10, "bob logs in")
    out = as_admin(cluster, "configs", "--alter", "--user", "bob", "--delete-config",
                   "SCRAM-SHA-512")  # fmt: skip
    assert ok(out).strip() == "Completed updating config for user bob."
    assert describe("--entity-name", "bob") == ""
    wait_until(lambda: bob_lists_topics() == 1, 15, "bob refused")
    missing = as_admin(cluster, "configs", "--alter", "--user", "carol", "--delete-config",
                       "SCRAM-SHA-256")  # fmt: skip
    one_line_error(missing, "RESOURCE_NOT_FOUND")


def test_only_the_super_user_manages_acls_and_users(cluster: Cluster) -> None:
    ok(as_admin(cluster, "groups", "list"))
    for argv, fragment in [
        (("acls", "--list"), "CLUSTER_AUTHORIZATION_FAILED"),
        (("acls", "--add", "--allow-principal", "User:alice", "--cluster"),
         "CLUSTER_AUTHORIZATION_FAILED"),
        (("acls", "--remove", "--cluster", "--force"), "CLUSTER_AUTHORIZATION_FAILED"),
        (("configs", "--describe", "--entity-type", "users"), "CLUSTER_AUTHORIZATION_FAILED"),
        (("configs", "--describe", "--user", "alice"), "CLUSTER_AUTHORIZATION_FAILED"),
        (("configs", "--alter", "--user", "alice", "--add-config",
          "SCRAM-SHA-256=[password=mine]"), "CLUSTER_AUTHORIZATION_FAILED"),
    ]:  # fmt: skip
        proc = as_alice(cluster, *argv)
        one_line_error(proc, fragment)
        no_secret(cluster, proc.stdout, proc.stderr)


def test_operations_tools_take_the_command_config(cluster: Cluster) -> None:
    """leader-election, log-dirs, metadata-quorum and reassign log in with
    --command-config; they need ALTER/DESCRIBE on the cluster, which alice lacks and the
    super user has."""
    create_topic(cluster, "ops-secure")
    elected = as_admin(cluster, "leader-election", "--election-type", "PREFERRED",
                       "--topic", "ops-secure", "--partition", "0")  # fmt: skip
    assert ok(elected).strip() == "Valid replica already elected for partitions ops-secure-0"
    dirs = ok(as_admin(cluster, "log-dirs", "--describe", "--topic-list", "ops-secure"))
    assert '"partition":"ops-secure-0"' in dirs
    # kafka-metadata-quorum takes its connection options before the subcommand.
    assert cluster.admin_config is not None and cluster.client_config is not None
    quorum = ("metadata-quorum", "--command-config")
    status = ok(kraft(*quorum, str(cluster.admin_config), "describe", "--status"))
    assert "CurrentVoters:" in status
    assert ok(as_admin(cluster, "reassign", "--list")) == "No partition reassignments found.\n"
    for proc in [
        as_alice(cluster, "leader-election", "--election-type", "PREFERRED",
                 "--all-topic-partitions"),  # fmt: skip
        as_alice(cluster, "log-dirs", "--describe"),
        as_alice(cluster, "reassign", "--list"),
        kraft(*quorum, str(cluster.client_config), "describe", "--status"),
    ]:
        one_line_error(proc, "CLUSTER_AUTHORIZATION_FAILED")
        no_secret(cluster, proc.stdout, proc.stderr)


def test_record_tools_take_the_command_config(cluster: Cluster, tmp_path: Path) -> None:
    """delete-records and get-offsets log in with --command-config; deleting needs DELETE
    on the topic, which alice lacks and the super user has."""
    create_topic(cluster, "records-secure")
    spec = tmp_path / "offsets.json"
    spec.write_text('{"partitions": [{"topic": "records-secure", "partition": 0, '
                    '"offset": 0}], "version": 1}')  # fmt: skip
    deleted = ok(as_admin(cluster, "delete-records", "--offset-json-file", str(spec)))
    assert "partition: records-secure-0\tlow_watermark: 0\n" in deleted
    offsets = ok(as_admin(cluster, "get-offsets", "--topic", "records-secure", "--time", "-2"))
    assert offsets == "records-secure:0:0\nrecords-secure:1:0\n"
    # alice may read (and so describe) the topic, not delete from it.
    ok(as_admin(cluster, "acls", "--add", "--allow-principal", "User:alice", "--consumer",
                "--topic", "records-secure", "--group", "records"))  # fmt: skip

    last: list[str] = []

    def refused_by_acl() -> bool:  # once the brokers know the ACL
        last[:] = [ok(as_alice(cluster, "delete-records", "--offset-json-file", str(spec)))]
        return "TOPIC_AUTHORIZATION_FAILED" in last[0]

    wait_until(refused_by_acl, 30, "alice's DeleteRecords refused by the authorizer")
    refused = last[0]
    assert "partition: records-secure-0\terror: " in refused
    no_secret(cluster, deleted, offsets, refused)
