"""The broker's authorizer, with the semantics of Kafka's StandardAuthorizer (KIP-801):
ACL bindings from the metadata log, `super.users`, `allow.everyone.if.no.acl.found`.

A decision on (principal, host, operation, resource):
1. a super user is allowed everything;
2. the bindings that apply to the resource are the LITERAL ones naming it, the LITERAL
   wildcard `*` of its type, and the PREFIXED ones whose prefix starts its name;
3. of those, the ones for this principal (or `User:*`) and host (or `*`): any DENY of
   the operation (or ALL) denies, whatever allows it (deny wins);
4. else an ALLOW of the operation (or ALL, or one that implies it: READ, WRITE, DELETE
   and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS) allows;
5. else, if no binding at all applies to the resource (for anyone),
   `allow.everyone.if.no.acl.found` decides; otherwise denied.

Sans-I/O: the index is rebuilt from the image when ACL records arrive (a publisher), and
every decision is a few dict lookups: O(length of the name) for prefixed patterns.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from common.acl import (
    WILDCARD_HOST,
    WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
    AclBinding,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from metadata_log.delta import MetadataDelta
from metadata_log.image import MetadataImage

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"

# An ALLOW of the key operation also allows the operations in its value (Kafka's
# AclAuthorizer/StandardAuthorizer "implied" operations).
_IMPLIED_BY: dict[AclOperation, frozenset[int]] = {
    AclOperation.DESCRIBE: frozenset(
        {
            AclOperation.DESCRIBE,
            AclOperation.READ,
            AclOperation.WRITE,
            AclOperation.DELETE,
            AclOperation.ALTER,
        }
    ),
    AclOperation.DESCRIBE_CONFIGS: frozenset(
        {AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS}
    ),
}


def parse_super_users(value: str | None) -> frozenset[str]:
    """`super.users`: principals separated by semicolons (`User:admin;User:broker`)."""
    return frozenset(p.strip() for p in (value or "").split(";") if p.strip())


class StandardAuthorizer:
    """Authorizes requests against the ACL bindings of the latest metadata image."""

    def __init__(
        self,
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        self.super_users = super_users
        self.allow_everyone_if_no_acl_found = allow_everyone_if_no_acl_found
        self.bindings: tuple[AclBinding, ...] = ()
        # (resource type, name) -> bindings; LITERAL and PREFIXED apart.
        self._literal: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefixed: dict[tuple[int, str], list[AclBinding]] = {}
        self._prefix_lengths: dict[int, tuple[int, ...]] = {}  # type -> prefix lengths in use
        self._by_type: dict[int, list[AclBinding]] = {}

    # -- the publisher side ----------------------------------------------------------------

    async def on_metadata_update(
        self, delta: MetadataDelta, image: MetadataImage, manifest: object
    ) -> None:
        # A snapshot replaces the image wholesale: reload even when it holds no ACLs.
        if delta.acls_changed or getattr(manifest, "snapshot", False):
            self.load(image.acls.values())

    def load(self, bindings: Iterable[AclBinding]) -> None:
        """Replace the index (a new dict set each time: decisions running meanwhile keep
        reading the old one)."""
        literal: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        prefixed: dict[tuple[int, str], list[AclBinding]] = defaultdict(list)
        lengths: dict[int, set[int]] = defaultdict(set)
        by_type: dict[int, list[AclBinding]] = defaultdict(list)
        kept = tuple(bindings)
        for b in kept:
            by_type[b.resource_type].append(b)
            if b.pattern_type == PatternType.LITERAL:
                literal[(b.resource_type, b.resource_name)].append(b)
            elif b.pattern_type == PatternType.PREFIXED:
                prefixed[(b.resource_type, b.resource_name)].append(b)
                lengths[b.resource_type].add(len(b.resource_name))
        self.bindings = kept
        self._literal = dict(literal)
        self._prefixed = dict(prefixed)
        self._prefix_lengths = {t: tuple(sorted(n)) for t, n in lengths.items()}
        self._by_type = dict(by_type)

    # -- decisions ---------------------------------------------------------------------------

    def applicable(self, resource_type: ResourceType, name: str) -> list[AclBinding]:
        """Every binding that applies to the resource, for any principal."""
        rtype = int(resource_type)
        out = list(self._literal.get((rtype, name), ()))
        if name != WILDCARD_RESOURCE:
            out += self._literal.get((rtype, WILDCARD_RESOURCE), ())
        for n in self._prefix_lengths.get(rtype, ()):
            if n > len(name):
                break
            out += self._prefixed.get((rtype, name[:n]), ())
        return out

    def authorize(
        self,
        principal: str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
    ) -> bool:
        if principal in self.super_users:
            return True
        bindings = self.applicable(resource_type, name)
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        implied = _IMPLIED_BY.get(operation, frozenset((int(operation),)))
        allowed = False
        for b in bindings:
            effect = _effect(b, principal, host, operation, implied)
            if effect == PermissionType.DENY:
                return False
            allowed = allowed or effect == PermissionType.ALLOW
        return allowed

    def authorize_any(
        self, principal: str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        """Is `operation` allowed on at least one resource of the type (Kafka's
        authorizeByResourceType, e.g. "may write some topic" for idempotent producers)?
        True when some ALLOW pattern for the principal is not wholly covered by a DENY."""
        if principal in self.super_users:
            return True
        rtype = int(resource_type)
        bindings = self._by_type.get(rtype, [])
        if not bindings:
            return self.allow_everyone_if_no_acl_found
        implied = _IMPLIED_BY.get(operation, frozenset((int(operation),)))
        allow: list[AclBinding] = []
        deny: list[AclBinding] = []
        for b in bindings:
            effect = _effect(b, principal, host, operation, implied)
            if effect == PermissionType.DENY:
                deny.append(b)
            elif effect == PermissionType.ALLOW:
                allow.append(b)
        denied_prefixes = [d.resource_name for d in deny if d.pattern_type == PatternType.PREFIXED]
        denied_literals = {d.resource_name for d in deny if d.pattern_type == PatternType.LITERAL}
        if WILDCARD_RESOURCE in denied_literals:
            return False
        for a in allow:
            if any(a.resource_name.startswith(p) for p in denied_prefixes):
                continue
            if a.pattern_type == PatternType.LITERAL and a.resource_name in denied_literals:
                continue
            return True
        return False


def _effect(
    b: AclBinding, principal: str, host: str, operation: AclOperation, implied: frozenset[int]
) -> PermissionType | None:
    """What binding `b` says about `operation` for this principal and host: DENY (of the
    operation or ALL), ALLOW (of it, ALL, or an operation implying it), or None."""
    if b.principal not in (principal, WILDCARD_PRINCIPAL) or b.host not in (host, WILDCARD_HOST):
        return None
    if b.permission_type == PermissionType.DENY:
        return PermissionType.DENY if b.operation in (operation, AclOperation.ALL) else None
    if b.operation == AclOperation.ALL or b.operation in implied:
        return PermissionType.ALLOW
    return None
