"""`kraft configs`: kafka-configs.sh for SCRAM users (KIP-554), over the Kafka protocol
(DescribeUserScramCredentials and AlterUserScramCredentials through confluent-kafka's
AdminClient); topics and brokers (`--entity-type topics|brokers`, `--entity-default`,
`--all`) are kraft/tools/entity_configs.py's.

    kraft configs --alter --entity-type users --entity-name alice \\
        --add-config 'SCRAM-SHA-512=[iterations=8192,password=alice-secret]'
    kraft configs --alter --entity-type users --entity-name alice --delete-config SCRAM-SHA-512
    kraft configs --describe --entity-type users [--entity-name alice]

`--user alice` is short for `--entity-type users --entity-name alice`. A credential's
iterations default to 4096 (Kafka's minimum; the brokers take 4096..16384). The
password is sent once, salted by the client (librdkafka); the brokers keep only the
salted keys, and nothing prints it. Output is Kafka's: "SCRAM credential configs for
user-principal 'alice' are SCRAM-SHA-512=iterations=8192" and "Completed updating config
for user alice.".
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from common.scram import MIN_ITERATIONS, ScramMechanism
from kraft.tools.client_common import (
    AdminTool,
    CliError,
    bootstrap_parser,
    require_cluster_describe,
    resolve_connection,
    run_reporting,
    timeout_parser,
)
from kraft.tools.entity_configs import run_entity

COMMANDS = ("configs",)
ENTITY_TYPES = ("users", "topics", "brokers")
# The user quotas kafka-configs also sets on users: named so the refusal is clear.
_QUOTA_KEYS = frozenset(
    {"producer_byte_rate", "consumer_byte_rate", "request_percentage", "controller_mutation_rate"}
)
# A comma outside square brackets separates entries (Kafka's ConfigCommand rule).
_ENTRY_SPLIT = re.compile(r",(?=[^\]]*(?:\[|$))")


def add_parser(sub: Any) -> None:
    """Register `configs` on the `kraft` subparsers."""
    p = sub.add_parser(
        "configs",
        parents=[bootstrap_parser(), timeout_parser()],
        help="describe or alter topic, broker and SCRAM user configs (kafka-configs)",
        description="Describe or alter topic, broker and SCRAM user configs, as "
        "kafka-configs.sh does.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--describe", action="store_true", help="show the configs")
    action.add_argument("--alter", action="store_true", help="add or delete configs")
    p.add_argument("--entity-type", choices=ENTITY_TYPES, help="topics, brokers or users")
    p.add_argument(
        "--entity-name",
        action="append",
        default=[],
        metavar="NAME",
        help="a topic, broker id or user",
    )
    p.add_argument(
        "--entity-default", action="store_true", help="the cluster default (brokers: <default>)"
    )
    p.add_argument(
        "--all", action="store_true", help="with --describe: every config, not only dynamic ones"
    )
    p.add_argument("--user", action="append", default=[], metavar="NAME",
                   help="--entity-type users --entity-name NAME")  # fmt: skip
    p.add_argument(
        "--add-config",
        metavar="CONFIGS",
        help="'SCRAM-SHA-512=[iterations=8192,password=PW],SCRAM-SHA-256=[password=PW]'",
    )
    p.add_argument(
        "--delete-config", metavar="NAMES", help="mechanisms to delete: SCRAM-SHA-256,SCRAM-SHA-512"
    )


def run(args: argparse.Namespace) -> int:
    """Run a parsed `configs` command; return the exit status."""

    def action() -> int:
        if args.entity_type in ("topics", "brokers"):
            resolve_connection(args)
            return run_entity(args)
        users = check_args(args)
        if args.alter:
            upserts = parse_add_config(args.add_config or "")
            deletes = parse_delete_config(args.delete_config or "")
            both = sorted(m.mechanism_name for m in set(upserts) & set(deletes))
            if both:
                raise CliError(f"{', '.join(both)} is both added and deleted")
        resolve_connection(args)
        admin = _Admin(args)
        if args.describe:
            return _describe(admin, users)
        (user,) = users
        admin.alter(user, upserts, deletes)
        print(f"Completed updating config for user {user}.")
        return 0

    return run_reporting("configs", action)


# -- arguments (no I/O) ----------------------------------------------------------------------


def check_args(args: argparse.Namespace) -> list[str]:
    """The users the command is about ([] = every user, for --describe)."""
    if args.entity_type is None and not args.user:
        raise CliError("--entity-type users (or --user NAME) must be specified")
    users = list(dict.fromkeys(n.strip() for n in [*args.entity_name, *args.user]))
    if any(not u for u in users):
        raise CliError("--entity-name must not be empty")
    if args.describe:
        if args.add_config is not None or args.delete_config is not None:
            raise CliError("--add-config and --delete-config go with --alter")
        return users
    if len(users) != 1:
        raise CliError("--alter needs exactly one --entity-name (or --user)")
    if not args.add_config and not args.delete_config:
        raise CliError("--alter needs --add-config or --delete-config")
    return users


def _mechanism(key: str) -> ScramMechanism:
    mechanism = ScramMechanism.from_mechanism_name(key.strip())
    if mechanism != ScramMechanism.UNKNOWN:
        return mechanism
    if key.strip() in _QUOTA_KEYS:
        raise CliError(f"{key.strip()}: client quotas are not supported")
    raise CliError(
        f"{key.strip()!r} is not a user config; users take SCRAM-SHA-256 and SCRAM-SHA-512"
    )


def parse_add_config(text: str) -> dict[ScramMechanism, tuple[int, str]]:
    """'SCRAM-SHA-512=[iterations=8192,password=pw],...' -> mechanism -> (iterations,
    password). Messages never include the password."""
    out: dict[ScramMechanism, tuple[int, str]] = {}
    for entry in (e.strip() for e in _ENTRY_SPLIT.split(text) if e.strip()):
        key, sep, value = entry.partition("=")
        mechanism = _mechanism(key)
        name = mechanism.mechanism_name
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        if not sep or not value:
            raise CliError(f"--add-config {name}: expected {name}=[iterations=N,password=PW]")
        fields: dict[str, str] = {}
        for item in value.split(","):
            k, eq, v = item.partition("=")
            if not eq or k.strip() not in ("iterations", "password"):
                raise CliError(
                    f"--add-config {name}: takes iterations=N and password=PW, "
                    "comma-separated in square brackets"
                )
            fields[k.strip()] = v
        password = fields.get("password", "")
        if not password:
            raise CliError(f"--add-config {name}: a password is required")
        raw = fields.get("iterations", str(MIN_ITERATIONS)).strip()
        if not raw.isdigit():
            raise CliError(f"--add-config {name}: iterations must be a number, got {raw!r}")
        if mechanism in out:
            raise CliError(f"--add-config: {name} given twice")
        out[mechanism] = (int(raw), password)
    return out


def parse_delete_config(text: str) -> list[ScramMechanism]:
    out: list[ScramMechanism] = []
    for key in (k.strip() for k in text.split(",") if k.strip()):
        mechanism = _mechanism(key)
        if mechanism not in out:
            out.append(mechanism)
    return out


# -- talking to the brokers ------------------------------------------------------------------


class _Admin(AdminTool):
    """SCRAM credentials through the admin client."""

    def describe(self, users: list[str]) -> dict[str, list[tuple[ScramMechanism, int]]]:
        """user -> [(mechanism, iterations)]; a named user without credentials is left
        out, as Kafka's tool does."""
        from confluent_kafka import KafkaError

        # Asked first: librdkafka (2.16) aborts the process on the refusal's answer.
        require_cluster_describe(self.client, self.bootstrap, self.timeout_s, "describing users")
        call = self.client.describe_user_scram_credentials
        if not users:
            found = self._get(call(request_timeout=self.timeout_s))
            descriptions = list(found.values())
        else:
            futures = call(users, request_timeout=self.timeout_s)
            descriptions = []
            for user in users:
                fut = futures[user]
                try:
                    descriptions.append(self._get(fut))
                except CliError:
                    exc = fut.exception()
                    err = exc.args[0] if exc is not None and exc.args else None
                    if getattr(err, "code", lambda: None)() != KafkaError.RESOURCE_NOT_FOUND:
                        raise
        return {
            d.user: sorted(
                (ScramMechanism(int(i.mechanism.value)), i.iterations)
                for i in d.scram_credential_infos
            )
            for d in descriptions
        }

    def alter(
        self,
        user: str,
        upserts: dict[ScramMechanism, tuple[int, str]],
        deletes: list[ScramMechanism],
    ) -> None:
        from confluent_kafka.admin import (
            ScramCredentialInfo,
            UserScramCredentialDeletion,
            UserScramCredentialUpsertion,
        )
        from confluent_kafka.admin import ScramMechanism as RdMechanism

        changes: list[Any] = [
            UserScramCredentialUpsertion(
                user, ScramCredentialInfo(RdMechanism(int(m)), iterations), password.encode()
            )
            for m, (iterations, password) in upserts.items()
        ]
        changes += [UserScramCredentialDeletion(user, RdMechanism(int(m))) for m in deletes]
        futures = self.client.alter_user_scram_credentials(changes, request_timeout=self.timeout_s)
        for fut in futures.values():
            self._get(fut)


def _describe(admin: _Admin, users: list[str]) -> int:
    for user, infos in sorted(admin.describe(users).items()):
        if infos:
            text = ", ".join(f"{m.mechanism_name}=iterations={n}" for m, n in infos)
            print(f"SCRAM credential configs for user-principal '{user}' are {text}")
    return 0
