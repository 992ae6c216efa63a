"""Which crashes the replication model (tests/harness/replication_model.py) may inflict
when machine crashes may hit more than one replica (`DOUBLE_CRASHES`), and the ELR the
model tracks itself to decide it.

A machine crash loses a broker's unflushed tail, so it may lose acknowledged records on
that machine; Kafka with KIP-966 promises they survive while some replica that held them
is still eligible: in the ISR, or in the ELR (it left the ISR below min.insync.replicas,
when the HW stood still, so it holds everything below the HW). Every restart registers
as an unclean shutdown, which takes the broker out of the ELR, and the last known leader
may lead once ISR and ELR are empty. So:
- a machine crash of b is allowed while another replica is up, registered (a restarted
  process not registered yet will register as unclean and stop being eligible), intact
  and eligible (it keeps the acknowledged records, and the controller knows it may lead);
- a SIGKILL of b (the page cache survives, but its restart is unclean, so it is no
  longer eligible) is allowed when no replica has lost data, or while another replica is
  up, intact and eligible;
- pauses are always allowed.
"Eligible" is the controller's ISR and ELR with ELR on. With ELR off the model keeps the
same ELR itself (`track_elr`, from each committed ISR change), so both runs allow the
same faults: with ELR off the controller ignores that ELR, and the test expects a loss.
"""

from __future__ import annotations

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from metadata_log.image import PartitionRegistration
from tests.harness.replication_model_parts import BROKERS, MIN_ISR, Broker, entries, event


class CrashRules:
    """The model's fault rules (flush, HW checkpoint, SIGKILL, machine crash, pause,
    recovery) and which of them may happen. The model provides the rest."""

    ELR: bool
    DOUBLE_CRASHES: bool
    brokers: dict[int, Broker]
    shadow_elr: set[int]

    @property
    def reg(self) -> PartitionRegistration:  # the model's
        raise NotImplementedError

    def open_replica(self, b: Broker) -> None:  # the model's
        raise NotImplementedError

    def register(self, b: Broker) -> bool:  # the model's
        raise NotImplementedError

    def sync(self, b: Broker) -> None:  # the model's
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
            o.id != broker and o.up and o.registered and o.intact and o.id in eligible
            for o in self.brokers.values()
        )

    def fault_allowed(self, broker: int, kind: str) -> bool:
        if kind == "pause":
            return True
        if kind == "machine":
            return self.safe_holder_besides(broker)
        return all(o.intact for o in self.brokers.values()) or self.safe_holder_besides(broker)

    # -- faults ------------------------------------------------------------------------------

    @rule(broker=st.sampled_from(BROKERS))
    def flush(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.up and b.h is not None:
            b.h.log.flush()

    @rule(broker=st.sampled_from(BROKERS))
    def checkpoint_hw(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.up and b.h is not None:
            b.checkpoint_hw = b.h.core.high_watermark

    @rule(broker=st.sampled_from(BROKERS), kind=st.sampled_from(["sigkill", "machine", "pause"]))
    def fault(self, broker: int, kind: str) -> None:
        if self.DOUBLE_CRASHES:
            if not self.fault_allowed(broker, kind):
                return
        elif any(not b.intact for b in self.brokers.values() if b.id != broker):
            return  # one failure at a time while a machine crash's replica is in the ISR
        if kind == "pause":
            b = self.brokers[broker]
            b.paused = b.up
        else:
            self.crash(broker, kind == "machine")

    @rule(broker=st.sampled_from(BROKERS))
    def recover(self, broker: int) -> None:
        """SIGCONT a paused broker, or start a crashed one again."""
        b = self.brokers[broker]
        if b.paused:
            b.paused = False
        elif not b.up:
            self.restart(broker)

    def machine_crash_allowed(self, b: Broker) -> bool:
        if self.DOUBLE_CRASHES:
            return self.safe_holder_besides(b.id)
        isr = self.reg.isr
        return all(
            o.active and o.intact and o.id in isr for o in self.brokers.values() if o is not b
        )

    @precondition(lambda self: self.DOUBLE_CRASHES)
    @rule(first=st.sampled_from(BROKERS), second=st.sampled_from(BROKERS))
    def two_machine_crashes(self, first: int, second: int) -> None:
        """Two machines go down at once (a rack's power): each crash as the rules allow."""
        self.fault(first, "machine")
        self.fault(second, "machine")

    @rule()
    def recover_all(self) -> None:
        for broker in BROKERS:
            self.recover(broker)

    def crash(self, broker: int, machine: bool) -> None:
        b = self.brokers[broker]
        if not b.up or b.h is None:
            return
        lg = b.h.log
        if machine and self.machine_crash_allowed(b):
            if lg.recovery_point < lg.log_end_offset:
                event("a machine crash lost an unflushed tail")
                self.tail_losses = getattr(self, "tail_losses", 0) + 1
                if self.tail_losses == 2:
                    event("two machine crashes lost unflushed tails")
            lost = sum(1 for o in self.brokers.values() if not o.intact)
            if lost:
                event("a machine crash while another replica had lost its tail")
            lg.truncate_to(lg.recovery_point)  # everything not flushed is gone
            b.intact = False
            b.committed = []
        b.last_entries = entries(lg)
        lg.close()
        b.up = b.paused = False
        b.leader_hw = None

    def restart(self, broker: int) -> None:
        b = self.brokers[broker]
        if b.up:
            return
        self.open_replica(b)
        b.up, b.registered = True, False
        b.incarnation += 1
        # The controller takes it out of the ISR (unless it is the last member).
        if self.register(b):
            self.sync(b)
