"""What every controller decision returns, and the controller's own settings.

A decision is a value, as Kafka's `ControllerResult`: the records to append and the
response to give once they commit. It holds no code, so a simulation can compare, log or
replay decisions, and the node that appends them needs to know nothing of the request.

Two things are known only when the batch is applied, not when it is decided: the offset
the state machine gives the first record (a registration's broker epoch is that offset,
as in KRaft) and, when the batch does not apply (the image moved under the decision), the
state machine's reason. `offset_field` and `error_field` name the response fields that
take them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from kraft.state_machine import AppendResult, AppendStatus
from metadata_log.records import Record


@dataclass(frozen=True)
class ControllerConfig:
    node_id: int = 0
    session_timeout_ms: int = 9000  # broker.session.timeout.ms
    # broker.disconnect.fence.grace.ms: the shorter session of a broker whose process is
    # known to be gone (kraft/cluster_control.py); 0 turns that detection off.
    disconnect_grace_ms: int = 3000
    num_partitions: int = 1  # num.partitions
    default_replication_factor: int = 1  # default.replication.factor
    producer_id_block_size: int = 1000
    unclean_leader_election: bool = False  # unclean.leader.election.enable (cluster default)
    # eligible.leader.replicas.enable (KIP-966; Kafka 3.7-3.9's name): the ELR is kept and
    # elections may use it (kraft/election.py). Off: no ELR, an ISR never empties.
    eligible_leader_replicas_enable: bool = True
    min_insync_replicas: int = 1  # min.insync.replicas (cluster default for the ELR rules)
    auto_leader_rebalance_enable: bool = True  # auto.leader.rebalance.enable
    leader_imbalance_per_broker_percentage: int = 10  # leader.imbalance.per.broker.percentage
    leader_imbalance_check_interval_ms: int = 300_000  # leader.imbalance.check.interval.seconds


@dataclass(frozen=True, slots=True)
class Decision:
    """Records to append, the response once they commit (or at once when there are none),
    and the response when the batch did not apply."""

    records: tuple[Record, ...] = ()
    response: Any = None
    failure: Any = None
    offset_field: str | None = None  # response field set to the batch's first offset
    error_field: str | None = None  # failure field set to the state machine's error

    @classmethod
    def answer(cls, response: Any) -> Decision:
        """No records: the response is the whole decision (a refusal, or a no-op)."""
        return cls((), response)

    def plus(self, records: Iterable[Record]) -> Decision:
        """The same decision with more records in its batch (e.g. the partition changes a
        broker's fencing causes)."""
        return Decision(
            self.records + tuple(records),
            self.response,
            self.failure,
            self.offset_field,
            self.error_field,
        )

    def respond(self, result: AppendResult | None) -> Any:
        """The answer, given the append's outcome (None: nothing was appended)."""
        if result is not None and result.status != AppendStatus.OK:
            if self.error_field is None:
                return self.failure
            return msgspec.structs.replace(self.failure, **{self.error_field: result.error})
        if result is not None and self.offset_field is not None:
            return msgspec.structs.replace(
                self.response, **{self.offset_field: result.first_offset}
            )
        return self.response
