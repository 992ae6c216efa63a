"""Kafka's ACL vocabulary (org.apache.kafka.common.acl and .resource): the codes of
operations, resource types, pattern types and permissions as the wire carries them
(CreateAcls, DescribeAcls, DeleteAcls), one ACL binding, the filters DescribeAcls and
DeleteAcls name bindings with, and the checks a new binding or a filter must pass.

Shared by the metadata records (bindings are records in the metadata log), the
controller (which validates and stores them), the broker's authorizer and the tools.
"""

from __future__ import annotations

from enum import IntEnum

import msgspec

CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name
WILDCARD_RESOURCE = "*"  # a LITERAL pattern that matches every name of its type
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only: any pattern type
    MATCH = 2  # filters only: every binding that would apply to the name
    LITERAL = 3
    PREFIXED = 4


class PermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1  # filters only
    DENY = 2
    ALLOW = 3


# Kafka's AclEntry.supportedOperations, per resource type: what an ACL may name (ALL
# aside; kafka-acls checks it) and what an authorized-operations bitfield (Metadata,
# DescribeGroups, DescribeCluster) reports on.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        AclOperation.READ,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}


class AclBinding(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One ACL: `principal` from `host` is allowed (or denied) `operation` on the
    resources that `(resource_type, resource_name, pattern_type)` names. Enum fields
    hold the wire codes (ints), so the struct encodes the same in msgpack and JSON."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str  # "User:alice", or WILDCARD_PRINCIPAL
    host: str  # an IP address, or WILDCARD_HOST
    operation: int
    permission_type: int


class AclBindingFilter(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Which bindings a DescribeAcls or DeleteAcls names (Kafka's AclBindingFilter): ANY
    codes and None strings match anything. Pattern type MATCH names every binding that
    applies to `resource_name`: LITERAL with that name, LITERAL `*`, and PREFIXED whose
    prefix starts the name."""

    resource_type: int = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: int = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: int = AclOperation.ANY
    permission_type: int = PermissionType.ANY

    def matches(self, b: AclBinding) -> bool:
        return self._matches_pattern(b) and self._matches_entry(b)

    def _matches_pattern(self, b: AclBinding) -> bool:
        # ResourcePatternFilter.matches
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH, b.pattern_type):
            return False
        if self.resource_name is None:
            return True
        if self.pattern_type in (PatternType.ANY, b.pattern_type):
            return self.resource_name == b.resource_name
        if b.pattern_type == PatternType.LITERAL:  # MATCH from here on
            return b.resource_name in (self.resource_name, WILDCARD_RESOURCE)
        return self.resource_name.startswith(b.resource_name)  # PREFIXED

    def _matches_entry(self, b: AclBinding) -> bool:
        # AccessControlEntryFilter.matches
        return (
            (self.principal is None or self.principal == b.principal)
            and (self.host is None or self.host == b.host)
            and self.operation in (AclOperation.ANY, b.operation)
            and self.permission_type in (PermissionType.ANY, b.permission_type)
        )


def _code(enum: type[IntEnum], value: int) -> IntEnum:
    """The enum member of a wire code; UNKNOWN for a code we do not know (Kafka's fromCode)."""
    try:
        return enum(value)
    except ValueError:
        return enum(0)


def binding_error(b: AclBinding) -> str | None:
    """Why `b` may not be created (answered as INVALID_REQUEST), or None when it may: the
    checks of Kafka's AclControlManager.validateNewAcl and AclApis.handleCreateAcls, plus a
    principal of the form `Type:name` (which StandardAcl needs) and no PREFIXED `*` (a
    pattern that matches only names starting with a star: always a mistaken wildcard)."""
    rtype = _code(ResourceType, b.resource_type)
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {rtype.name}"
    ptype = _code(PatternType, b.pattern_type)
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {ptype.name}"
    op = _code(AclOperation, b.operation)
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {op.name}"
    perm = _code(PermissionType, b.permission_type)
    if perm not in (PermissionType.DENY, PermissionType.ALLOW):
        return f"Invalid permissionType {perm.name}"
    if not b.resource_name:
        return "Resource name should not be empty"
    if rtype == ResourceType.CLUSTER and b.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if ptype == PatternType.PREFIXED and b.resource_name == WILDCARD_RESOURCE:
        return "A PREFIXED pattern may not be `*`: use a LITERAL `*` to match every name"
    if ":" not in b.principal:
        return (
            f"Could not parse principal from `{b.principal}` (no colon is present "
            "separating the principal type from the principal name)"
        )
    return None


def filter_error(f: AclBindingFilter) -> str | None:
    """Why `f` may not be used (INVALID_REQUEST), or None: an UNKNOWN (or unknown) code in
    it, as Kafka's AclControlManager.validateFilter and the requests' own checks refuse."""
    if (
        _code(ResourceType, f.resource_type) == ResourceType.UNKNOWN
        or _code(PatternType, f.pattern_type) == PatternType.UNKNOWN
    ):
        return "Unknown patternFilter."
    if (
        _code(AclOperation, f.operation) == AclOperation.UNKNOWN
        or _code(PermissionType, f.permission_type) == PermissionType.UNKNOWN
    ):
        return "Unknown entryFilter."
    return None
