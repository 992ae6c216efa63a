"""A hosted replica's reactions that both the broker's asyncio shells and the replication
model call: the same code under real sockets and under Hypothesis's network.

`HostedPartition` (broker/hosted.py) and its `Partition` core hold the state and the
rules. These functions are the glue around them that the shells used to write out
themselves (and the model again, by hand): which fetch a leader answers, the periodic
ISR check, what an AlterPartition answer does. No I/O and no clock here: the shells pass
`now_ms` and send what comes back (an `AlterIsr` to propose); the model does the same.
- ReplicaManager._leader and the model's fetch handling: `fetch_epoch_error`;
- AlterPartitionManager.check_isrs and the model's tick: `isr_change_due`;
- AlterPartitionManager.propose's answer and the model's AlterResp: `apply_alter_answer`.
"""

from __future__ import annotations

from typing import Any

from broker.hosted import HostedPartition
from broker.partition import AlterIsr
from common.errors import Errors
from metadata_log.controller_api import AlterPartitionResponse


def fetch_epoch_error(h: HostedPartition, current_leader_epoch: int) -> int:
    """Errors.NONE if we lead `h` in the epoch the fetch (or produce) names, else the
    error Kafka answers: NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH for an older epoch
    (the client missed an election), UNKNOWN_LEADER_EPOCH for a newer one (we did).
    An epoch of -1 names none (old clients)."""
    if not h.core.is_leader:
        return Errors.NOT_LEADER_OR_FOLLOWER
    if current_leader_epoch >= 0:
        if current_leader_epoch < h.core.leader_epoch:
            return Errors.FENCED_LEADER_EPOCH
        if current_leader_epoch > h.core.leader_epoch:
            return Errors.UNKNOWN_LEADER_EPOCH
    return Errors.NONE


def isr_change_due(h: HostedPartition, now_ms: int, lag_ms: int) -> tuple[AlterIsr, str] | None:
    """The periodic check on a partition we lead: shrink the followers that lag by more
    than `lag_ms` out of the ISR, or send again a change whose outcome is unknown. The
    change to propose and what it is (for the log line), or None."""
    if h.transitioning or not h.core.is_leader:
        return None
    alter = h.core.maybe_shrink_isr(h.log.log_end_offset, now_ms, lag_ms)
    if alter is not None:
        return alter, "shrinking"
    alter = h.core.alter_isr_to_resend()
    return None if alter is None else (alter, "again: changing")


def apply_alter_answer(
    h: HostedPartition, sent: AlterIsr, resp: AlterPartitionResponse
) -> list[tuple[Any, int]]:
    """The controller's answer to the ISR change `sent`: the core commits, drops or keeps
    it pending (an unknown outcome). Returns the acks=all produces it completed, with
    their codes, for the caller to finish."""
    return h.core.on_alter_isr_answer(
        sent,
        resp.error_code,
        resp.isr,
        resp.leader_epoch,
        resp.partition_epoch,
        h.log.log_end_offset,
    )
