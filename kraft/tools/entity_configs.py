"""`kraft configs --entity-type topics|brokers`: kafka-configs.sh for topic and broker
configs, with its flags and output.

    kraft configs --bootstrap-server H:P --entity-type topics --entity-name t --describe [--all]
    kraft configs ... --entity-type topics --entity-name t --alter \\
        --add-config retention.ms=60000,cleanup.policy=[compact,delete] --delete-config segment.ms
    kraft configs ... --entity-type brokers --entity-name 1 --alter --add-config num.io.threads=9
    kraft configs ... --entity-type brokers --entity-default --describe

Output is ConfigCommand's: "Dynamic configs for topic t are:" (or "All configs ...",
"Default configs for brokers in the cluster are:"), then one line per config,
"  name=value sensitive=false synonyms={SOURCE:name=value, ...}", and "Completed updating
config for topic t." / "Completed updating default config for brokers in the cluster.".
As Kafka's tool, deleting a config that is not set is refused ("Invalid config(s): x").

Alterations go through confluent-kafka's `incremental_alter_configs`; descriptions
through kafka-python's `describe_configs`, which keeps every synonym (librdkafka keys
them by name, so a dynamic and a default value of one name collapse). The cluster
default (resource name "") is refused by both clients' checks, so it is sent as a plain
request over kafka-python's connection (`python_admin.send_any`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from common.topics import is_valid_name
from kraft.tools.client_common import AdminTool, CliError
from kraft.tools.python_admin import admin_client, send_any

# kafka-configs' rule: a comma outside square brackets separates entries.
_TOPIC, _BROKER = 2, 4
_DYNAMIC_SOURCE = {_TOPIC: "DYNAMIC_TOPIC_CONFIG", _BROKER: "DYNAMIC_BROKER_CONFIG"}
_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
}


@dataclass(frozen=True)
class Entry:
    name: str
    value: str | None
    sensitive: bool
    source: str
    synonyms: tuple[tuple[str, str, str | None], ...]  # (source, name, value)

    def line(self) -> str:
        syn = ", ".join(f"{s}:{n}={'null' if v is None else v}" for s, n, v in self.synonyms)
        value = "null" if self.value is None else self.value
        return f"  {self.name}={value} sensitive={str(self.sensitive).lower()} synonyms={{{syn}}}"


# -- arguments (no I/O) ------------------------------------------------------------------------


def split_entries(text: str) -> list[str]:
    """Split --add-config on commas outside square brackets."""
    out, depth, cur = [], 0, ""
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return [e.strip() for e in out if e.strip()]


def parse_add_config(text: str) -> dict[str, str]:
    """'k=v,k2=[a,b]' -> {k: v, k2: 'a,b'} (kafka-configs' syntax for list values)."""
    out: dict[str, str] = {}
    for entry in split_entries(text):
        key, sep, value = entry.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key:
            raise CliError(f"--add-config: expected key=value, got {entry!r}")
        if value.startswith("[") and value.endswith("]"):
            value = value[1:-1]
        out[key] = value
    return out


def entities(args: argparse.Namespace) -> list[str]:
    """The entity names the command is about ("" = the cluster default; [] = every one)."""
    names = [n.strip() for n in args.entity_name]
    if args.entity_default:
        if args.entity_type != "brokers":
            raise CliError("--entity-default applies to --entity-type brokers only here")
        names.append("")
    if args.entity_type == "topics":
        for n in names:
            if not is_valid_name(n):
                raise CliError(f"illegal topic name {n!r}")
    else:
        for n in names:
            if n and not n.isdigit():
                raise CliError(
                    f"The entity name for brokers must be a valid integer broker id, found: {n}"
                )
    if args.alter:
        if len(names) != 1:
            raise CliError("--alter needs exactly one --entity-name (or --entity-default)")
        if not args.add_config and not args.delete_config:
            raise CliError("--alter needs --add-config or --delete-config")
    elif args.add_config is not None or args.delete_config is not None:
        raise CliError("--add-config and --delete-config go with --alter")
    return names


# -- talking to the brokers --------------------------------------------------------------------


class _Configs(AdminTool):
    def __init__(self, args: argparse.Namespace) -> None:
        super().__init__(args)
        self.python = admin_client(args)

    def close(self) -> None:
        self.python.close()

    def names(self, rtype: int) -> list[str]:
        """Every topic, or every broker id then the default (as Kafka's tool lists)."""
        if rtype == _TOPIC:
            return sorted(self.python.list_topics())
        brokers = self.python.describe_cluster()["brokers"]
        return [str(b["broker_id"]) for b in sorted(brokers, key=lambda b: b["broker_id"])] + [""]

    def describe(self, rtype: int, name: str) -> list[Entry]:
        from kafka.admin import ConfigResource, ConfigResourceType
        from kafka.errors import for_code

        resource = ConfigResource(ConfigResourceType(rtype), name)
        request = self.python._describe_configs_request([resource], include_synonyms=True)
        node = int(name) if rtype == _BROKER and name else None  # a broker answers for itself
        (result,) = send_any(self.python, request, node).results
        if result.error_code:
            err = for_code(result.error_code)
            raise CliError(f"{err.__name__}: {result.error_message or err.description}")
        out = []
        for c in result.configs:
            synonyms = tuple(
                (_SOURCES.get(s.source, "UNKNOWN"), s.name, s.value) for s in c.synonyms
            )
            source = _SOURCES.get(c.config_source, "UNKNOWN")
            out.append(Entry(c.name, c.value, c.is_sensitive, source, synonyms))
        return sorted(out, key=lambda e: e.name)

    def alter(self, rtype: int, name: str, sets: dict[str, str], deletes: list[str]) -> None:
        ops = [(k, 0, v) for k, v in sets.items()] + [(k, 1, None) for k in deletes]
        if name:
            from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

            kinds = {0: AlterConfigOpType.SET, 1: AlterConfigOpType.DELETE}
            entries = [ConfigEntry(k, v, incremental_operation=kinds[op]) for k, op, v in ops]
            resource = ConfigResource(rtype, name, incremental_configs=entries)
            for fut in self.client.incremental_alter_configs([resource]).values():
                self._get(fut)
            return
        from kafka.admin import ConfigResource as PyResource
        from kafka.admin import ConfigResourceType
        from kafka.errors import for_code

        configs = {k: (op, v) for k, op, v in ops}
        resource = PyResource(ConfigResourceType(rtype), name, configs)
        request = self.python._alter_configs_request([resource], False, True)
        for r in send_any(self.python, request).responses:
            if r.error_code:
                err = for_code(r.error_code)
                raise CliError(f"{err.__name__}: {r.error_message or err.description}")


def run_entity(args: argparse.Namespace) -> int:
    """`kraft configs` for topics and brokers (after resolve_connection)."""
    rtype = _TOPIC if args.entity_type == "topics" else _BROKER
    names = entities(args)
    adds = parse_add_config(args.add_config or "") if args.alter else {}
    deletes = [k.strip() for k in (args.delete_config or "").split(",") if k.strip()]
    tool = _Configs(args)
    try:
        if args.alter:
            (name,) = names
            current = {e.name for e in tool.describe(rtype, name) if _dynamic(rtype, name, e)}
            missing = [k for k in deletes if k not in current]
            if missing:
                raise CliError(f"Invalid config(s): {','.join(missing)}")
            tool.alter(rtype, name, adds, deletes)
            kind = args.entity_type
            if name:
                print(f"Completed updating config for {kind[:-1]} {name}.")
            else:
                print(f"Completed updating default config for {kind} in the cluster.")
            return 0
        for name in names or tool.names(rtype):
            if not name:
                print(f"Default configs for {args.entity_type} in the cluster are:")
            else:
                which = "All" if args.all else "Dynamic"
                print(f"{which} configs for {args.entity_type[:-1]} {name} are:")
            for entry in tool.describe(rtype, name):
                if args.all or _dynamic(rtype, name, entry):
                    print(entry.line())
        return 0
    finally:
        tool.close()


def _dynamic(rtype: int, name: str, entry: Entry) -> bool:
    """Whether the entry is set on this very entity (what describe lists without --all)."""
    wanted = "DYNAMIC_DEFAULT_BROKER_CONFIG" if not name else _DYNAMIC_SOURCE[rtype]
    return entry.source == wanted
