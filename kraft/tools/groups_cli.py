"""`kraft groups list|describe|reset-offsets|delete`: kafka-consumer-groups.sh over the
Kafka protocol.

An ordinary Kafka client (confluent-kafka's AdminClient) that works against any broker
with the classic group protocol: ListGroups, DescribeGroups, OffsetFetch, OffsetCommit
(through AlterConsumerGroupOffsets), DeleteGroups, and ListOffsets for the log's start
and end. Columns and messages are those of Kafka's tool. Errors end in one line on
stderr and exit status 1, as in `kraft topics`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from typing import Any

from kraft.tools.client_common import (
    CliError,
    bootstrap_parser,
    client_conf,
    cluster_metadata,
    resolve_connection,
    run_reporting,
    timeout_parser,
    unreachable,
    wait_future,
    watched,
)

COMMANDS = ("groups",)
MISSING = "-"  # Kafka's tool prints this for a value it does not know
# confluent-kafka's ConsumerGroupState member names -> the state names Kafka prints.
KAFKA_STATES = {
    "UNKNOWN": "Unknown",
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
}
TP = tuple[str, int]


def add_parser(sub: Any) -> None:
    """Register `groups` and its subcommands on the `kraft` subparsers."""
    common = argparse.ArgumentParser(add_help=False, parents=[bootstrap_parser(), timeout_parser()])
    groups = sub.add_parser("groups", help="list, describe, reset or delete consumer groups")
    gsub = groups.add_subparsers(dest="groups_command", required=True)

    lst = gsub.add_parser("list", parents=[common], help="print group ids")
    lst.add_argument(
        "--state",
        nargs="*",
        metavar="STATE",
        help="add a STATE column; with states (e.g. Stable,Empty) list only groups in them",
    )

    desc = gsub.add_parser(
        "describe", parents=[common], help="offsets and lag (default), members or state"
    )
    desc.add_argument("--group", action="append", required=True, metavar="GROUP")
    view = desc.add_mutually_exclusive_group()
    view.add_argument("--members", action="store_true", help="one row per member")
    view.add_argument("--state", action="store_true", help="coordinator, strategy, state")

    reset = gsub.add_parser(
        "reset-offsets", parents=[common], help="set an inactive group's committed offsets"
    )
    reset.add_argument("--group", required=True)
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", action="append", metavar="TOPIC[:P,P...]")
    scope.add_argument(
        "--all-topics", action="store_true", help="every partition the group committed"
    )
    spec = reset.add_mutually_exclusive_group(required=True)
    spec.add_argument("--to-earliest", action="store_true")
    spec.add_argument("--to-latest", action="store_true")
    spec.add_argument("--to-offset", type=int, metavar="N")
    spec.add_argument("--shift-by", type=int, metavar="N", help="N may be negative")
    spec.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM|Z]",
        help="the first offset at or after this time (local time without a zone)",
    )
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the plan only (default)")
    mode.add_argument("--execute", action="store_true", help="commit the plan")

    delete = gsub.add_parser("delete", parents=[common], help="delete inactive groups")
    delete.add_argument("--group", action="append", required=True, metavar="GROUP")


def run(args: argparse.Namespace) -> int:
    """Run a parsed `groups` command; return the exit status."""

    def action() -> int:
        resolve_connection(args)
        admin = _Admin(args)
        if args.groups_command == "list":
            return _list(admin, args)
        if args.groups_command == "describe":
            return _describe(admin, args)
        if args.groups_command == "reset-offsets":
            return _reset(admin, args)
        return _delete(admin, args)

    return run_reporting(f"groups {args.groups_command}", action)


class _Admin:
    """An AdminClient and the deadline of every call made through it."""

    def __init__(self, args: argparse.Namespace) -> None:
        from confluent_kafka.admin import AdminClient

        self.bootstrap = args.bootstrap_server
        self.timeout_s = args.timeout_ms / 1000
        self.client = watched(AdminClient(client_conf(args)))

    def get(self, fut: Any) -> Any:
        """The future's result, or CliError (`cannot reach ...` when no broker answers)."""
        wait_future(fut, self.bootstrap, self.timeout_s)
        return fut.result()

    def describe(self, group_ids: list[str]) -> dict[str, Any]:
        """group id -> ConsumerGroupDescription, None for a group that does not exist."""
        from confluent_kafka import KafkaError

        futures = self.client.describe_consumer_groups(group_ids, request_timeout=self.timeout_s)
        out: dict[str, Any] = {}
        for gid in group_ids:
            try:
                d = self.get(futures[gid])
            except CliError:
                # Kafka 4's coordinator answers GROUP_ID_NOT_FOUND; older ones say Dead.
                if _code(futures[gid].exception()) != KafkaError.GROUP_ID_NOT_FOUND:
                    raise
                d = None
            out[gid] = None if d is None or _state(d) == "Dead" else d
        return out

    def committed(self, group_id: str) -> dict[TP, int]:
        from confluent_kafka import ConsumerGroupTopicPartitions

        req = [ConsumerGroupTopicPartitions(group_id)]  # librdkafka takes one group per call
        fut = self.client.list_consumer_group_offsets(req, request_timeout=self.timeout_s)
        res = self.get(fut[group_id])
        return {
            (tp.topic, tp.partition): tp.offset
            for tp in res.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        }

    def offsets(self, tps: set[TP], spec: Any) -> dict[TP, int | None]:
        """ListOffsets: tp -> offset; None where it failed or no offset matches (-1)."""
        from confluent_kafka import TopicPartition

        if not tps:
            return {}
        futures = self.client.list_offsets(
            {TopicPartition(t, p): spec for t, p in tps}, request_timeout=self.timeout_s
        )
        out: dict[TP, int | None] = {}
        for tp, fut in futures.items():
            try:
                offset = fut.result(timeout=self.timeout_s + 5).offset
            except Exception:  # noqa: BLE001 - the partition's offset is shown as unknown
                offset = -1
            out[(tp.topic, tp.partition)] = offset if offset >= 0 else None
        return out


def _code(exc: Any) -> int | None:
    """The error code of a confluent-kafka KafkaException or KafkaError, else None."""
    err = exc.args[0] if isinstance(exc, Exception) and exc.args else exc
    return err.code() if hasattr(err, "code") else None


def _state(d: Any) -> str:
    name = getattr(d.state, "name", str(d.state))
    return KAFKA_STATES.get(name, name)


def _table(header: list[str], rows: list[list[Any]]) -> None:
    cells = [header, *[[str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    for row in cells:
        print(" ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def _note(text: str) -> None:
    """A remark that is not an error (Kafka's tool prints these on stderr too)."""
    print(text, file=sys.stderr)


# -- list --------------------------------------------------------------------------------


def _parse_states(values: list[str]) -> set[str]:
    by_lower = {s.lower(): s for s in KAFKA_STATES.values() if s != "Unknown"}
    out: set[str] = set()
    for v in (s.strip() for value in values for s in value.split(",")):
        if v.lower() not in by_lower:
            raise CliError(f"--state {v!r}: one of {', '.join(sorted(by_lower.values()))}")
        out.add(by_lower[v.lower()])
    return out


def _list(admin: _Admin, args: argparse.Namespace) -> int:
    from confluent_kafka import ConsumerGroupState, KafkaError

    wanted = _parse_states(args.state or [])
    enum_by_kafka = {v: k for k, v in KAFKA_STATES.items()}
    kwargs: dict[str, Any] = {"request_timeout": admin.timeout_s}
    if wanted:  # the filter travels in ListGroups (v4+), as with Kafka's tool
        kwargs["states"] = {ConsumerGroupState[enum_by_kafka[s]] for s in wanted}
    deadline = time.monotonic() + admin.timeout_s
    while True:
        res = admin.get(admin.client.list_consumer_groups(**kwargs))
        errors = [e.args[0] if isinstance(e, Exception) and e.args else e for e in res.errors]
        codes = [_code(e) for e in errors]
        # A coordinator still loading its __consumer_offsets partitions answers
        # COORDINATOR_LOAD_IN_PROGRESS: its groups would be missing, so ask again.
        loading = all(c == KafkaError.COORDINATOR_LOAD_IN_PROGRESS for c in codes)
        if not errors or not loading or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if errors:
        e = errors[0]
        text = f"{e.str()} ({e.name()})" if hasattr(e, "str") else str(e)
        transport = (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN)
        if codes[0] in transport:
            raise unreachable(admin.bootstrap, text)
        raise CliError(f"listing groups failed: {text}")
    listed = sorted(res.valid, key=lambda g: g.group_id)
    if args.state is not None:
        _table(["GROUP", "STATE"], [[g.group_id, _state(g)] for g in listed])
    else:
        for g in listed:
            print(g.group_id)
    return 0


# -- describe ----------------------------------------------------------------------------


def _describe(admin: _Admin, args: argparse.Namespace) -> int:
    found = admin.describe(list(dict.fromkeys(args.group)))
    first = True
    for gid, d in found.items():
        if d is None:
            continue
        if args.state:
            header, rows = _state_rows(d)
        elif args.members:
            header, rows = _member_rows(d)
        else:
            header, rows = _offset_rows(admin, d)
        state = _state(d)
        # Kafka's tool says so on stderr for a group that is not Stable.
        if state == "Empty" and not args.state:
            _note(f"Consumer group '{gid}' has no active members.")
        elif state in ("PreparingRebalance", "CompletingRebalance"):
            _note(f"Warning: Consumer group '{gid}' is rebalancing.")
        if rows:
            if not first:
                print()
            first = False
            _table(header, rows)
    missing = [f"Consumer group '{gid}' does not exist." for gid, d in found.items() if not d]
    if missing:
        raise CliError(" ".join(missing))
    return 0


def _state_rows(d: Any) -> tuple[list[str], list[list[Any]]]:
    c = d.coordinator
    coordinator = f"{c.host}:{c.port} ({c.id})" if c is not None else MISSING
    row = [d.group_id, coordinator, d.partition_assignor or MISSING, _state(d), len(d.members)]
    return ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"], [row]


def _assigned(member: Any) -> list[TP]:
    assignment = member.assignment.topic_partitions if member.assignment else None
    return sorted((tp.topic, tp.partition) for tp in assignment or [])


def _member_rows(d: Any) -> tuple[list[str], list[list[Any]]]:
    rows = [
        [d.group_id, m.member_id, m.host, m.client_id, len(_assigned(m))]
        for m in sorted(d.members, key=lambda m: m.member_id)
    ]
    return ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"], rows


def _offset_rows(admin: _Admin, d: Any) -> tuple[list[str], list[list[Any]]]:
    """Kafka's offsets view: every partition assigned to a member or with a committed
    offset; the log end offset is the high watermark (what a consumer can read)."""
    from confluent_kafka.admin import OffsetSpec

    committed = admin.committed(d.group_id)
    owner: dict[TP, Any] = {tp: m for m in d.members for tp in _assigned(m)}
    tps = set(committed) | set(owner)
    ends = admin.offsets(tps, OffsetSpec.latest())
    rows = []
    for tp in sorted(tps):
        current, end = committed.get(tp), ends.get(tp)
        lag = end - current if current is not None and end is not None else None
        m = owner.get(tp)
        who = [m.member_id, m.host, m.client_id] if m is not None else [MISSING] * 3
        row = [d.group_id, *tp, current, end, lag, *who]
        rows.append([MISSING if v is None else v for v in row])
    header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    return [*header, "CONSUMER-ID", "HOST", "CLIENT-ID"], rows


# -- reset-offsets -----------------------------------------------------------------------


def _parse_topic(spec: str) -> tuple[str, list[int] | None]:
    topic, sep, parts = spec.partition(":")
    if not topic:
        raise CliError(f"--topic {spec!r}: TOPIC or TOPIC:PARTITION,PARTITION,...")
    if not sep:
        return topic, None
    try:
        ids = [int(p) for p in parts.split(",")]
    except ValueError:
        raise CliError(f"--topic {spec!r}: partitions are numbers, e.g. {topic}:0,1") from None
    return topic, ids


def _parse_datetime(text: str) -> int:
    """Milliseconds since the epoch; a time without a zone is local time, as in Kafka."""
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise CliError(
            f"--to-datetime {text!r}: expected YYYY-MM-DDTHH:mm:SS[.sss][+HH:MM|Z]"
        ) from None
    if when.tzinfo is None:
        when = when.astimezone()
    return int(when.timestamp() * 1000)


def _partitions_to_reset(
    admin: _Admin, args: argparse.Namespace, committed: dict[TP, int]
) -> set[TP]:
    if args.all_topics:
        return set(committed)
    # Metadata for every topic: a request naming one could auto-create it.
    md = cluster_metadata(admin.client, admin.bootstrap, admin.timeout_s)
    tps: set[TP] = set()
    for spec in args.topic:
        topic, ids = _parse_topic(spec)
        t = md.topics.get(topic)
        if t is None:
            raise CliError(f"topic '{topic}' does not exist")
        for p in ids if ids is not None else t.partitions:
            if p not in t.partitions:
                raise CliError(f"topic '{topic}' has no partition {p}")
            tps.add((topic, p))
    return tps


def _reset(admin: _Admin, args: argparse.Namespace) -> int:
    from confluent_kafka.admin import OffsetSpec

    gid = args.group
    if args.to_datetime is not None:
        at_ms = _parse_datetime(args.to_datetime)  # a bad value fails before any request
    d = admin.describe([gid])[gid]
    state = "Dead" if d is None else _state(d)
    # Offsets committed under a live generation would be overwritten by its members.
    if state not in ("Empty", "Dead"):
        raise CliError(
            f"Assignments can only be reset if the group '{gid}' is inactive, "
            f"but the current state is {state}."
        )
    committed = admin.committed(gid)
    tps = _partitions_to_reset(admin, args, committed)
    earliest = admin.offsets(tps, OffsetSpec.earliest())
    latest = admin.offsets(tps, OffsetSpec.latest())
    unknown = sorted(tp for tp in tps if earliest[tp] is None or latest[tp] is None)
    if unknown:
        raise CliError(f"no offsets for {', '.join(f'{t}-{p}' for t, p in unknown)}")
    if args.to_datetime is not None:
        at = admin.offsets(tps, OffsetSpec.for_timestamp(at_ms))
    plan: dict[TP, int] = {}
    for tp in sorted(tps):
        lo, hi = earliest[tp], latest[tp]
        assert lo is not None and hi is not None
        if args.to_earliest:
            want = lo
        elif args.to_latest:
            want = hi
        elif args.to_offset is not None:
            want = args.to_offset
        elif args.shift_by is not None:
            if tp not in committed:
                raise CliError(
                    f"Cannot shift offset for partition {tp[0]}-{tp[1]} "
                    "since there is no current committed offset"
                )
            want = committed[tp] + args.shift_by
        else:
            found = at[tp]  # no record at or after that time: the end of the log, as Kafka
            want = found if found is not None else hi
        # Kafka's tool clamps to the log's range rather than failing.
        if want > hi:
            _note(f"New offset ({want}) is higher than latest offset for {tp[0]}-{tp[1]}. "
                  f"Value will be set to {hi}")  # fmt: skip
        elif want < lo:
            _note(f"New offset ({want}) is lower than earliest offset for {tp[0]}-{tp[1]}. "
                  f"Value will be set to {lo}")  # fmt: skip
        plan[tp] = min(max(want, lo), hi)
    if args.execute and plan:
        _commit(admin, gid, plan)
    elif not args.dry_run and not args.execute:
        _note("WARN: No action will be performed as the --execute option is missing. "
              "Add --dry-run to say so, or --execute to reset the offsets.")  # fmt: skip
    _table(
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        [[gid, t, p, off] for (t, p), off in sorted(plan.items())],
    )
    return 0


def _commit(admin: _Admin, gid: str, plan: dict[TP, int]) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    req = ConsumerGroupTopicPartitions(gid, [TopicPartition(t, p, o) for (t, p), o in plan.items()])
    fut = admin.client.alter_consumer_group_offsets([req], request_timeout=admin.timeout_s)
    res = admin.get(fut[gid])
    for tp in res.topic_partitions or []:
        if tp.error is not None:
            e = tp.error
            raise CliError(f"committing {tp.topic}-{tp.partition}: {e.str()} ({e.name()})")


# -- delete ------------------------------------------------------------------------------


def _delete(admin: _Admin, args: argparse.Namespace) -> int:
    group_ids = list(dict.fromkeys(args.group))
    futures = admin.client.delete_consumer_groups(group_ids, request_timeout=admin.timeout_s)
    deleted, failed = [], []
    for gid in group_ids:
        try:
            admin.get(futures[gid])
            deleted.append(gid)
        except CliError as exc:
            if str(exc).startswith("cannot reach"):
                raise
            failed.append(f"Group '{gid}' could not be deleted due to: {exc}")
    if deleted:
        names = ", ".join(f"'{g}'" for g in deleted)
        print(f"Deletion of requested consumer groups ({names}) was successful.")
    if failed:
        raise CliError("; ".join(failed))
    return 0
