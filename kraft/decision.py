"""What every controller decision returns, and the controller's own settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kraft.state_machine import AppendResult
from metadata_log.records import Record


@dataclass(frozen=True)
class ControllerConfig:
    node_id: int = 0
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    producer_id_block_size: int = 1000
    unclean_leader_election: bool = False  # unclean.leader.election.enable (cluster default)


@dataclass
class Decision:
    """Records to append, and how to answer once the append's outcome is known."""

    records: list[Record]
    respond: Callable[[AppendResult | None], Any]
