"""CreateAcls, DescribeAcls, DeleteAcls, DescribeUserScramCredentials and
AlterUserScramCredentials on a real cluster (3 controllers, 3 brokers, separate
processes), with confluent-kafka's and kafka-python's admin clients and raw requests.

The clients speak PLAINTEXT, so their principal is User:ANONYMOUS; the brokers run the
authorizer with `allow.everyone.if.no.acl.found=true`, so ANONYMOUS may manage ACLs until
some binding applies to the cluster resource. Each change must be visible in DescribeAcls
(or DescribeUserScramCredentials) on every broker within 1 s. A second, smaller cluster
without an authorizer answers SECURITY_DISABLED. The tests share the cluster and run in
file order; every wait is a condition under a deadline.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from confluent_kafka import KafkaException
from confluent_kafka import admin as ck
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType
from msgspec.structs import astuple

from broker.config import from_properties
from broker.security.authorizer import STANDARD_AUTHORIZER
from common.acl import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from common.errors import Errors
from common.properties import ConfigError
from common.scram import ScramMechanism, salted_password, server_key, stored_key
from metadata_log.snapshot import decode_snapshot
from tests.harness.cluster_procs import ProcCluster, wait_for
from tests.harness.raw_protocol import RawClient, request

VISIBLE_WITHIN_S = 1.0
DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
DESCRIBE_SCRAM, ALTER_SCRAM = 50, 51
ALL_ACLS = {
    "resource_type_filter": ResourceType.ANY,
    "resource_name_filter": None,
    "pattern_type_filter": PatternType.ANY,
    "principal_filter": None,
    "host_filter": None,
    "operation": AclOperation.ANY,
    "permission_type": PermissionType.ANY,
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcCluster]:
    props = {"authorizer.class.name": STANDARD_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"}
    with ProcCluster(tmp_path_factory.mktemp("acl-apis"), broker_props=props) as c:
        c.start()
        yield c


def admin(c: ProcCluster) -> ck.AdminClient:
    return ck.AdminClient({"bootstrap.servers": c.bootstrap})


def call(address: str, api_key: int, version: int, data: dict[str, Any]) -> Any:
    host, port = address.rsplit(":", 1)
    client = RawClient(host, int(port))
    try:
        return client.call(api_key, version, request(api_key, version, data))
    finally:
        client.close()


def acls_on(address: str) -> set[AclBinding]:
    """Every binding one broker's DescribeAcls v3 shows."""
    resp = call(address, DESCRIBE_ACLS, 3, ALL_ACLS)
    assert resp.error_code == 0, resp
    return {
        AclBinding(
            r.resource_type,
            r.resource_name,
            r.pattern_type,
            a.principal,
            a.host,
            a.operation,
            a.permission_type,
        )
        for r in resp.resources
        for a in r.acls
    }


def on_every_broker(c: ProcCluster, probe: Callable[[str], bool], what: str) -> None:
    """Within VISIBLE_WITHIN_S, `probe(broker address)` holds on every broker."""
    deadline = time.monotonic() + VISIBLE_WITHIN_S
    for b in c.brokers:
        while not probe(b.address):
            assert time.monotonic() < deadline, f"{what} not visible on broker {b.node_id} in 1 s"
            time.sleep(0.01)


def controller_post(c: ProcCluster, path: str, body: dict[str, Any]) -> dict[str, Any]:
    """A write straight to the active controller (the operator's way around the brokers)."""

    def attempt() -> dict[str, Any] | None:
        req = urllib.request.Request(
            c.wait_active_controller(10).url(path),
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - loopback
            return json.loads(resp.read())

    return wait_for(attempt, 20, f"POST {path}", c.logs)


TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ORDERS_READ = AclBinding(TOPIC, "orders", PatternType.LITERAL, "User:alice", "*", 3, 3)
PAY_DENY = AclBinding(TOPIC, "pay-", PatternType.PREFIXED, "User:bob", "*", 4, 2)
GROUP_READ = AclBinding(GROUP, "g1", PatternType.LITERAL, "User:alice", "10.0.0.1", 3, 3)


def ck_binding(b: AclBinding) -> ck.AclBinding:
    return ck.AclBinding(
        ck.ResourceType(b.resource_type),
        b.resource_name,
        ck.ResourcePatternType(b.pattern_type),
        b.principal,
        b.host,
        ck.AclOperation(b.operation),
        ck.AclPermissionType(b.permission_type),
    )


def from_ck(b: ck.AclBinding) -> AclBinding:
    return AclBinding(
        b.restype.value,
        b.name,
        b.resource_pattern_type.value,
        b.principal,
        b.host,
        b.operation.value,
        b.permission_type.value,
    )


# -- ACLs --------------------------------------------------------------------------------------


def test_confluent_kafka_creates_describes_and_deletes_acls(cluster: ProcCluster) -> None:
    a = admin(cluster)
    wanted = [ORDERS_READ, PAY_DENY, GROUP_READ]
    for f in a.create_acls([ck_binding(b) for b in wanted]).values():
        assert f.result(timeout=30) is None
    on_every_broker(cluster, lambda addr: set(wanted) <= acls_on(addr), "the new bindings")

    # MATCH: what applies to topic pay-in (the prefixed deny), not the literal "orders".
    match = ck.AclBindingFilter(
        ck.ResourceType.TOPIC,
        "pay-in",
        ck.ResourcePatternType.MATCH,
        None,
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    assert [from_ck(b) for b in a.describe_acls(match).result(timeout=30)] == [PAY_DENY]

    # An identical binding again: success, and still one of it.
    for f in a.create_acls([ck_binding(ORDERS_READ)]).values():
        assert f.result(timeout=30) is None
    for b in cluster.brokers:
        assert sorted(acls_on(b.address), key=astuple) == sorted(wanted, key=astuple)

    # A principal without a type is refused with INVALID_REQUEST, alone.
    bad = ck.AclBinding(
        ck.ResourceType.TOPIC,
        "t",
        ck.ResourcePatternType.LITERAL,
        "alice",
        "*",
        ck.AclOperation.READ,
        ck.AclPermissionType.ALLOW,
    )
    with pytest.raises(KafkaException) as info:
        next(iter(a.create_acls([bad]).values())).result(timeout=30)
    assert info.value.args[0].code() == Errors.INVALID_REQUEST
    assert "Could not parse principal" in info.value.args[0].str()

    # Delete bob's bindings: the answer names what was removed; every broker drops it.
    bobs = ck.AclBindingFilter(
        ck.ResourceType.ANY,
        None,
        ck.ResourcePatternType.ANY,
        "User:bob",
        None,
        ck.AclOperation.ANY,
        ck.AclPermissionType.ANY,
    )
    deleted = next(iter(a.delete_acls([bobs]).values())).result(timeout=30)
    assert [from_ck(b) for b in deleted] == [PAY_DENY]
    on_every_broker(cluster, lambda addr: PAY_DENY not in acls_on(addr), "the deletion")


def test_kafka_python_admin_manages_acls(cluster: ProcCluster) -> None:
    kp = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30_000)
    try:
        pattern = ResourcePattern(KpResourceType.TOPIC, "kp-", ACLResourcePatternType.PREFIXED)
        acl = ACL("User:carol", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
        result = kp.create_acls([acl])
        assert result["failed"] == [] and len(result["succeeded"]) == 1
        expected = AclBinding(TOPIC, "kp-", PatternType.PREFIXED, "User:carol", "*", 4, 3)
        on_every_broker(cluster, lambda addr: expected in acls_on(addr), "kafka-python's ACL")

        carol = ACLFilter(
            "User:carol",
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        found, error = kp.describe_acls(carol)
        assert error.errno == 0
        assert [(x.principal, x.resource_pattern.resource_name) for x in found] == [
            ("User:carol", "kp-")
        ]
        [(_, removed, error)] = kp.delete_acls([carol])
        assert error.errno == 0 and [x.resource_pattern.resource_name for x in removed] == ["kp-"]
        on_every_broker(cluster, lambda addr: expected not in acls_on(addr), "the deletion")
    finally:
        kp.close()


def test_without_alter_on_the_cluster_changes_are_refused(cluster: ProcCluster) -> None:
    """Once a binding applies to the cluster resource, allow.everyone.if.no.acl.found no
    longer lets ANONYMOUS in: DESCRIBE alone is not ALTER."""
    describe_only = AclBinding(CLUSTER, "kafka-cluster", 3, "User:ANONYMOUS", "*", 8, 3)
    resp = controller_post(cluster, "/v1/acls", {"creations": [msgspec.to_builtins(describe_only)]})
    assert resp == {"results": [{"error_code": 0, "error_message": None}]}
    on_every_broker(cluster, lambda addr: describe_only in acls_on(addr), "the cluster binding")
    try:
        a = admin(cluster)
        with pytest.raises(KafkaException) as info:
            next(iter(a.create_acls([ck_binding(ORDERS_READ)]).values())).result(timeout=30)
        assert info.value.args[0].code() == Errors.CLUSTER_AUTHORIZATION_FAILED
        for b in cluster.brokers:
            raw = call(b.address, DELETE_ACLS, 3, {"filters": [ALL_ACLS]})
            assert [r.error_code for r in raw.filter_results] == [
                Errors.CLUSTER_AUTHORIZATION_FAILED
            ]
            upsert = {"name": "x", "mechanism": 1, "iterations": 4096, "salt": b"s"}
            raw = call(
                b.address,
                ALTER_SCRAM,
                0,
                {"deletions": [], "upsertions": [{**upsert, "salted_password": b"p"}]},
            )
            assert [(r.user, r.error_code) for r in raw.results] == [
                ("x", Errors.CLUSTER_AUTHORIZATION_FAILED)
            ]
            # DESCRIBE is still allowed, so describing works.
            assert ORDERS_READ in acls_on(b.address)
            assert call(b.address, DESCRIBE_SCRAM, 0, {"users": None}).error_code == 0
    finally:
        removal = {"filters": [{"resource_type": CLUSTER}]}
        resp = controller_post(cluster, "/v1/acls/delete", removal)
        assert resp["filter_results"][0]["matching_acls"] == [msgspec.to_builtins(describe_only)]
    on_every_broker(cluster, lambda addr: describe_only not in acls_on(addr), "the removal")


# -- SCRAM credentials ---------------------------------------------------------------------------


def credentials_on(address: str, *users: str) -> dict[str, Any]:
    resp = call(address, DESCRIBE_SCRAM, 0, {"users": [{"name": u} for u in users] or None})
    assert resp.error_code == 0, resp
    return {
        r.user: (r.error_code, sorted((i.mechanism, i.iterations) for i in r.credential_infos))
        for r in resp.results
    }


def test_confluent_kafka_alters_and_describes_scram_credentials(cluster: ProcCluster) -> None:
    a = admin(cluster)
    salt = b"0123456789abcdef-salt"
    ups = [
        ck.UserScramCredentialUpsertion(
            "alice", ck.ScramCredentialInfo(ck.ScramMechanism.SCRAM_SHA_256, 8192), b"pw1", salt
        ),
        ck.UserScramCredentialUpsertion(
            "bob", ck.ScramCredentialInfo(ck.ScramMechanism.SCRAM_SHA_512, 4096), b"pw2"
        ),
    ]
    for f in a.alter_user_scram_credentials(ups).values():
        assert f.result(timeout=30) is None
    want = {"alice": (0, [(1, 8192)]), "bob": (0, [(2, 4096)])}
    on_every_broker(
        cluster,
        lambda addr: credentials_on(addr, "alice", "bob") == want,
        "the new credentials",
    )
    described = a.describe_user_scram_credentials(["alice"])["alice"].result(timeout=30)
    info = described.scram_credential_infos
    assert [(i.mechanism, i.iterations) for i in info] == [(ck.ScramMechanism.SCRAM_SHA_256, 8192)]

    # The controller stores the keys the broker derived from the salted password, never it.
    with urllib.request.urlopen(  # noqa: S310 - loopback
        cluster.wait_active_controller(10).url("/v1/metadata/snapshot"), timeout=10
    ) as resp:
        image = decode_snapshot(resp.read())
    cred = image.scram_credentials[("alice", ScramMechanism.SCRAM_SHA_256)]
    salted = salted_password(ScramMechanism.SCRAM_SHA_256, b"pw1", salt, 8192)
    assert (cred.salt, cred.iterations) == (salt, 8192)
    assert cred.stored_key == stored_key(ScramMechanism.SCRAM_SHA_256, salted)
    assert cred.server_key == server_key(ScramMechanism.SCRAM_SHA_256, salted)
    # ... and its JSON log shows them redacted.
    with urllib.request.urlopen(  # noqa: S310 - loopback
        cluster.wait_active_controller(10).url("/v1/metadata/log?from=0&max_records=10000"),
        timeout=10,
    ) as resp:
        text = resp.read()
    for secret in (salt, cred.stored_key, cred.server_key, salted):
        assert secret not in text and base64.b64encode(secret) not in text
    assert b'"stored_key":"(redacted)"' in text

    # Deleting one mechanism leaves the user's other credentials alone.
    dele = ck.UserScramCredentialDeletion("bob", ck.ScramMechanism.SCRAM_SHA_512)
    for f in a.alter_user_scram_credentials([dele]).values():
        assert f.result(timeout=30) is None
    on_every_broker(
        cluster,
        lambda addr: credentials_on(addr, "bob")["bob"][0] == Errors.RESOURCE_NOT_FOUND,
        "the deletion",
    )


def test_scram_refusals_are_per_user(cluster: ProcCluster) -> None:
    address = cluster.brokers[0].address

    def upsert(name: str, mechanism: int = 1, iterations: int = 4096) -> dict[str, Any]:
        return {
            "name": name,
            "mechanism": mechanism,
            "iterations": iterations,
            "salt": b"salt",
            "salted_password": b"x" * 32,
        }

    resp = call(
        address,
        ALTER_SCRAM,
        0,
        {
            "deletions": [{"name": "nobody", "mechanism": 1}],
            "upsertions": [
                upsert("twice", mechanism=2),
                upsert("few", iterations=1000),
                upsert("many", iterations=20_000),
                upsert("md5", mechanism=7),
                upsert(""),
                upsert("twice"),
                upsert("carol"),
            ],
        },
    )
    got = {r.user: r.error_code for r in resp.results}
    assert got == {
        "nobody": Errors.RESOURCE_NOT_FOUND,
        "few": Errors.UNACCEPTABLE_CREDENTIAL,
        "many": Errors.UNACCEPTABLE_CREDENTIAL,
        "md5": Errors.UNSUPPORTED_SASL_MECHANISM,
        "": Errors.UNACCEPTABLE_CREDENTIAL,
        "twice": Errors.DUPLICATE_RESOURCE,
        "carol": Errors.NONE,
    }
    on_every_broker(cluster, lambda addr: "carol" in credentials_on(addr), "carol's credential")
    # Describe: a user without credentials, and a user named twice.
    described = call(address, DESCRIBE_SCRAM, 0, {"users": [{"name": "carol"}, {"name": "ghost"}]})
    assert {r.user: r.error_code for r in described.results} == {
        "carol": 0,
        "ghost": Errors.RESOURCE_NOT_FOUND,
    }
    twice = call(address, DESCRIBE_SCRAM, 0, {"users": [{"name": "carol"}, {"name": "carol"}]})
    [only] = twice.results
    assert (only.user, only.error_code, only.credential_infos) == (
        "carol",
        Errors.DUPLICATE_RESOURCE,
        (),
    )
    # No names: every user with credentials.
    assert {"alice", "carol"} <= set(credentials_on(address))


def test_a_restarted_broker_loads_bindings_and_credentials_again(cluster: ProcCluster) -> None:
    """A broker starting again reads the metadata from a snapshot: the authorizer must
    load the bindings from it, and the credentials must be there."""
    first = cluster.brokers[0]
    before = acls_on(first.address)
    assert {ORDERS_READ, GROUP_READ} <= before
    cluster.kill_broker(first.node_id)
    cluster.restart_broker(first.node_id)
    wait_for(
        lambda: acls_on(first.address) == before, 60, "the bindings after a restart", cluster.logs
    )
    assert credentials_on(first.address, "alice") == {"alice": (0, [(1, 8192)])}


# -- without an authorizer -----------------------------------------------------------------------


def test_without_an_authorizer_acl_apis_answer_security_disabled(tmp_path: Path) -> None:
    with ProcCluster(tmp_path, n_controllers=1, n_brokers=1) as c:
        c.start()
        address = c.brokers[0].address
        described = call(address, DESCRIBE_ACLS, 3, ALL_ACLS)
        assert (described.error_code, described.resources) == (Errors.SECURITY_DISABLED, ())
        creation = {**msgspec.to_builtins(ORDERS_READ), "resource_pattern_type": 3}
        del creation["pattern_type"]
        created = call(address, CREATE_ACLS, 3, {"creations": [creation]})
        assert [r.error_code for r in created.results] == [Errors.SECURITY_DISABLED]
        deleted = call(address, DELETE_ACLS, 3, {"filters": [ALL_ACLS]})
        assert [r.error_code for r in deleted.filter_results] == [Errors.SECURITY_DISABLED]
        # SCRAM credentials do not need an authorizer.
        a = ck.AdminClient({"bootstrap.servers": c.bootstrap})
        up = ck.UserScramCredentialUpsertion(
            "dave", ck.ScramCredentialInfo(ck.ScramMechanism.SCRAM_SHA_512, 4096), b"pw"
        )
        for f in a.alter_user_scram_credentials([up]).values():
            assert f.result(timeout=30) is None
        wait_for(
            lambda: credentials_on(address, "dave") == {"dave": (0, [(2, 4096)])},
            10,
            "dave's credential",
            c.logs,
        )


# -- configuration -----------------------------------------------------------------------------

BASE = {
    "process.roles": "broker",
    "node.id": "1",
    "controller.quorum.http.endpoints": "0@127.0.0.1:1",
    "log.dirs": "/tmp/unused",
    "listeners": "PLAINTEXT://127.0.0.1:9092",
}


def test_authorizer_properties() -> None:
    off = from_properties(BASE)
    assert (off.authorizer_enabled, off.super_users, off.allow_everyone_if_no_acl_found) == (
        False,
        frozenset(),
        False,
    )
    for name in (STANDARD_AUTHORIZER, "kafka.security.authorizer.AclAuthorizer"):
        on = from_properties(
            {
                **BASE,
                "authorizer.class.name": name,
                "super.users": "User:admin; User:CN=broker,O=x",
                "allow.everyone.if.no.acl.found": "true",
            }
        )
        assert on.authorizer_enabled and on.allow_everyone_if_no_acl_found
        assert on.super_users == {"User:admin", "User:CN=broker,O=x"}
    with pytest.raises(ConfigError, match="authorizer.class.name"):
        from_properties({**BASE, "authorizer.class.name": "com.example.MyAuthorizer"})
    with pytest.raises(ConfigError, match="super.users"):
        from_properties({**BASE, "super.users": "admin"})
