"""Which crashes the replication model (tests/harness/replication_model.py) may inflict
when machine crashes may hit more than one replica (`DOUBLE_CRASHES`), and the ELR the
model tracks itself to decide it.

A machine crash loses a broker's unflushed tail, so it may lose acknowledged records on
that machine; Kafka with KIP-966 promises they survive while some replica that held them
is still eligible: in the ISR, or in the ELR (it left the ISR below min.insync.replicas,
when the HW stood still, so it holds everything below the HW). Every restart registers
as an unclean shutdown, which takes the broker out of the ELR, and the last known leader
may lead once ISR and ELR are empty. So:
- a machine crash of b is allowed while another replica is up, intact and eligible
  (it keeps the acknowledged records, and the controller knows it may lead);
- a SIGKILL of b (the page cache survives, but its restart is unclean, so it is no
  longer eligible) is allowed when no replica has lost data, or while another replica is
  up, intact and eligible;
- pauses are always allowed.
"Eligible" is the controller's ISR and ELR with ELR on. With ELR off the model keeps the
same ELR itself (`track_elr`, from each committed ISR change), so both runs allow the
same faults: with ELR off the controller ignores that ELR, and the test expects a loss.
"""

from __future__ import annotations

from typing import Any

from metadata_log.image import PartitionRegistration
from tests.harness.replication_model_parts import MIN_ISR


class CrashRules:
    ELR: bool
    brokers: dict[int, Any]
    shadow_elr: set[int]

    @property
    def reg(self) -> PartitionRegistration:  # the model's
        raise NotImplementedError

    def track_elr(self, before: PartitionRegistration, after: PartitionRegistration) -> None:
        """Kafka's ELR rule, kept by the model from the ISR changes it sees committed."""
        if after.isr == before.isr:
            return
        if len(after.isr) >= MIN_ISR:
            self.shadow_elr = set()
        else:
            self.shadow_elr = (self.shadow_elr | set(before.isr)) - set(after.isr)

    def unclean_restart(self, broker: int) -> None:
        """A broker registered after an unclean shutdown: out of the ELR."""
        self.shadow_elr.discard(broker)

    def eligible(self) -> set[int]:
        """Who may lead without losing what was acknowledged, as the controller knows."""
        reg = self.reg
        elr = set(reg.elr) if self.ELR else self.shadow_elr
        return set(reg.isr) | elr

    def safe_holder_besides(self, broker: int) -> bool:
        eligible = self.eligible()
        return any(
            o.id != broker and o.up and o.intact and o.id in eligible for o in self.brokers.values()
        )

    def fault_allowed(self, broker: int, kind: str) -> bool:
        if kind == "pause":
            return True
        if kind == "machine":
            return self.safe_holder_besides(broker)
        return all(o.intact for o in self.brokers.values()) or self.safe_holder_besides(broker)
