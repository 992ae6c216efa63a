"""What a controller node reports about itself: its quorum status (DescribeQuorum's
view, `GET /v1/quorum/status`) and its metrics. Read-only views of kraft/node.py's
ControllerNode, kept apart from its decision and write path."""

from __future__ import annotations

from typing import Any

from kraft.controller_config import ControllerNodeConfig
from kraft.quorum import Quorum
from metadata_log.controller_api import QuorumReplicaState, QuorumStatus
from metadata_log.image import MetadataImage


def node_status(quorum: Quorum, config: ControllerNodeConfig, active: bool) -> QuorumStatus:
    raft = quorum.status()
    image = quorum.image()
    leader_http = config.http_address(raft.leader_id) if raft.leader_id >= 0 else None
    return QuorumStatus(
        node_id=config.node_id,
        role=raft.role,
        term=raft.term,
        leader_id=raft.leader_id,
        leader_http=leader_http,
        active=active,
        controller_epoch=image.controller_epoch,
        metadata_offset=quorum.next_offset,
        commit_index=raft.commit_index,
        **_replication(quorum, config, image, raft.commit_index),
    )


def _replication(
    quorum: Quorum, config: ControllerNodeConfig, image: MetadataImage, commit_index: int
) -> dict[str, Any]:
    """DescribeQuorum's part of the status, on the Raft leader: each voter's progress;
    brokers (which read the log over HTTP, not Raft) as observers whose offsets this
    node does not track (-1)."""
    progress = quorum.replication()
    if not progress:
        return {}
    voters = []
    for v in progress:
        host, port = config.voters.get(v.node_id, (None, None))
        voters.append(
            QuorumReplicaState(
                v.node_id, v.log_end_offset, v.last_fetch_ms, v.last_caught_up_ms, host, port
            )
        )
    observers = [QuorumReplicaState(b.broker_id) for b in image.brokers.values() if not b.fenced]
    return {"high_watermark": commit_index + 1, "voters": voters, "observers": observers}


def node_metrics(quorum: Quorum, active: bool, activations: int) -> dict[str, float]:
    image = quorum.image()
    raft = quorum.status()
    return {
        "controller_active": 1.0 if active else 0.0,
        "quorum_term": float(raft.term),
        "quorum_leader_id": float(raft.leader_id),
        "metadata_offset": float(quorum.next_offset),
        "commit_latency_seconds": quorum.commit_latency_s,
        "fenced_brokers": float(sum(1 for b in image.brokers.values() if b.fenced)),
        "offline_partitions": float(image.offline_partitions()),
        "under_replicated_partitions": float(image.under_replicated_partitions()),
        "append_retries_total": float(quorum.append_retries),
        "controller_activations_total": float(activations),
    }
