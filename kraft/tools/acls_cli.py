"""`kraft acls --add|--remove|--list`: kafka-acls.sh over the Kafka protocol (CreateAcls,
DescribeAcls, DeleteAcls through confluent-kafka's AdminClient).

Options, defaults and output are Kafka's (org.apache.kafka.tools.AclCommand):
- resources: `--topic`, `--group`, `--transactional-id` (each repeatable; `*` is every
  name), `--cluster`; `--resource-pattern-type` literal (the default) or prefixed, and
  for --list/--remove also `any` (any pattern type, this exact name) or `match` (every
  binding that applies to the name);
- entries: `--allow-principal` / `--deny-principal` (`User:alice`), `--allow-host` /
  `--deny-host` (default `*` once a principal is given), `--operation` (repeatable;
  default All);
- `--producer` (Write, Describe, Create on the topics; Write, Describe on the
  transactional ids; IdempotentWrite on the cluster with `--idempotent`) and
  `--consumer` (Read, Describe on the topics; Read on the groups);
- `--list [--principal User:alice]`.

`--remove` asks for confirmation when stdin is a terminal, as Kafka's tool does;
`--force` skips the question, and so does a non-interactive run (a script, a pipe).
ACLs need a broker with an authorizer (`authorizer.class.name`) and a principal allowed
to Describe the cluster (to list) or Alter it (to change; a super user). librdkafka does
not report DescribeAcls' error code: an empty listing is checked against the cluster's
authorized operations, and a broker without an authorizer lists no ACLs (Kafka's tool
says SECURITY_DISABLED; adding or removing does say so here too).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from typing import Any, NamedTuple

from common.acl import (
    CLUSTER_NAME,
    SUPPORTED_OPERATIONS,
    WILDCARD_HOST,
    AclOperation,
    PatternType,
    PermissionType,
    ResourceType,
)
from kraft.tools.client_common import (
    AdminTool,
    CliError,
    bootstrap_parser,
    require_cluster_describe,
    resolve_connection,
    run_reporting,
    timeout_parser,
)

COMMANDS = ("acls",)

_OPERATION_NAMES = (
    "Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, "
    "AlterConfigs, IdempotentWrite, All"
)


class ResourcePattern(NamedTuple):
    """A resource pattern (or, with ANY/MATCH, a filter), printed as Kafka prints it."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


class AccessControlEntry(NamedTuple):
    principal: str
    host: str
    operation: AclOperation
    permission_type: PermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission_type.name})"
        )


CLUSTER_PATTERN = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME, PatternType.LITERAL)


def add_parser(sub: Any) -> None:
    """Register `acls` on the `kraft` subparsers."""
    p = sub.add_parser(
        "acls",
        parents=[bootstrap_parser(), timeout_parser()],
        help="add, remove or list ACLs (kafka-acls)",
        description="Add, remove or list ACLs, as kafka-acls.sh does.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument(
        "--remove", action="store_true", help="remove ACLs (asks first on a terminal)"
    )
    action.add_argument("--list", action="store_true", help="list ACLs")
    p.add_argument("--topic", action="append", default=[], help="a topic ('*': every topic)")
    p.add_argument("--group", action="append", default=[], help="a consumer group ('*': all)")
    p.add_argument("--transactional-id", action="append", default=[], metavar="ID")
    p.add_argument("--cluster", action="store_true", help="the cluster resource")
    p.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=["literal", "prefixed", "any", "match"],
        help="literal (default) or prefixed; --list and --remove also take any and match",
    )
    p.add_argument(
        "--operation",
        action="append",
        default=[],
        help=f"repeatable: {_OPERATION_NAMES} (default All)",
    )
    p.add_argument("--allow-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument("--deny-principal", action="append", default=[], metavar="TYPE:NAME")
    p.add_argument(
        "--allow-host", action="append", default=[], metavar="HOST", help="default: * (any)"
    )
    p.add_argument(
        "--deny-host", action="append", default=[], metavar="HOST", help="default: * (any)"
    )
    p.add_argument(
        "--principal",
        action="append",
        default=[],
        metavar="TYPE:NAME",
        help="with --list: only this principal's ACLs",
    )
    p.add_argument("--producer", action="store_true", help="Write, Describe, Create on the topics")
    p.add_argument(
        "--idempotent", action="store_true", help="with --producer: IdempotentWrite on the cluster"
    )
    p.add_argument(
        "--consumer",
        action="store_true",
        help="Read, Describe on the topics and Read on the groups",
    )
    p.add_argument("--force", action="store_true", help="do not ask before removing")


def run(args: argparse.Namespace) -> int:
    """Run a parsed `acls` command; return the exit status."""

    def action() -> int:
        check_args(args)
        plan = filter_to_acls(args) if not args.list else {}
        resolve_connection(args)
        admin = _Admin(args)
        if args.add:
            return _add(admin, plan)
        if args.remove:
            return _remove(admin, plan, args.force)
        return _list(admin, args)

    return run_reporting("acls", action)


# -- the plan (no I/O) ---------------------------------------------------------------------


def check_args(args: argparse.Namespace) -> None:
    """Kafka's usage rules for combinations of options."""
    entry_options = (
        args.producer or args.consumer or args.allow_host or args.allow_principal
        or args.deny_host or args.deny_principal
    )  # fmt: skip
    if args.list and entry_options:
        raise CliError(
            "--list takes no --producer, --consumer, --allow-*/--deny-* options "
            "(use --principal to filter)"
        )
    if (args.producer or args.consumer) and (
        args.operation or args.deny_principal or args.deny_host
    ):
        raise CliError(
            "--producer and --consumer take no --operation, --deny-principal, --deny-host"
        )
    if args.principal and not args.list:
        raise CliError("The --principal option is only available if --list is set")
    if args.producer and not args.topic:
        raise CliError("With --producer you must specify a --topic")
    if args.idempotent and not args.producer:
        raise CliError("The --idempotent option is only available if --producer is set")
    if args.consumer and (
        not args.topic
        or not args.group
        or (not args.producer and (args.cluster or args.transactional_id))
    ):
        raise CliError(
            "With --consumer you must specify a --topic and a --group and no --cluster or "
            "--transactional-id option should be specified."
        )
    if args.add and args.resource_pattern_type in ("any", "match"):
        raise CliError(
            f"A '--resource-pattern-type' value of '{args.resource_pattern_type}' is not "
            "valid when adding acls."
        )
    for name in (*args.allow_principal, *args.deny_principal, *args.principal):
        parse_principal(name)


def parse_principal(text: str) -> str:
    """`Type:name` (Kafka's KafkaPrincipal form), stripped."""
    kind, sep, name = text.strip().partition(":")
    if not sep or not kind or not name:
        raise CliError(
            f"expected a string in format principalType:principalName but got {text.strip()!r}"
        )
    return f"{kind}:{name}"


def parse_operation(text: str) -> AclOperation:
    """`Read`, `ClusterAction`, `cluster_action`, ... (any case) -> AclOperation."""
    key = text.strip().replace("_", "").replace("-", "").lower()
    for op in AclOperation:
        if op.name.replace("_", "").lower() == key and op not in _NOT_NAMEABLE:
            return op
    raise CliError(f"--operation {text.strip()!r}: one of {_OPERATION_NAMES}")


_NOT_NAMEABLE = frozenset({AclOperation.UNKNOWN, AclOperation.ANY})


def resource_filters(args: argparse.Namespace, *, required: bool) -> list[ResourcePattern]:
    """The resources the options name, with --resource-pattern-type (the cluster only
    as a literal, as in Kafka)."""
    pattern = PatternType[args.resource_pattern_type.upper()]
    out = [ResourcePattern(ResourceType.TOPIC, t.strip(), pattern) for t in args.topic]
    if pattern == PatternType.LITERAL and (args.cluster or args.idempotent):
        out.append(CLUSTER_PATTERN)
    out += [ResourcePattern(ResourceType.GROUP, g.strip(), pattern) for g in args.group]
    out += [
        ResourcePattern(ResourceType.TRANSACTIONAL_ID, t, pattern) for t in args.transactional_id
    ]
    if not out and required:
        raise CliError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <id>"
        )
    return list(dict.fromkeys(out))


def entries(
    args: argparse.Namespace, operations: Iterable[AclOperation]
) -> set[AccessControlEntry]:
    """Every (principal, host, operation) of the allow and deny options."""
    out: set[AccessControlEntry] = set()
    sides = (
        (args.allow_principal, args.allow_host, PermissionType.ALLOW),
        (args.deny_principal, args.deny_host, PermissionType.DENY),
    )
    ops = list(operations)
    for principals, hosts, permission in sides:
        host_set = [h.strip() for h in hosts] or [WILDCARD_HOST]
        for principal in principals:
            for op in ops:
                for host in host_set:
                    out.add(AccessControlEntry(parse_principal(principal), host, op, permission))
    return out


def filter_to_acls(args: argparse.Namespace) -> dict[ResourcePattern, set[AccessControlEntry]]:
    """For --add and --remove: each resource and the entries to add to it (or remove
    from it; no entries = every ACL of the resource)."""
    plan: dict[ResourcePattern, set[AccessControlEntry]] = {}
    filters = resource_filters(args, required=True)
    if not args.producer and not args.consumer:
        ops = [parse_operation(o) for o in args.operation] or [AclOperation.ALL]
        acls = entries(args, ops)
        plan = {f: set(acls) for f in filters}
    if args.producer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                ops = (AclOperation.WRITE, AclOperation.DESCRIBE, AclOperation.CREATE)
                plan[f] = entries(args, ops)
            elif f.resource_type == ResourceType.TRANSACTIONAL_ID:
                plan[f] = entries(args, (AclOperation.WRITE, AclOperation.DESCRIBE))
        if args.idempotent:
            plan[CLUSTER_PATTERN] = entries(args, (AclOperation.IDEMPOTENT_WRITE,))
    if args.consumer:
        for f in filters:
            if f.resource_type == ResourceType.TOPIC:
                plan.setdefault(f, set()).update(
                    entries(args, (AclOperation.READ, AclOperation.DESCRIBE))
                )
            elif f.resource_type == ResourceType.GROUP:
                plan.setdefault(f, set()).update(entries(args, (AclOperation.READ,)))
    for resource, acls in plan.items():
        allowed = {*SUPPORTED_OPERATIONS[resource.resource_type], AclOperation.ALL}
        if any(a.operation not in allowed for a in acls):
            names = ", ".join(sorted(op.name for op in allowed))
            raise CliError(f"ResourceType {resource.resource_type.name} only supports "
                           f"operations {names}")  # fmt: skip
    if args.add and any(not acls for acls in plan.values()):
        raise CliError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    return plan


# -- talking to the brokers ------------------------------------------------------------------


class _Admin(AdminTool):
    """The admin client, with bindings converted to and from our NamedTuples."""

    def describe(
        self, f: ResourcePattern | None
    ) -> list[tuple[ResourcePattern, AccessControlEntry]]:
        """The bindings matching resource filter `f` (None: every binding)."""
        flt = _filter(f, None)
        found = self._get(self.client.describe_acls(flt, request_timeout=self.timeout_s))
        return [_from_binding(b) for b in found]

    def create(self, resource: ResourcePattern, acls: Iterable[AccessControlEntry]) -> None:
        from confluent_kafka.admin import AclBinding

        bindings = [
            AclBinding(
                int(resource.resource_type), resource.name, int(resource.pattern_type),
                a.principal, a.host, int(a.operation), int(a.permission_type),
            )
            for a in acls
        ]  # fmt: skip
        futures = self.client.create_acls(bindings, request_timeout=self.timeout_s)
        for fut in futures.values():
            self._get(fut)

    def delete(self, resource: ResourcePattern, acls: set[AccessControlEntry]) -> None:
        filters = [_filter(resource, a) for a in acls] if acls else [_filter(resource, None)]
        futures = self.client.delete_acls(filters, request_timeout=self.timeout_s)
        for fut in futures.values():
            self._get(fut)


def _filter(f: ResourcePattern | None, acl: AccessControlEntry | None) -> Any:
    from confluent_kafka.admin import AclBindingFilter

    kind, name, pattern = (
        (int(f.resource_type), f.name, int(f.pattern_type))
        if f is not None
        else (int(ResourceType.ANY), None, int(PatternType.ANY))
    )
    if acl is None:
        return AclBindingFilter(
            kind, name, pattern, None, None, int(AclOperation.ANY), int(PermissionType.ANY)
        )
    return AclBindingFilter(
        kind, name, pattern, acl.principal, acl.host, int(acl.operation), int(acl.permission_type)
    )


def _from_binding(b: Any) -> tuple[ResourcePattern, AccessControlEntry]:
    resource = ResourcePattern(
        ResourceType(b.restype.value), b.name, PatternType(b.resource_pattern_type.value)
    )
    acl = AccessControlEntry(
        b.principal,
        b.host,
        AclOperation(b.operation.value),
        PermissionType(b.permission_type.value),
    )
    return resource, acl


# -- the actions -----------------------------------------------------------------------------


def _sorted_plan(plan: dict[ResourcePattern, set[AccessControlEntry]]) -> list[Any]:
    return sorted(plan.items(), key=lambda item: _resource_key(item[0]))


def _resource_key(r: ResourcePattern) -> tuple[int, str, int]:
    return (int(r.resource_type), r.name, int(r.pattern_type))


def _entries_text(acls: Iterable[AccessControlEntry]) -> str:
    return "\n".join(f"\t{a}" for a in sorted(acls))


def _add(admin: _Admin, plan: dict[ResourcePattern, set[AccessControlEntry]]) -> int:
    for resource, acls in _sorted_plan(plan):
        existing = {acl for r, acl in admin.describe(resource) if r == resource}
        new = set()
        for acl in sorted(acls):
            if acl in existing:
                print(f"Acl (pattern={resource}, entry={acl}) already exists.")
            else:
                new.add(acl)
        if new:
            print(f"Adding ACLs for resource `{resource}`: \n {_entries_text(new)}\n")
            admin.create(resource, new)
    return 0


def _remove(
    admin: _Admin, plan: dict[ResourcePattern, set[AccessControlEntry]], force: bool
) -> int:
    for resource, acls in _sorted_plan(plan):
        if acls:
            question = (
                f"Are you sure you want to remove ACLs: \n {_entries_text(acls)}\n"
                f" from resource filter `{resource}`? (y/n)"
            )
        else:
            question = (
                f"Are you sure you want to delete all ACLs for resource filter `{resource}`? (y/n)"
            )
        if force or _confirm(question):
            admin.delete(resource, acls)
    return 0


def _confirm(question: str) -> bool:
    """Ask on a terminal; a non-interactive run (no terminal to ask on) goes ahead."""
    if not sys.stdin.isatty():
        return True
    print(question, flush=True)
    return sys.stdin.readline().strip().lower() == "y"


def _list(admin: _Admin, args: argparse.Namespace) -> int:
    filters = resource_filters(args, required=False)
    found: dict[ResourcePattern, set[AccessControlEntry]] = {}
    for f in filters or [None]:
        for resource, acl in admin.describe(f):
            found.setdefault(resource, set()).add(acl)
    if not found:  # librdkafka drops DescribeAcls' error code: was it a refusal?
        require_cluster_describe(admin.client, admin.bootstrap, admin.timeout_s, "listing ACLs")
    principals = list(dict.fromkeys(parse_principal(p) for p in args.principal))
    if not principals:
        _print_acls(found)
        return 0
    for principal in principals:
        print(f"ACLs for principal `{principal}`")
        mine = {r: {a for a in acls if a.principal == principal} for r, acls in found.items()}
        _print_acls({r: acls for r, acls in mine.items() if acls})
    return 0


def _print_acls(found: dict[ResourcePattern, set[AccessControlEntry]]) -> None:
    for resource, acls in _sorted_plan(found):
        print(f"Current ACLs for resource `{resource}`:\n{_entries_text(acls)}\n")
