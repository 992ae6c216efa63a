"""Kafka's ACL vocabulary (org.apache.kafka.common.acl and .resource): the codes of
operations, resource types, pattern types and permissions as the wire carries them
(CreateAcls, DescribeAcls, DeleteAcls), and one ACL binding.

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
