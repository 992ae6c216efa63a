"""The ACL and SCRAM control managers, sans-I/O, over the real state machine: CreateAcls,
DeleteAcls and AlterUserScramCredentials decided on the committed image, appended, and
answered as Kafka answers; the filters' matching rules (checked against the authorizer's
own idea of which bindings apply to a resource); the snapshot round trip of bindings and
credentials; and the redaction of credentials in every metadata dump meant for people."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgspec.structs import astuple

from broker.security.authorizer import StandardAuthorizer
from common.acl import (
    WILDCARD_RESOURCE,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
    binding_error,
    filter_error,
)
from common.errors import Errors
from common.scram import ScramMechanism
from kraft.controller import QuorumController
from kraft.decision import ControllerConfig
from kraft.state_machine import AppendResult, MetadataStateMachine
from kraft.tools.cli import main as kraft_main
from metadata_log import controller_api as api
from metadata_log.controller_api import AlterUserScramCredentialsRequest as Alter
from metadata_log.controller_api import ScramCredentialDeletion as Deletion
from metadata_log.controller_api import ScramCredentialUpsertion as Upsertion
from metadata_log.records import (
    AccessControlEntryRecord,
    ControllerEpochRecord,
    Record,
    RemoveAccessControlEntryRecord,
    RemoveUserScramCredentialRecord,
    UserScramCredentialRecord,
    encode_batch,
)
from metadata_log.snapshot import decode_snapshot, encode_snapshot, write_snapshot
from tests.harness.fake_controller_service import FakeService, async_test, serve

TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LITERAL, PREFIXED = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
READ, WRITE = AclOperation.READ, AclOperation.WRITE
SHA256, SHA512 = ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512

# Secrets as they would sit in a record: distinctive, so a leak is easy to spot.
SALT, STORED, SERVER = b"salt-SECRET-1", b"stored-SECRET-2", b"server-SECRET-3"


def acl(
    name: str = "orders",
    *,
    rtype: int = TOPIC,
    pattern: int = LITERAL,
    principal: str = "User:alice",
    host: str = "*",
    op: int = READ,
    perm: int = ALLOW,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def upsert(name: str, mechanism: int = SHA256, iterations: int = 4096) -> Upsertion:
    return Upsertion(name, mechanism, iterations, SALT, STORED, SERVER)


class Controller:
    """The sans-I/O controller over the real state machine, each batch committed at once;
    ACL ids come from a counter, so every run decides the same."""

    def __init__(self) -> None:
        self.sm = MetadataStateMachine()
        self.seq = itertools.count()
        ids = itertools.count()
        self.controller = QuorumController(
            ControllerConfig(),
            new_topic_id=lambda: f"topic-{next(ids)}",
            new_acl_id=lambda: f"acl-{next(ids)}",
        )
        self.batches: list[list[Record]] = []
        self.append([ControllerEpochRecord(1, 0)])
        self.controller.activate(self.sm.image, 0)

    def append(self, records: list[Record]) -> AppendResult:
        self.batches.append(records)
        return self.sm.append_batch(1, "c", next(self.seq), encode_batch(records))

    def run(self, request: Any) -> Any:
        decision = self.controller.decide(self.sm.image, request, 0)
        if not decision.records:
            return decision.respond(None)
        return decision.respond(self.append(list(decision.records)))

    @property
    def last_batch(self) -> list[Record]:
        return self.batches[-1]


# -- CreateAcls ------------------------------------------------------------------------------


def test_created_bindings_are_records_under_fresh_ids_in_the_image() -> None:
    c = Controller()
    a, b = acl("orders"), acl("pay-", pattern=PREFIXED, op=WRITE, perm=DENY)
    resp = c.run(api.CreateAclsRequest([a, b]))
    assert resp == api.CreateAclsResponse([api.AclCreationResult(0), api.AclCreationResult(0)])
    assert c.last_batch == [
        AccessControlEntryRecord("acl-0", a),
        AccessControlEntryRecord("acl-1", b),
    ]
    assert c.sm.image.acls == {"acl-0": a, "acl-1": b}


def test_a_binding_already_present_or_named_twice_succeeds_without_a_second_record() -> None:
    c = Controller()
    a = acl()
    c.run(api.CreateAclsRequest([a]))
    batches = len(c.batches)
    resp = c.run(api.CreateAclsRequest([a, a]))
    assert [r.error_code for r in resp.results] == [0, 0]
    assert len(c.batches) == batches  # nothing appended at all
    resp = c.run(api.CreateAclsRequest([acl("other"), acl("other"), a]))
    assert [r.error_code for r in resp.results] == [0, 0, 0]
    assert len(c.last_batch) == 1
    assert sorted(b.resource_name for b in c.sm.image.acls.values()) == ["orders", "other"]


@pytest.mark.parametrize(
    ("binding", "message"),
    [
        (acl(rtype=ResourceType.ANY), "Invalid resourceType ANY"),
        (acl(rtype=ResourceType.UNKNOWN), "Invalid resourceType UNKNOWN"),
        (acl(rtype=42), "Invalid resourceType UNKNOWN"),
        (acl(pattern=PatternType.MATCH), "Invalid patternType MATCH"),
        (acl(pattern=PatternType.ANY), "Invalid patternType ANY"),
        (acl(op=AclOperation.ANY), "Invalid operation ANY"),
        (acl(op=AclOperation.UNKNOWN), "Invalid operation UNKNOWN"),
        (acl(perm=PermissionType.ANY), "Invalid permissionType ANY"),
        (acl(""), "Resource name should not be empty"),
        (acl("c", rtype=CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
        (acl(WILDCARD_RESOURCE, pattern=PREFIXED), "A PREFIXED pattern may not be `*`"),
        (acl(principal="alice"), "Could not parse principal from `alice`"),
    ],
)
def test_an_invalid_binding_is_refused_alone_with_invalid_request(
    binding: AclBinding, message: str
) -> None:
    c = Controller()
    good = acl("fine")
    resp = c.run(api.CreateAclsRequest([binding, good]))
    bad, ok = resp.results
    assert bad.error_code == Errors.INVALID_REQUEST and bad.error_message.startswith(message)
    assert ok == api.AclCreationResult(0)
    assert list(c.sm.image.acls.values()) == [good]


def test_valid_bindings_of_every_kind_pass_the_checks() -> None:
    assert binding_error(acl("kafka-cluster", rtype=CLUSTER, op=AclOperation.ALTER)) is None
    assert binding_error(acl(WILDCARD_RESOURCE, principal="User:*")) is None
    assert binding_error(acl("tx-", rtype=ResourceType.TRANSACTIONAL_ID, pattern=PREFIXED)) is None
    assert binding_error(acl("g", rtype=GROUP, principal="Group:ops", host="10.0.0.1")) is None


def test_an_id_already_taken_is_drawn_again() -> None:
    c = Controller()
    ids = iter(["x", "x", "y"])
    c.controller.acls._new_acl_id = lambda: next(ids)
    c.run(api.CreateAclsRequest([acl("a"), acl("b")]))
    assert sorted(c.sm.image.acls) == ["x", "y"]


# -- DeleteAcls ------------------------------------------------------------------------------


def test_delete_removes_every_match_once_and_each_filter_reports_its_matches() -> None:
    c = Controller()
    a, b, g = acl("orders"), acl("orders", op=WRITE), acl("g1", rtype=GROUP)
    c.run(api.CreateAclsRequest([a, b, g]))
    resp = c.run(
        api.DeleteAclsRequest(
            [
                AclBindingFilter(resource_type=TOPIC),
                AclBindingFilter(operation=WRITE),  # b again
                AclBindingFilter(resource_type=TOPIC, resource_name="nothing"),
            ]
        )
    )
    topics, writes, none = resp.filter_results
    assert (topics.error_code, sorted(x.operation for x in topics.matching_acls)) == (0, [3, 4])
    assert writes.matching_acls == [b]
    assert none == api.DeleteAclsFilterResult(0, None, [])
    assert sorted(c.last_batch, key=repr) == [
        RemoveAccessControlEntryRecord("acl-0"),
        RemoveAccessControlEntryRecord("acl-1"),
    ]
    assert list(c.sm.image.acls.values()) == [g]


def test_a_filter_with_unknown_codes_is_refused_alone() -> None:
    c = Controller()
    c.run(api.CreateAclsRequest([acl()]))
    resp = c.run(
        api.DeleteAclsRequest(
            [
                AclBindingFilter(resource_type=ResourceType.UNKNOWN),
                AclBindingFilter(operation=99),
                AclBindingFilter(),
            ]
        )
    )
    bad_pattern, bad_entry, everything = resp.filter_results
    assert (bad_pattern.error_code, bad_pattern.error_message) == (
        Errors.INVALID_REQUEST,
        "Unknown patternFilter.",
    )
    assert (bad_entry.error_code, bad_entry.error_message) == (
        Errors.INVALID_REQUEST,
        "Unknown entryFilter.",
    )
    assert everything.matching_acls == [acl()] and c.sm.image.acls == {}


def test_delete_with_no_match_appends_nothing() -> None:
    c = Controller()
    batches = len(c.batches)
    resp = c.run(api.DeleteAclsRequest([AclBindingFilter()]))
    assert resp == api.DeleteAclsResponse([api.DeleteAclsFilterResult(0, None, [])])
    assert len(c.batches) == batches


# -- the filters' matching rules ------------------------------------------------------------


def test_filter_pattern_types() -> None:
    lit, star, pre = acl("orders"), acl(WILDCARD_RESOURCE), acl("ord", pattern=PREFIXED)
    other = acl("payments")
    match = AclBindingFilter(TOPIC, "orders", PatternType.MATCH)
    assert [match.matches(b) for b in (lit, star, pre, other)] == [True, True, True, False]
    any_ = AclBindingFilter(TOPIC, "orders", PatternType.ANY)  # the exact name, any type
    assert [any_.matches(b) for b in (lit, star, pre, other)] == [True, False, False, False]
    prefixed = AclBindingFilter(TOPIC, "ord", PREFIXED)
    assert [prefixed.matches(b) for b in (lit, star, pre, other)] == [False, False, True, False]
    everything = AclBindingFilter(TOPIC, None, PatternType.MATCH)
    assert all(everything.matches(b) for b in (lit, star, pre, other))
    assert not AclBindingFilter(GROUP).matches(lit)


def test_filter_entry_fields() -> None:
    b = acl(principal="User:bob", host="10.0.0.1", op=WRITE, perm=DENY)
    assert AclBindingFilter(principal="User:bob", host="10.0.0.1").matches(b)
    assert not AclBindingFilter(principal="User:*").matches(b)  # no wildcard expansion
    assert not AclBindingFilter(host="*").matches(b)
    assert AclBindingFilter(operation=WRITE, permission_type=DENY).matches(b)
    assert not AclBindingFilter(operation=READ).matches(b)
    assert not AclBindingFilter(permission_type=ALLOW).matches(b)
    assert filter_error(AclBindingFilter(pattern_type=PatternType.UNKNOWN)) is not None
    assert filter_error(AclBindingFilter(permission_type=PermissionType.UNKNOWN)) is not None
    assert filter_error(AclBindingFilter(TOPIC, "x", PatternType.MATCH)) is None


NAMES = st.text(alphabet="ab*", min_size=1, max_size=4)
BINDINGS = st.builds(
    acl,
    NAMES,
    rtype=st.sampled_from([TOPIC, GROUP]),
    pattern=st.sampled_from([LITERAL, PREFIXED]),
    principal=st.sampled_from(["User:a", "User:*"]),
    op=st.sampled_from([READ, WRITE]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(BINDINGS, max_size=12), st.sampled_from([TOPIC, GROUP]), NAMES)
def test_a_match_filter_names_exactly_the_bindings_the_authorizer_applies(
    bindings: list[AclBinding], rtype: ResourceType, name: str
) -> None:
    authorizer = StandardAuthorizer()
    authorizer.load(bindings)
    applied = authorizer.applicable(rtype, name)
    matched = [b for b in bindings if AclBindingFilter(rtype, name, PatternType.MATCH).matches(b)]
    assert sorted(applied, key=astuple) == sorted(matched, key=astuple)


# -- AlterUserScramCredentials --------------------------------------------------------------


def results(resp: api.AlterUserScramCredentialsResponse) -> dict[str, tuple[int, str | None]]:
    return {r.user: (r.error_code, r.error_message) for r in resp.results}


def test_upsertions_and_deletions_are_records_in_the_image() -> None:
    c = Controller()
    resp = c.run(Alter(upsertions=[upsert("alice"), upsert("alice2", SHA512, 8192)]))
    assert results(resp) == {"alice": (0, None), "alice2": (0, None)}
    assert c.last_batch == [
        UserScramCredentialRecord("alice", SHA256, SALT, STORED, SERVER, 4096),
        UserScramCredentialRecord("alice2", SHA512, SALT, STORED, SERVER, 8192),
    ]
    cred = c.sm.image.scram_credentials[("alice2", SHA512)]
    assert (cred.salt, cred.stored_key, cred.server_key, cred.iterations) == (
        SALT,
        STORED,
        SERVER,
        8192,
    )
    resp = c.run(Alter(deletions=[Deletion("alice", SHA256)], upsertions=[upsert("bob")]))
    assert [r.user for r in resp.results] == ["alice", "bob"]  # deletions first, as Kafka
    assert c.last_batch[0] == RemoveUserScramCredentialRecord("alice", SHA256)
    assert set(c.sm.image.scram_credentials) == {("alice2", SHA512), ("bob", SHA256)}


def test_an_upsertion_replaces_the_credential_of_its_mechanism_only() -> None:
    c = Controller()
    c.run(Alter(upsertions=[upsert("alice", SHA256)]))
    c.run(Alter(upsertions=[upsert("alice", SHA512)]))
    c.run(Alter(upsertions=[upsert("alice", SHA256, 10_000)]))
    creds = c.sm.image.scram_credentials
    assert {k: v.iterations for k, v in creds.items()} == {
        ("alice", SHA256): 10_000,
        ("alice", SHA512): 4096,
    }


def test_per_user_refusals_leave_the_others_going_ahead() -> None:
    c = Controller()
    c.run(Alter(upsertions=[upsert("present")]))
    resp = c.run(
        Alter(
            deletions=[
                Deletion("ghost", SHA256),  # no such credential
                Deletion("present", SHA512),  # the user exists, that mechanism does not
                Deletion("", SHA256),
            ],
            upsertions=[
                upsert("few", iterations=4095),
                upsert("many", iterations=16385),
                upsert("edge-low", iterations=4096),
                upsert("edge-high", iterations=16384),
                upsert("md5", mechanism=0),
                upsert("nine", mechanism=9),
            ],
        )
    )
    r = results(resp)
    assert r["ghost"][0] == r["present"][0] == Errors.RESOURCE_NOT_FOUND
    assert r["ghost"][1] == "Attempt to delete a user credential that does not exist"
    assert r[""] == (Errors.UNACCEPTABLE_CREDENTIAL, "Username must not be empty")
    assert r["few"] == (Errors.UNACCEPTABLE_CREDENTIAL, "Too few iterations")
    assert r["many"] == (Errors.UNACCEPTABLE_CREDENTIAL, "Too many iterations")
    assert r["md5"] == r["nine"] == (Errors.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism")
    assert r["edge-low"] == r["edge-high"] == (Errors.NONE, None)
    assert {u for u, _ in c.sm.image.scram_credentials} == {"present", "edge-low", "edge-high"}


def test_a_user_named_twice_is_a_duplicate_and_nothing_changes_for_it() -> None:
    c = Controller()
    c.run(Alter(upsertions=[upsert("d1"), upsert("d2")]))
    before = dict(c.sm.image.scram_credentials)
    resp = c.run(
        Alter(
            deletions=[Deletion("d1", SHA256), Deletion("d2", SHA256), Deletion("d2", SHA256)],
            upsertions=[upsert("d1", SHA512), upsert("u", SHA256), upsert("u", SHA512)]
            + [upsert("u"), upsert("ok")],
        )
    )
    r = results(resp)
    dup = (
        Errors.DUPLICATE_RESOURCE,
        "A user credential cannot be altered twice in the same request",
    )
    assert r == {"d1": dup, "d2": dup, "u": dup, "ok": (0, None)}
    assert len(resp.results) == 4  # one answer per user
    assert {k: v for k, v in c.sm.image.scram_credentials.items() if k[0] != "ok"} == before


def test_reprs_keep_the_secrets_out() -> None:
    c = Controller()
    c.run(Alter(upsertions=[upsert("alice")]))
    shown = [
        upsert("alice"),
        UserScramCredentialRecord("alice", SHA256, SALT, STORED, SERVER, 4096),
        c.sm.image.scram_credentials[("alice", SHA256)],
    ]
    text = "".join(repr(x) + str(x) for x in shown)
    assert "alice" in text and "4096" in text and "SECRET" not in text


# -- snapshots -------------------------------------------------------------------------------


def test_snapshot_round_trip_keeps_bindings_and_credentials_and_decisions() -> None:
    c = Controller()
    bindings = [acl("orders"), acl("pay-", pattern=PREFIXED, perm=DENY), acl("g", rtype=GROUP)]
    c.run(api.CreateAclsRequest(bindings))
    c.run(Alter(upsertions=[upsert("alice"), upsert("bob", SHA512, 9000)]))
    image = c.sm.image
    restored = decode_snapshot(encode_snapshot(image))
    assert restored.acls == image.acls
    assert restored.scram_credentials == image.scram_credentials
    # The controller decides the same on the restored image: present bindings are not
    # created again, and the credentials can be deleted.
    decide = c.controller.decide
    assert decide(restored, api.CreateAclsRequest(bindings), 0).records == ()
    deletion = Alter(deletions=[Deletion("bob", SHA512)])
    assert decide(restored, deletion, 0).records == decide(image, deletion, 0).records
    removal = api.DeleteAclsRequest([AclBindingFilter(permission_type=DENY)])
    assert decide(restored, removal, 0) == decide(image, removal, 0)


# -- redaction in dumps ----------------------------------------------------------------------

CREDENTIAL = UserScramCredentialRecord("alice", SHA512, SALT, STORED, SERVER, 4096)
SECRETS = [SALT, STORED, SERVER]


def assert_no_secret(text: str | bytes) -> None:
    data = text.encode() if isinstance(text, str) else text
    for secret in SECRETS:
        for form in (secret, msgspec.json.encode(secret).strip(b'"')):  # raw, base64
            assert form not in data, f"{secret!r} leaked"


@async_test
async def test_json_log_redacts_credentials_and_msgpack_keeps_them() -> None:
    fake = FakeService([ControllerEpochRecord(1, 0), CREDENTIAL])
    async with serve(fake) as client:
        resp = await client.get("/v1/metadata/log?from=0")
        raw = await resp.read()
        assert_no_secret(raw)
        entry = json.loads(raw)["records"][1]
        assert entry == {
            "offset": 1,
            "record": {
                "type": "user_scram_credential",
                "name": "alice",
                "mechanism": SHA512,
                "salt": "(redacted)",
                "stored_key": "(redacted)",
                "server_key": "(redacted)",
                "iterations": 4096,
            },
        }
        resp = await client.get("/v1/metadata/log?from=0&format=msgpack")
        log = msgspec.msgpack.decode(await resp.read(), type=api.LogResponse)
        assert log.records[1].record == CREDENTIAL  # brokers need the keys


def test_metadata_cli_on_a_snapshot_redacts_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = Controller()
    c.run(api.CreateAclsRequest([acl()]))
    c.run(Alter(upsertions=[upsert("alice"), upsert("bob")]))
    c.run(Alter(upsertions=[upsert("alice", SHA512, 8192)]))
    path = tmp_path / "s.snapshot"
    write_snapshot(path, c.sm.image)
    assert kraft_main(["metadata", "--snapshot", str(path)]) == 0
    out = capsys.readouterr().out
    assert_no_secret(out)
    image = json.loads(out)
    assert image["scram_credentials"]["alice"]["SCRAM-SHA-512"] == {
        "salt": "(redacted)",
        "stored_key": "(redacted)",
        "server_key": "(redacted)",
        "iterations": 8192,
    }
    assert list(image["acls"].values())[0]["resource_name"] == "orders"
    assert kraft_main(["metadata", "--snapshot", str(path), "--records"]) == 0
    out = capsys.readouterr().out
    assert_no_secret(out)
    records = [json.loads(line) for line in out.splitlines()]
    creds = [r for r in records if r["type"] == "user_scram_credential"]
    assert len(creds) == 3 and all(r["stored_key"] == "(redacted)" for r in creds)
