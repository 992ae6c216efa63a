"""`kraft reassign`: kafka-reassign-partitions.sh over the Kafka protocol
(AlterPartitionReassignments and ListPartitionReassignments through kafka-python's admin
client: confluent-kafka has neither call).

    kraft reassign --bootstrap-server HOST:PORT --generate \\
        --topics-to-move-json-file topics.json --broker-list 4,5,6
    kraft reassign --bootstrap-server HOST:PORT --execute --reassignment-json-file plan.json \\
        [--additional] [--wait]
    kraft reassign --bootstrap-server HOST:PORT --verify --reassignment-json-file plan.json \\
        [--wait]
    kraft reassign --bootstrap-server HOST:PORT --cancel --reassignment-json-file plan.json
    kraft reassign --bootstrap-server HOST:PORT --list

The files and the output are Kafka's: topics.json is {"version": 1, "topics": [{"topic":
"t"}]}; a plan is {"version": 1, "partitions": [{"topic": "t", "partition": 0,
"replicas": [4, 5, 6]}]} ("log_dirs", if given, must be "any": moving replicas between a
broker's log directories is not supported). `--wait` (ours) keeps `--execute` or
`--verify` running until every partition of the plan is reassigned, drawing on stderr
how many of the replicas being added are in sync.

`--throttle N` (with `--execute`) sets the follower side of Kafka's replication throttle
on the brokers receiving new replicas (kraft/tools/reassign_throttle.py); `--verify`
clears it when the plan is done. Not supported: `--replica-alter-log-dirs-throttle`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from common.errors import error_name
from kraft.placement import PlacementError, assign_replicas
from kraft.tools.client_common import (
    CliError,
    bootstrap_parser,
    resolve_connection,
    run_reporting,
    timeout_parser,
)
from kraft.tools.python_admin import admin_client
from kraft.tools.reassign_throttle import clear_throttle, set_throttle

COMMANDS = ("reassign",)
WAIT_POLL_S = 0.5
STALE_AFTER_S = 10.0  # how long a broker's metadata may lag the controller's answer

Plan = dict[tuple[str, int], list[int]]  # (topic, partition) -> target replicas


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "reassign",
        parents=[bootstrap_parser(), timeout_parser()],
        help="move partition replicas between brokers (kafka-reassign-partitions)",
        description="Generate, execute, verify, cancel and list partition reassignments, "
        "as kafka-reassign-partitions.sh.",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--generate", action="store_true", help="propose a reassignment")
    action.add_argument("--execute", action="store_true", help="start the reassignment")
    action.add_argument("--verify", action="store_true", help="show the reassignment's status")
    action.add_argument("--cancel", action="store_true", help="cancel the reassignment")
    action.add_argument("--list", action="store_true", help="list ongoing reassignments")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help="for --generate")
    p.add_argument("--broker-list", metavar="IDS", help="for --generate: brokers, e.g. 4,5,6")
    p.add_argument("--disable-rack-aware", action="store_true", help="for --generate: ignore racks")
    p.add_argument("--reassignment-json-file", metavar="FILE", help="the reassignment plan")
    p.add_argument(
        "--additional",
        action="store_true",
        help="with --execute: start even though other reassignments are in progress",
    )
    p.add_argument(
        "--throttle",
        type=int,
        default=-1,
        metavar="BYTES/S",
        help="with --execute: the brokers receiving new replicas fetch them at most this "
        "fast (follower.replication.throttled.rate); --verify clears it when done",
    )
    p.add_argument(
        "--preserve-throttles",
        action="store_true",
        help="with --verify: leave the throttle in place when the reassignment is done",
    )
    p.add_argument(
        "--wait",
        action="store_true",
        help="with --execute or --verify: wait until the reassignment completes, "
        "showing its progress",
    )


# -- the JSON files ------------------------------------------------------------------------------


def _read(path: str) -> Any:
    try:
        return json.loads(Path(path).read_text())
    except OSError as exc:
        raise CliError(f"cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise CliError(f"{path}: not JSON ({exc})") from None


def parse_plan(data: Any, source: str = "the reassignment file") -> Plan:
    """Kafka's parsePartitionReassignmentData, with its checks."""
    try:
        entries = data["partitions"]
        plan: Plan = {}
        for e in entries:
            key = (str(e["topic"]), int(e["partition"]))
            replicas = [int(r) for r in e["replicas"]]
            dirs = e.get("log_dirs")
            if dirs is not None and any(d != "any" for d in dirs):
                raise CliError(
                    f'{source}: log_dirs other than "any" (moving replicas between log '
                    "directories) are not supported"
                )
            if key in plan:
                raise CliError(f"Duplicate reassignment partitions: {key[0]}-{key[1]}")
            plan[key] = replicas
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(
            f'{source}: expected {{"version": 1, "partitions": [{{"topic": ..., '
            f'"partition": ..., "replicas": [...]}}]}} ({exc!r})'
        ) from None
    if not plan:
        raise CliError("Partition reassignment list cannot be empty")
    for (t, p), replicas in plan.items():
        if not replicas:
            raise CliError(f"Partition replica list cannot be empty: {t}-{p}")
        if len(set(replicas)) != len(replicas):
            raise CliError(
                f"Duplicate replica assignment found: {t}-{p}: {','.join(map(str, replicas))}"
            )
    return plan


def parse_topics(data: Any, source: str) -> list[str]:
    try:
        topics = [str(t["topic"]) for t in data["topics"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise CliError(
            f'{source}: expected {{"version": 1, "topics": [{{"topic": ...}}]}} ({exc!r})'
        ) from None
    if not topics:
        raise CliError(f"{source}: no topics")
    return list(dict.fromkeys(topics))


def plan_json(plan: Plan) -> str:
    """Kafka's formatAsReassignmentJson (compact, partitions sorted)."""
    partitions = [
        {"topic": t, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for (t, p), r in sorted(plan.items())
    ]
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


def _ids(text: str) -> list[int]:
    try:
        ids = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"--broker-list: expected broker ids like 4,5,6, got {text!r}") from None
    if not ids or len(set(ids)) != len(ids):
        raise CliError(f"--broker-list: expected distinct broker ids, got {text!r}")
    return ids


def _name(key: tuple[str, int]) -> str:
    return f"{key[0]}-{key[1]}"


def _error_text(err: Any) -> str:
    """Kafka's name for a kafka-python error class (whose own names differ at times)."""
    code = getattr(err, "errno", None)
    name = error_name(code) if isinstance(code, int) else str(err)
    description = getattr(err, "description", "")
    return f"{name}: {description}" if description else name


# -- the cluster ---------------------------------------------------------------------------------


def current_assignment(admin: Any, topics: list[str]) -> tuple[Plan, dict[tuple[str, int], set]]:
    """Replicas and ISR of every partition of `topics`; an unknown topic is an error."""
    replicas: Plan = {}
    isrs: dict[tuple[str, int], set] = {}
    for t in admin.describe_topics(topics):
        if t["error_code"] != 0:
            raise CliError(f"Topic {t['name']} does not exist (error code {t['error_code']})")
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            replicas[key] = list(p["replica_nodes"])
            isrs[key] = set(p["isr_nodes"])
    return replicas, isrs


def _plan_state(admin: Any, plan: Plan) -> tuple[Plan, dict, dict]:
    """(current replicas, ISRs, ongoing reassignments) of the plan's partitions."""
    from kafka import TopicPartition

    current, isrs = current_assignment(admin, sorted({t for t, _ in plan}))
    missing = sorted(k for k in plan if k not in current)
    if missing:
        raise CliError("Unable to find partition(s): " + ", ".join(_name(k) for k in missing))
    ongoing = admin.list_partition_reassignments([TopicPartition(t, p) for t, p in plan])
    return current, isrs, {(tp.topic, tp.partition): v for tp, v in ongoing.items()}


# -- the actions ---------------------------------------------------------------------------------


def generate(admin: Any, args: argparse.Namespace) -> int:
    topics, brokers = args.topics, args.brokers
    cluster = {b["broker_id"]: b.get("rack") for b in admin.describe_cluster()["brokers"]}
    missing = [b for b in brokers if b not in cluster]
    if missing:
        raise CliError(
            "The following brokers are not in the cluster: " + ",".join(map(str, missing))
        )
    current, _ = current_assignment(admin, topics)
    placement = [(b, None if args.disable_rack_aware else cluster[b]) for b in brokers]
    proposed: Plan = {}
    for topic in topics:
        parts = sorted(p for t, p in current if t == topic)
        rf = len(current[(topic, parts[0])])
        try:
            assigned = assign_replicas(placement, len(parts), rf)
        except PlacementError as exc:
            raise CliError(f"{topic}: {exc}") from None
        for i, p in enumerate(parts):
            proposed[(topic, p)] = assigned[i]
    print("Current partition replica assignment")
    print(plan_json(current))
    print()
    print("Proposed partition reassignment configuration")
    print(plan_json(proposed))
    return 0


def _plan_from(args: argparse.Namespace) -> Plan:
    if not args.reassignment_json_file:
        raise CliError("this action needs --reassignment-json-file")
    return parse_plan(_read(args.reassignment_json_file), args.reassignment_json_file)


def execute(admin: Any, args: argparse.Namespace) -> int:
    from kafka import TopicPartition

    plan: Plan = args.plan
    current, _, _ = _plan_state(admin, plan)
    if not args.additional and admin.list_partition_reassignments():
        raise CliError(
            "Cannot execute because there is an existing partition assignment. Use "
            "--additional to override this and create a new partition assignment in "
            "addition to the existing one."
        )
    print("Current partition replica assignment")
    print()
    print(plan_json({k: current[k] for k in plan}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")
    if args.throttle >= 0:
        set_throttle(args, plan, current)
    results = admin.alter_partition_reassignments(
        {TopicPartition(t, p): r for (t, p), r in plan.items()}
    )
    failed = {(tp.topic, tp.partition): err for tp, err in results.items() if err is not None}
    if failed:
        lines = [f"{_name(k)}: {_error_text(e)}" for k, e in sorted(failed.items())]
        raise CliError("Error reassigning partition(s):\n" + "\n".join(lines))
    print("Successfully started partition reassignments for " + ",".join(map(_name, sorted(plan))))
    return wait_for(admin, plan) if args.wait else 0


def verify(admin: Any, args: argparse.Namespace) -> int:
    plan: Plan = args.plan
    current, isrs, ongoing = _plan_state(admin, plan)
    print("Status of partition reassignment:")
    for key in sorted(plan):
        if key in ongoing:
            print(f"Reassignment of partition {_name(key)} is still in progress.")
        elif current[key] == plan[key]:
            print(f"Reassignment of partition {_name(key)} is completed.")
        else:
            print(
                f"There is no active reassignment of partition {_name(key)}, but replica set "
                f"is {current[key]} rather than {plan[key]}."
            )
    if args.wait:
        wait_for(admin, plan)
    elif ongoing:
        draw_progress(progress(plan, current, isrs, ongoing), final=True)
        return 0
    elif any(current[k] != plan[k] for k in plan):
        return 0
    if not args.preserve_throttles:
        clear_throttle(args, admin)
    return 0


def cancel(admin: Any, args: argparse.Namespace) -> int:
    from kafka import TopicPartition
    from kafka.errors import NoReassignmentInProgressError

    plan: Plan = args.plan
    results = admin.alter_partition_reassignments({TopicPartition(t, p): None for t, p in plan})
    cancelled, inactive, failed = [], [], []
    for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        key = (tp.topic, tp.partition)
        if err is None:
            cancelled.append(key)
        elif err is NoReassignmentInProgressError:
            inactive.append(key)
        else:
            failed.append((key, err))
    if cancelled:
        print(
            "Successfully cancelled partition reassignments for: " + ",".join(map(_name, cancelled))
        )
    else:
        print("None of the specified partition reassignments are active.")
    if failed:
        lines = [f"{_name(k)}: {_error_text(e)}" for k, e in failed]
        raise CliError("Error cancelling partition reassignment(s):\n" + "\n".join(lines))
    return 0


def list_ongoing(admin: Any) -> int:
    ongoing = admin.list_partition_reassignments()
    if not ongoing:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for tp, r in sorted(ongoing.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        print(
            f"{tp.topic}-{tp.partition}: replicas: {','.join(map(str, r['replicas']))}. "
            f"adding: {','.join(map(str, r['adding_replicas']))}. "
            f"removing: {','.join(map(str, r['removing_replicas']))}."
        )
    return 0


# -- progress ------------------------------------------------------------------------------------


def progress(
    plan: Plan, current: Plan, isrs: dict[tuple[str, int], set], ongoing: dict
) -> tuple[int, int, int, int]:
    """(partitions done, partitions, adding replicas in sync, adding replicas): a
    partition is done when no reassignment is ongoing and its replicas are the plan's;
    the replicas counted are those its ongoing reassignment is adding."""
    done = in_sync = adding_total = 0
    for key, target in plan.items():
        if key not in ongoing and current.get(key) == target:
            done += 1
            continue
        adding = ongoing[key]["adding_replicas"] if key in ongoing else []
        adding_total += len(adding)
        in_sync += sum(1 for r in adding if r in isrs.get(key, set()))
    return done, len(plan), in_sync, adding_total


def draw_progress(state: tuple[int, int, int, int], final: bool = False) -> None:
    done, total, in_sync, added = state
    width = 30
    filled = width * done // total if total else width
    bar = "#" * filled + "." * (width - filled)
    line = f"[{bar}] {done}/{total} partitions reassigned" + (
        f", {in_sync}/{added} new replicas in sync" if added else ""
    )
    if sys.stderr.isatty():
        print("\r" + line, end="\n" if final else "", file=sys.stderr, flush=True)
    else:
        print(line, file=sys.stderr, flush=True)


def wait_for(admin: Any, plan: Plan) -> int:
    """Poll until every partition of the plan is reassigned; progress on stderr.

    The ongoing reassignments come from the active controller and the replica sets
    from a broker's metadata, which follows it by a moment: a partition no longer
    reassigning whose replicas still differ from the plan is given STALE_AFTER_S to
    catch up before the reassignment is reported as cancelled or replaced."""
    last = None
    differing_since: float | None = None
    while True:
        current, isrs, ongoing = _plan_state(admin, plan)
        state = progress(plan, current, isrs, ongoing)
        if state != last:
            draw_progress(state, final=state[0] == state[1])
            last = state
        if state[0] == state[1]:
            print("Reassignment of all partitions is completed.")
            return 0
        stuck = sorted(k for k in plan if k not in ongoing and current.get(k) != plan[k])
        if not stuck:
            differing_since = None
        elif differing_since is None:
            differing_since = time.monotonic()
        elif time.monotonic() - differing_since > STALE_AFTER_S:
            raise CliError(
                "no reassignment in progress, but the replica sets of "
                + ", ".join(map(_name, stuck))
                + " differ from the plan (was it cancelled or replaced?)"
            )
        time.sleep(WAIT_POLL_S)


def run(args: argparse.Namespace) -> int:
    def action() -> int:
        if args.wait and not (args.execute or args.verify):
            raise CliError("--wait goes with --execute or --verify")
        if args.additional and not args.execute:
            raise CliError("--additional goes with --execute")
        if args.throttle >= 0 and not args.execute:
            raise CliError("--throttle goes with --execute")
        if args.preserve_throttles and not args.verify:
            raise CliError("--preserve-throttles goes with --verify")
        # The files and flags are checked before any connection is made.
        if args.generate:
            if not args.topics_to_move_json_file or not args.broker_list:
                raise CliError("--generate needs --topics-to-move-json-file and --broker-list")
            source = args.topics_to_move_json_file
            args.topics = parse_topics(_read(source), source)
            args.brokers = _ids(args.broker_list)
        elif not args.list:
            args.plan = _plan_from(args)
        resolve_connection(args)
        admin = admin_client(args)
        try:
            if args.generate:
                return generate(admin, args)
            if args.execute:
                return execute(admin, args)
            if args.verify:
                return verify(admin, args)
            if args.cancel:
                return cancel(admin, args)
            return list_ongoing(admin)
        finally:
            admin.close()

    return run_reporting("reassign", action)
