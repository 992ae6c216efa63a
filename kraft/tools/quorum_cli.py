"""`kraft metadata-quorum`: kafka-metadata-quorum.sh over the Kafka protocol
(DescribeQuorum through kafka-python's admin client: confluent-kafka has no such call).

    kraft metadata-quorum --bootstrap-server HOST:PORT describe --status
    kraft metadata-quorum --bootstrap-server HOST:PORT describe --replication

Output is Kafka's MetadataQuorumCommand: for --status the lines ClusterId, LeaderId,
LeaderEpoch, HighWatermark, MaxFollowerLag, MaxFollowerLagTimeMs, CurrentVoters and
CurrentObservers; for --replication a table NodeId DirectoryId LogEndOffset Lag
LastFetchTimestamp LastCaughtUpTimestamp Status (Leader, Follower, Observer).

The quorum's offsets are its Raft log's positions (pysyncobj indexes), as Kafka's are
__cluster_metadata's. Brokers are observers whose offsets the controllers do not track
(-1): they read the metadata log over HTTP, not through Raft.
"""

from __future__ import annotations

import argparse
from typing import Any

from kraft.tools.client_common import (
    CliError,
    bootstrap_parser,
    resolve_connection,
    run_reporting,
    timeout_parser,
)
from kraft.tools.python_admin import admin_client

COMMANDS = ("metadata-quorum",)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "metadata-quorum",
        parents=[bootstrap_parser(), timeout_parser()],
        help="describe the controller quorum (kafka-metadata-quorum)",
        description="Describe the metadata quorum, as kafka-metadata-quorum.sh.",
    )
    actions = p.add_subparsers(dest="quorum_action", required=True)
    describe = actions.add_parser("describe", help="describe the quorum")
    what = describe.add_mutually_exclusive_group(required=True)
    what.add_argument("--status", action="store_true", help="the quorum's status")
    what.add_argument("--replication", action="store_true", help="each replica's progress")


def run(args: argparse.Namespace) -> int:
    def action() -> int:
        resolve_connection(args)
        admin = admin_client(args)
        try:
            quorum = admin.describe_metadata_quorum()
            cluster_id = admin.describe_cluster().get("cluster_id")
        finally:
            admin.close()
        partition = quorum["topics"][0]["partitions"][0]
        if partition.get("error"):
            raise CliError(partition["error"])
        lines = status_lines(cluster_id, partition) if args.status else replication(partition)
        print("\n".join(lines))
        return 0

    return run_reporting("metadata-quorum", action)


def status_lines(cluster_id: str | None, p: dict[str, Any]) -> list[str]:
    voters, observers = p["current_voters"], p["observers"]
    leader = next((v for v in voters if v["replica_id"] == p["leader_id"]), None)
    lag, lag_ms = 0, 0
    if leader is not None and voters:
        # Kafka: the voter furthest behind the leader, and how long ago it was caught up.
        furthest = min(voters, key=lambda v: v["log_end_offset"])
        lag = leader["log_end_offset"] - furthest["log_end_offset"]
        if furthest is not leader:
            caught_up = furthest["last_caught_up_timestamp"]
            lag_ms = leader["last_caught_up_timestamp"] - caught_up if caught_up >= 0 else -1
    ids = ",".join(str(i) for i in sorted(v["replica_id"] for v in voters))
    observed = ",".join(str(i) for i in sorted(o["replica_id"] for o in observers))
    return [
        f"ClusterId:              {cluster_id}",
        f"LeaderId:               {p['leader_id']}",
        f"LeaderEpoch:            {p['leader_epoch']}",
        f"HighWatermark:          {p['high_watermark']}",
        f"MaxFollowerLag:         {lag}",
        f"MaxFollowerLagTimeMs:   {lag_ms}",
        f"CurrentVoters:          [{ids}]",
        f"CurrentObservers:       [{observed}]",
    ]


def replication(p: dict[str, Any]) -> list[str]:
    header = [
        "NodeId",
        "DirectoryId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    leader_end = next(
        (v["log_end_offset"] for v in p["current_voters"] if v["replica_id"] == p["leader_id"]),
        -1,
    )
    rows = []
    for kind, replicas in (("voter", p["current_voters"]), ("observer", p["observers"])):
        for r in sorted(replicas, key=lambda r: r["replica_id"]):
            end = r["log_end_offset"]
            if kind == "observer":
                status = "Observer"
            else:
                status = "Leader" if r["replica_id"] == p["leader_id"] else "Follower"
            rows.append(
                [
                    str(r["replica_id"]),
                    str(r.get("replica_directory_id") or "AAAAAAAAAAAAAAAAAAAAAA"),
                    str(end),
                    str(max(leader_end - end, 0) if end >= 0 and leader_end >= 0 else -1),
                    str(r["last_fetch_timestamp"]),
                    str(r["last_caught_up_timestamp"]),
                    status,
                ]
            )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
