"""StandardAuthorizer semantics (sans-I/O): patterns, wildcards, deny wins, implied
operations, super users, and allow.everyone.if.no.acl.found."""

from __future__ import annotations

import asyncio

from hypothesis import given
from hypothesis import strategies as st

from broker.security.authorizer import StandardAuthorizer, parse_super_users
from common.acl import AclBinding, AclOperation, PatternType, PermissionType, ResourceType
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage
from metadata_log.records import AccessControlEntryRecord, RemoveAccessControlEntryRecord

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
Op = AclOperation


def acl(rtype, name, pattern, principal, op, perm=ALLOW, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authz(*bindings: AclBinding, **kw) -> StandardAuthorizer:
    a = StandardAuthorizer(**kw)
    a.load(bindings)
    return a


def test_no_acls_denies_unless_allow_everyone() -> None:
    assert not authz().authorize("User:a", "1.2.3.4", Op.READ, T, "t")
    assert authz(allow_everyone_if_no_acl_found=True).authorize("User:a", "h", Op.READ, T, "t")


def test_allow_everyone_applies_only_where_no_acl_names_the_resource() -> None:
    a = authz(acl(T, "t", LIT, "User:b", Op.READ), allow_everyone_if_no_acl_found=True)
    assert not a.authorize("User:a", "h", Op.READ, T, "t")  # t has ACLs: not for a
    assert a.authorize("User:a", "h", Op.READ, T, "other")


def test_literal_prefixed_and_wildcard_patterns() -> None:
    a = authz(
        acl(T, "orders-", PRE, "User:alice", Op.WRITE),
        acl(T, "audit", LIT, "User:alice", Op.READ),
        acl(G, "*", LIT, "User:alice", Op.READ),
    )
    assert a.authorize("User:alice", "h", Op.WRITE, T, "orders-eu")
    assert a.authorize("User:alice", "h", Op.WRITE, T, "orders-")
    assert not a.authorize("User:alice", "h", Op.WRITE, T, "order")
    assert not a.authorize("User:alice", "h", Op.WRITE, T, "audit")
    assert a.authorize("User:alice", "h", Op.READ, T, "audit")
    assert not a.authorize("User:alice", "h", Op.READ, T, "audit2")
    assert a.authorize("User:alice", "h", Op.READ, G, "any-group")
    assert not a.authorize("User:bob", "h", Op.READ, G, "any-group")


def test_deny_beats_allow_and_all() -> None:
    a = authz(
        acl(T, "orders-", PRE, "User:*", Op.ALL),
        acl(T, "orders-secret", LIT, "User:alice", Op.READ, DENY),
    )
    assert a.authorize("User:alice", "h", Op.READ, T, "orders-eu")
    assert not a.authorize("User:alice", "h", Op.READ, T, "orders-secret")
    assert a.authorize("User:alice", "h", Op.WRITE, T, "orders-secret")
    assert a.authorize("User:bob", "h", Op.READ, T, "orders-secret")
    b = authz(acl(T, "t", LIT, "User:a", Op.READ), acl(T, "t", LIT, "User:a", Op.ALL, DENY))
    assert not b.authorize("User:a", "h", Op.READ, T, "t")


def test_hosts() -> None:
    a = authz(acl(T, "t", LIT, "User:a", Op.READ, host="10.0.0.1"))
    assert a.authorize("User:a", "10.0.0.1", Op.READ, T, "t")
    assert not a.authorize("User:a", "10.0.0.2", Op.READ, T, "t")


def test_implied_operations() -> None:
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        assert authz(acl(T, "t", LIT, "User:a", op)).authorize("User:a", "h", Op.DESCRIBE, T, "t")
    a = authz(acl(T, "t", LIT, "User:a", Op.ALTER_CONFIGS))
    assert a.authorize("User:a", "h", Op.DESCRIBE_CONFIGS, T, "t")
    assert not a.authorize("User:a", "h", Op.READ, T, "t")
    # A DENY implies nothing: deny READ does not deny DESCRIBE.
    d = authz(acl(T, "t", LIT, "User:a", Op.DESCRIBE), acl(T, "t", LIT, "User:a", Op.READ, DENY))
    assert d.authorize("User:a", "h", Op.DESCRIBE, T, "t")


def test_super_users() -> None:
    assert parse_super_users(" User:admin ; User:b;") == frozenset({"User:admin", "User:b"})
    a = authz(acl(C, "kafka-cluster", LIT, "User:admin", Op.ALL, DENY), super_users={"User:admin"})
    assert a.authorize("User:admin", "h", Op.ALTER, C, "kafka-cluster")


def test_authorize_any() -> None:
    a = authz(acl(T, "orders-", PRE, "User:a", Op.WRITE))
    assert a.authorize_any("User:a", "h", Op.WRITE, T)
    assert not a.authorize_any("User:b", "h", Op.WRITE, T)
    b = authz(
        acl(T, "orders-", PRE, "User:a", Op.WRITE), acl(T, "orders", PRE, "User:a", Op.WRITE, DENY)
    )
    assert not b.authorize_any("User:a", "h", Op.WRITE, T)
    c = authz(acl(T, "x", LIT, "User:a", Op.WRITE), acl(T, "*", LIT, "User:a", Op.WRITE, DENY))
    assert not c.authorize_any("User:a", "h", Op.WRITE, T)


def test_follows_the_metadata_log() -> None:
    a = StandardAuthorizer()
    binding = acl(T, "t", LIT, "User:a", Op.READ)
    delta = MetadataDelta(MetadataImage())
    delta.replay(AccessControlEntryRecord("id-1", binding), 1)
    image = delta.apply()
    asyncio.run(a.on_metadata_update(delta, image, None))
    assert a.authorize("User:a", "h", Op.READ, T, "t")
    delta2 = MetadataDelta(image)
    delta2.replay(RemoveAccessControlEntryRecord("id-1"), 2)
    asyncio.run(a.on_metadata_update(delta2, delta2.apply(), None))
    assert not a.authorize("User:a", "h", Op.READ, T, "t")


names = st.text(alphabet="ab-*", min_size=0, max_size=4)
bindings = st.builds(
    acl,
    st.sampled_from([T, G]),
    names,
    st.sampled_from([LIT, PRE]),
    st.sampled_from(["User:a", "User:b", "User:*"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE, Op.ALL]),
    st.sampled_from([ALLOW, DENY]),
    st.sampled_from(["*", "h1"]),
)


def model(bs, principal, host, op, rtype, name, allow_everyone) -> bool:
    """The rules written out plainly, scanning every binding."""

    def applies(b):
        if b.resource_type != rtype:
            return False
        if b.pattern_type == LIT:
            return b.resource_name in (name, "*")
        return name.startswith(b.resource_name)

    mine = [b for b in bs if applies(b)]
    if not mine:
        return allow_everyone
    for_me = [b for b in mine if b.principal in (principal, "User:*") and b.host in (host, "*")]
    if any(b.permission_type == DENY and b.operation in (op, Op.ALL) for b in for_me):
        return False
    ok = {op, Op.ALL} | ({Op.READ, Op.WRITE, Op.DELETE, Op.ALTER} if op == Op.DESCRIBE else set())
    return any(b.permission_type == ALLOW and b.operation in ok for b in for_me)


@given(
    st.lists(bindings, max_size=8),
    st.sampled_from(["User:a", "User:b"]),
    st.sampled_from(["h1", "h2"]),
    st.sampled_from([Op.READ, Op.WRITE, Op.DESCRIBE]),
    st.sampled_from([T, G]),
    names,
    st.booleans(),
)
def test_index_agrees_with_a_plain_scan(bs, principal, host, op, rtype, name, allow_everyone):
    a = authz(*bs, allow_everyone_if_no_acl_found=allow_everyone)
    assert a.authorize(principal, host, op, rtype, name) == model(
        bs, principal, host, op, rtype, name, allow_everyone
    )
