"""`kraft reassign --throttle`: the replication throttle of a reassignment, as
kafka-reassign-partitions.sh sets and clears it, through confluent-kafka's
`incremental_alter_configs` on BROKER resources.

`--execute --throttle N` sets `follower.replication.throttled.rate=N` (bytes/s) on the
brokers the plan adds replicas to; the brokers throttle only the replicas being added
(broker/replication_quota.py; the leader side, `leader.replication.throttled.rate`, is not
built). `--verify`, once every partition of the plan is reassigned, clears it from every
broker ("Clearing broker-level throttles on brokers ..."), unless
`--preserve-throttles`.
"""

from __future__ import annotations

import argparse
from typing import Any

from kraft.tools.client_common import AdminTool

RATE = "follower.replication.throttled.rate"
_BROKER = 4  # ConfigResource type


def _alter(args: argparse.Namespace, brokers: list[int], value: str | None) -> None:
    """Set (or with None delete) the rate on each broker: one call per broker, as
    librdkafka sends a BROKER resource to that broker only."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    tool = AdminTool(args)
    op = AlterConfigOpType.SET if value is not None else AlterConfigOpType.DELETE
    for b in brokers:
        entry = ConfigEntry(RATE, value or "", incremental_operation=op)
        resource = ConfigResource(_BROKER, str(b), incremental_configs=[entry])
        for fut in tool.client.incremental_alter_configs([resource]).values():
            tool._get(fut)


def set_throttle(args: argparse.Namespace, plan: dict[Any, list[int]], current: dict) -> None:
    """Before the reassignment starts: the rate on the brokers receiving new replicas."""
    adding = sorted(
        {r for key, target in plan.items() for r in target}
        - {r for key in plan for r in current.get(key, [])}
    )
    if not adding:
        return
    print(
        "Warning: You must run --verify periodically, until the reassignment completes, "
        "to ensure the throttle is removed."
    )
    _alter(args, adding, str(args.throttle))
    print(f"The inter-broker throttle limit was set to {args.throttle} B/s")


def clear_throttle(args: argparse.Namespace, admin: Any) -> None:
    """After the reassignment: the rate removed from every broker."""
    brokers = sorted(b["broker_id"] for b in admin.describe_cluster()["brokers"])
    _alter(args, brokers, None)
    print("Clearing broker-level throttles on brokers " + ",".join(map(str, brokers)))
