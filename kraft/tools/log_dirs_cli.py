"""`kraft log-dirs`: kafka-log-dirs.sh over the Kafka protocol (DescribeLogDirs through
kafka-python's admin client: confluent-kafka has no such call).

    kraft log-dirs --describe --bootstrap-server HOST:PORT [--broker-list 1,2] [--topic-list t,u]

Output is Kafka's LogDirsCommand:

    Querying brokers for log directories information
    Received log directory information from brokers 1,2,3
    {"brokers":[{"broker":1,"logDirs":[{"partitions":[{"partition":"t-0","size":70,
    "offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data/1"}]}],"version":1}
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from kraft.tools.client_common import (
    CliError,
    bootstrap_parser,
    resolve_connection,
    run_reporting,
    timeout_parser,
)
from kraft.tools.python_admin import admin_client

COMMANDS = ("log-dirs",)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "log-dirs",
        parents=[bootstrap_parser(), timeout_parser()],
        help="describe the brokers' log directories (kafka-log-dirs)",
        description="Describe log directories and partition sizes, as kafka-log-dirs.sh.",
    )
    p.add_argument("--describe", action="store_true", required=True, help="describe")
    p.add_argument("--broker-list", metavar="IDS", help="brokers to ask, e.g. 1,2 (default all)")
    p.add_argument("--topic-list", metavar="TOPICS", help="topics, e.g. t,u (default all)")


def _ids(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise CliError(f"--broker-list: expected broker ids like 1,2,3, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    def action() -> int:
        resolve_connection(args)
        admin = admin_client(args)
        try:
            existing = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
            brokers = _ids(args.broker_list) if args.broker_list else existing
            missing = sorted(set(brokers) - set(existing))
            if missing:
                raise CliError(
                    "The given brokers do not exist from --broker-list: "
                    f"{','.join(map(str, missing))}. Current existent brokers: "
                    f"{','.join(map(str, existing))}"
                )
            topics = [t for t in (args.topic_list or "").split(",") if t.strip()] or None
            print("Querying brokers for log directories information")
            answers = describe_log_dirs(admin, topics, brokers)
        finally:
            admin.close()
        print(
            "Received log directory information from brokers "
            + ",".join(str(a["broker"]) for a in answers)
        )
        print(json.dumps(as_kafka_json(answers), separators=(",", ":")))
        return 0

    return run_reporting("log-dirs", action)


def describe_log_dirs(admin: Any, topics: list[str] | None, brokers: list[int]) -> list[Any]:
    """kafka-python's describe_log_dirs, but a refusal raises: its own drops the response's
    top-level error (v3+), so a principal without DESCRIBE on the cluster would see empty
    log dirs where Kafka's tool fails with ClusterAuthorizationException."""
    from kafka.errors import for_code
    from kafka.protocol.admin import DescribeLogDirsRequest

    request = DescribeLogDirsRequest(topics=admin._get_topic_partitions(topics))

    async def ask() -> list[dict[str, Any]]:
        out = []
        for node_id in brokers:
            response = await admin._manager.send(request, node_id=node_id)
            code = getattr(response, "error_code", 0)
            if code:
                raise for_code(code)()
            out.append({"broker": node_id,
                        "log_dirs": [r.to_dict() for r in response.results]})  # fmt: skip
        return out

    return admin._manager.run(ask)


def as_kafka_json(answers: list[dict[str, Any]]) -> dict[str, Any]:
    """kafka-python's per-broker answers in LogDirsCommand's JSON shape."""
    from kafka.errors import for_code

    brokers = []
    for a in answers:
        dirs = []
        for d in a["log_dirs"]:
            error = None if d["error_code"] == 0 else for_code(d["error_code"]).__name__
            partitions = [
                {
                    "partition": f"{t['name']}-{p['partition_index']}",
                    "size": p["partition_size"],
                    "offsetLag": p["offset_lag"],
                    "isFuture": p["is_future_key"],
                }
                for t in d["topics"]
                for p in t["partitions"]
            ]
            dirs.append({"partitions": partitions, "error": error, "logDir": d["log_dir"]})
        brokers.append({"broker": a["broker"], "logDirs": dirs})
    return {"brokers": brokers, "version": 1}
