"""The security side of the command line: `--command-config` (Java client properties ->
librdkafka settings), and the arguments of `kraft acls` and `kraft configs` (users).
These run without a cluster; tests/cluster/test_secure_tools_e2e.py runs the same
commands against `kraft dev --secure`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import NamedTuple

import pytest

from common.acl import AclOperation, PatternType, PermissionType, ResourceType
from common.client_config import load_command_config, translate
from common.properties import ConfigError
from common.scram import ScramMechanism
from kraft.tools import acls_cli, configs_cli
from kraft.tools.acls_cli import AccessControlEntry, ResourcePattern
from kraft.tools.certs import issue, make_ca
from kraft.tools.client_common import CliError
from tests.harness.cli import kraft, one_line_error

SECRET = "s3cret-Pa55"
SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    f'username="alice" password="{SECRET}";'
)


class Certs(NamedTuple):
    ca: Path
    client: Path  # key + chain in one PEM file


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    d = tmp_path_factory.mktemp("certs")
    ca = make_ca(d)
    return Certs(ca.cert_path, issue(ca, d / "client.pem", "client"))


# -- --command-config: translation -----------------------------------------------------------


def test_sasl_ssl_scram_config_becomes_librdkafka_settings(certs: Certs) -> None:
    conf = translate(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(certs.ca),
        }
    )
    assert conf == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": SECRET,
        "ssl.ca.location": str(certs.ca),
    }


def test_pem_keystore_file_is_both_certificate_and_key(certs: Certs) -> None:
    conf = translate(
        {
            "security.protocol": "SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.client),
            "ssl.key.password": "kp",
            "ssl.truststore.location": str(certs.ca),
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert conf["ssl.certificate.location"] == conf["ssl.key.location"] == str(certs.client)
    assert conf["ssl.key.password"] == "kp"
    assert conf["ssl.endpoint.identification.algorithm"] == "none"


def test_inline_pem_stores(certs: Certs) -> None:
    text = certs.client.read_text()
    key, _, chain = text.partition("-----END PRIVATE KEY-----\n")
    conf = translate(
        {
            "security.protocol": "SSL",
            "ssl.keystore.certificate.chain": chain,
            "ssl.keystore.key": key + "-----END PRIVATE KEY-----\n",
            "ssl.truststore.certificates": certs.ca.read_text(),
            "ssl.endpoint.identification.algorithm": "HTTPS",
        }
    )
    assert conf["ssl.certificate.pem"] == chain.strip()
    assert conf["ssl.key.pem"].startswith("-----BEGIN PRIVATE KEY-----")
    assert conf["ssl.ca.pem"] == certs.ca.read_text().strip()
    assert conf["ssl.endpoint.identification.algorithm"] == "https"


def test_librdkafka_accepts_every_translated_setting(certs: Certs) -> None:
    """The names are librdkafka's: a client is made from them (nothing is dialled)."""
    from confluent_kafka import Producer

    conf = translate(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "plain",
            "sasl.jaas.config": SCRAM_JAAS,
            "ssl.truststore.location": str(certs.ca),
            "ssl.keystore.location": str(certs.client),
            "ssl.endpoint.identification.algorithm": "https",
            "ssl.enabled.protocols": "TLSv1.2,TLSv1.3",
            "client.id": "tools-test",
        }
    )
    Producer({**conf, "bootstrap.servers": "127.0.0.1:1", "log_level": 0}).flush(0)


def test_librdkafka_names_pass_through_but_not_twice() -> None:
    conf = translate({"sasl.username": "bob", "sasl.password": "pw", "socket.timeout.ms": "5"})
    assert conf == {"sasl.username": "bob", "sasl.password": "pw", "socket.timeout.ms": "5"}
    with pytest.raises(ConfigError, match="sasl.jaas.config and sasl.username both set"):
        translate({"sasl.jaas.config": SCRAM_JAAS, "sasl.username": "bob"})


@pytest.mark.parametrize(
    ("props", "fragment"),
    [
        ({"ssl.truststore.type": "JKS"}, "ssl.truststore.type=JKS is not supported"),
        ({"ssl.keystore.type": "PKCS12"}, "ssl.keystore.type=PKCS12 is not supported"),
        ({"ssl.truststore.password": SECRET}, "ssl.truststore.password cannot be used"),
        ({"ssl.keystore.password": SECRET}, "ssl.keystore.password cannot be used"),
        ({"security.protocol": "SASL_SSL"}, "needs sasl.mechanism"),
        ({"sasl.mechanism": "GSSAPI"}, "sasl.mechanism='GSSAPI' is not supported"),
        ({"security.protocol": "TLS"}, "security.protocol='TLS'"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "only TLSv1.2 and TLSv1.3"),
        ({"ssl.endpoint.identification.algorithm": "ldap"}, "https, or empty"),
        ({"ssl.keystore.key": SECRET}, "go together"),
        ({"sasl.login.callback.handler.class": "x.Y"}, "no equivalent in librdkafka"),
        ({"sasl.jaas.config": f'Broken password="{SECRET}"'}, "sasl.jaas.config"),
        (
            {"sasl.jaas.config": f'x.PlainLoginModule required password="{SECRET}";'},
            "username and password are required",
        ),
    ],
)
def test_unusable_properties_are_refused_without_their_values(
    props: dict[str, str], fragment: str
) -> None:
    with pytest.raises(ConfigError) as err:
        translate(props, "client.properties")
    text = str(err.value)
    assert fragment in text and text.startswith("client.properties: ")
    assert SECRET not in text and "\n" not in text


def test_jks_and_pkcs12_files_are_named_as_such(tmp_path: Path, certs: Certs) -> None:
    jks = tmp_path / "client.truststore.jks"
    jks.write_bytes(b"\xfe\xed\xfe\xed\x00\x00\x00\x02" + SECRET.encode())
    with pytest.raises(ConfigError, match="not a PEM file \\(a JKS or PKCS12 store\\?\\)") as err:
        translate({"ssl.truststore.location": str(jks)})
    assert SECRET not in str(err.value)
    with pytest.raises(ConfigError, match="holds no private key"):
        translate({"ssl.keystore.location": str(certs.ca)})
    with pytest.raises(ConfigError, match="cannot read"):
        translate({"ssl.truststore.location": str(tmp_path / "missing.pem")})


def test_load_command_config_reads_a_properties_file(tmp_path: Path, certs: Certs) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        "# a Java client config\n"
        "bootstrap.servers=127.0.0.1:9093\n"
        "security.protocol=SASL_SSL\n"
        "sasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="alice" \\\n    password="{SECRET}";\n'
        f"ssl.truststore.location={certs.ca}\n"
    )
    conf = load_command_config(path)
    assert conf["bootstrap.servers"] == "127.0.0.1:9093"
    assert (conf["sasl.username"], conf["sasl.password"]) == ("alice", SECRET)
    with pytest.raises(ConfigError, match="no file"):
        load_command_config(tmp_path / "nope.properties")


@pytest.mark.parametrize(
    "argv",
    [
        ["topics", "list"],
        ["produce", "--topic", "t"],
        ["consume", "--topic", "t"],
        ["groups", "list"],
        ["acls", "--list"],
        ["configs", "--describe", "--entity-type", "users"],
    ],
)
def test_every_client_tool_reports_a_bad_command_config_in_one_line(
    tmp_path: Path, argv: list[str]
) -> None:
    path = tmp_path / "client.properties"
    path.write_text(
        f"security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\nssl.truststore.password={SECRET}\n"
    )
    proc = kraft(*argv, "--command-config", str(path), "--bootstrap-server", "127.0.0.1:1")
    err = one_line_error(proc, "ssl.truststore.password cannot be used")
    assert SECRET not in err + proc.stdout


def test_bootstrap_comes_from_the_command_config_when_not_given(tmp_path: Path) -> None:
    path = tmp_path / "client.properties"
    path.write_text("bootstrap.servers=127.0.0.1:1\n")
    proc = kraft("topics", "list", "--command-config", str(path), "--timeout-ms", "1000")
    one_line_error(proc, "cannot reach 127.0.0.1:1")


# -- kraft acls: the plan ----------------------------------------------------------------------


def acls_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    acls_cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["acls", *argv])
    acls_cli.check_args(args)
    return args


def allow(principal: str, op: AclOperation, host: str = "*") -> AccessControlEntry:
    return AccessControlEntry(principal, host, op, PermissionType.ALLOW)


def test_prefixed_topic_acls_for_one_principal() -> None:
    args = acls_args(
        "--add", "--allow-principal", "User:alice", "--operation", "Write",
        "--operation", "read", "--topic", "orders-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    plan = acls_cli.filter_to_acls(args)
    resource = ResourcePattern(ResourceType.TOPIC, "orders-", PatternType.PREFIXED)
    assert plan == {
        resource: {allow("User:alice", AclOperation.WRITE), allow("User:alice", AclOperation.READ)}
    }
    assert str(resource) == (
        "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)"
    )
    assert str(allow("User:alice", AclOperation.CLUSTER_ACTION)) == (
        "(principal=User:alice, host=*, operation=CLUSTER_ACTION, permissionType=ALLOW)"
    )


def test_producer_and_consumer_conveniences_are_kafkas() -> None:
    args = acls_args(
        "--add", "--allow-principal", "User:bob", "--allow-host", "10.0.0.1", "--producer",
        "--consumer", "--idempotent", "--topic", "t", "--group", "g", "--transactional-id", "x",
    )  # fmt: skip
    plan = acls_cli.filter_to_acls(args)

    def ops(kind: ResourceType, name: str) -> set[AclOperation]:
        acls = plan[ResourcePattern(kind, name, PatternType.LITERAL)]
        assert {(a.principal, a.host, a.permission_type) for a in acls} == {
            ("User:bob", "10.0.0.1", PermissionType.ALLOW)
        }
        return {a.operation for a in acls}

    op = AclOperation
    assert ops(ResourceType.TOPIC, "t") == {op.WRITE, op.DESCRIBE, op.CREATE, op.READ}
    assert ops(ResourceType.GROUP, "g") == {op.READ}
    assert ops(ResourceType.TRANSACTIONAL_ID, "x") == {op.WRITE, op.DESCRIBE}
    assert ops(ResourceType.CLUSTER, "kafka-cluster") == {op.IDEMPOTENT_WRITE}


def test_deny_entries_and_the_default_operation() -> None:
    args = acls_args("--add", "--deny-principal", "User:eve", "--cluster")
    plan = acls_cli.filter_to_acls(args)
    (acls,) = plan.values()
    assert acls == {AccessControlEntry("User:eve", "*", AclOperation.ALL, PermissionType.DENY)}


def test_remove_without_principal_removes_every_acl_of_the_filter() -> None:
    args = acls_args("--remove", "--topic", "t", "--resource-pattern-type", "match")
    assert acls_cli.filter_to_acls(args) == {
        ResourcePattern(ResourceType.TOPIC, "t", PatternType.MATCH): set()
    }


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--add", "--topic", "t"], "You must specify one of: --allow-principal"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "principalType:principalName"),
        (["--add", "--allow-principal", "User:a", "--operation", "Fly", "--topic", "t"], "Fly"),
        (
            ["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
            "ResourceType GROUP only supports operations",
        ),
        (
            ["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type",
             "match"],
            "'match' is not valid when adding acls",
        ),
        (["--add", "--producer", "--allow-principal", "User:a"], "With --producer"),
        (["--add", "--consumer", "--allow-principal", "User:a", "--topic", "t"], "--consumer"),
        (["--remove", "--principal", "User:a", "--topic", "t"], "only available if --list"),
        (["--list", "--allow-principal", "User:a"], "--list takes no"),
    ],
)  # fmt: skip
def test_acls_usage_errors(argv: list[str], fragment: str) -> None:
    with pytest.raises(CliError) as err:
        acls_cli.filter_to_acls(acls_args(*argv))
    assert fragment in str(err.value)


def test_acls_usage_error_is_one_line_before_any_connection() -> None:
    proc = kraft("acls", "--add", "--topic", "t", "--bootstrap-server", "127.0.0.1:1")
    one_line_error(proc, "--allow-principal")


# -- kraft configs: SCRAM users ----------------------------------------------------------------


def test_add_config_parses_scram_credentials() -> None:
    parsed = configs_cli.parse_add_config(
        f"SCRAM-SHA-512=[iterations=8192,password={SECRET}],SCRAM-SHA-256=[password=pw2]"
    )
    assert parsed == {
        ScramMechanism.SCRAM_SHA_512: (8192, SECRET),
        ScramMechanism.SCRAM_SHA_256: (4096, "pw2"),
    }
    assert configs_cli.parse_delete_config("SCRAM-SHA-512, scram-sha-256") == [
        ScramMechanism.SCRAM_SHA_512,
        ScramMechanism.SCRAM_SHA_256,
    ]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (f"SCRAM-SHA-1=[password={SECRET}]", "not a user config"),
        ("producer_byte_rate=1024", "client quotas are not supported"),
        ("SCRAM-SHA-512=[iterations=8192]", "a password is required"),
        (f"SCRAM-SHA-512=[iterations=many,password={SECRET}]", "iterations must be a number"),
        (f"SCRAM-SHA-512=[salt=x,password={SECRET}]", "takes iterations=N and password=PW"),
        (f"SCRAM-SHA-512=[password={SECRET}],SCRAM-SHA-512=[password=x]", "given twice"),
    ],
)
def test_add_config_errors_never_show_the_password(text: str, fragment: str) -> None:
    with pytest.raises(CliError) as err:
        configs_cli.parse_add_config(text)
    assert fragment in str(err.value) and SECRET not in str(err.value)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--describe"], "--entity-type users"),
        (["--alter", "--entity-type", "users", "--add-config", "x"], "exactly one --entity-name"),
        (["--alter", "--user", "a"], "--add-config or --delete-config"),
        (["--describe", "--user", "a", "--delete-config", "SCRAM-SHA-256"], "go with --alter"),
        (
            ["--alter", "--user", "a", "--add-config", "SCRAM-SHA-256=[password=p]",
             "--delete-config", "SCRAM-SHA-256"],
            "both added and deleted",
        ),
    ],
)  # fmt: skip
def test_configs_usage_errors_are_one_line(argv: list[str], fragment: str) -> None:
    proc = kraft("configs", *argv, "--bootstrap-server", "127.0.0.1:1")
    one_line_error(proc, fragment)
