"""What must hold of the replication model (tests/harness/replication_model.py): the
invariants checked after every step, and the end heal that must converge."""

from __future__ import annotations

import itertools

from hypothesis.stateful import invariant

from tests.harness.replication_model_parts import TOPIC, Entry, entries, event


class ReplicationChecks:
    """The invariants and the final heal of `ReplicationModel` (kept apart from its rules:
    what must hold, against what can happen)."""

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def replication_invariants(self) -> None:
        if not hasattr(self, "controller") or self.image.topic_by_name(TOPIC) is None:
            return
        self._healable = True
        reg = self.reg
        assert reg.leader == -1 or reg.leader in reg.isr, reg
        # With ELR the ISR may empty (its last member fenced): the ELR says who may lead.
        assert (reg.isr or self.ELR) and set(reg.isr) <= set(reg.replicas), reg
        assert not set(reg.elr) & set(reg.isr), reg
        if reg.leader_epoch > self.max_leader_epoch:
            event(f"leader epoch reached {min(reg.leader_epoch, 3)}")
            self.max_leader_epoch = reg.leader_epoch
        logs: dict[int, list[Entry]] = {}
        hws: dict[int, int] = {}
        for b in self.brokers.values():
            if (
                b.id not in reg.isr + reg.elr + reg.last_known_elr
                and b.id not in self.shadow_elr
                and b.up
                and b.registered
            ):
                # A new incarnation, no longer eligible to lead: what it lost no longer
                # matters (it will fetch it back).
                b.intact = True
            if b.h is None:
                continue
            if not b.up:
                logs[b.id] = b.last_entries
                continue
            es = entries(b.h.log)
            logs[b.id] = es
            core, leo = b.h.core, b.h.log.log_end_offset
            hw = core.high_watermark
            hws[b.id] = hw
            assert hw <= leo, (b.id, hw, leo)
            epochs = [e[1] for e in es]
            assert epochs == sorted(epochs), (b.id, es)
            assert not epochs or epochs[-1] <= self.max_leader_epoch, (b.id, es)
            # Everything that was ever below its HW stays (its HW itself may go back
            # after a restart: the checkpoint is older than the HW it had).
            assert es[: len(b.committed)] == b.committed, (
                f"broker {b.id} lost or changed records below its HW: {b.committed} -> {es}"
            )
            below = [e for e in es if e[0] < hw]
            if len(below) > len(b.committed):
                b.committed = below
            if core.is_leader:
                key = (b.incarnation, core.leader_epoch)
                if b.leader_hw is not None and b.leader_hw[:2] == key:
                    assert hw >= b.leader_hw[2], f"leader {b.id} HW went back"
                b.leader_hw = (*key, hw)
        for a, b2 in itertools.combinations(hws, 2):
            bound = min(hws[a], hws[b2])
            la = [e for e in logs[a] if e[0] < bound]
            lb = [e for e in logs[b2] if e[0] < bound]
            assert la == lb, f"logs of {a} and {b2} differ below {bound}: {la} vs {lb}"
        leader = self.brokers.get(reg.leader)
        if leader is None or not leader.up or leader.h is None:
            return
        lcore = leader.h.core
        if not lcore.is_leader or lcore.leader_epoch != reg.leader_epoch:
            return
        committed = [e for e in logs[leader.id] if e[0] < lcore.high_watermark]
        for r in reg.isr:
            if self.brokers[r].intact and r in logs:
                assert logs[r][: len(committed)] == committed, (
                    f"ISR member {r} lacks committed records of leader {leader.id}"
                )
        have = {(e[0], e[2]) for e in logs[leader.id]}
        lost = [(v, o) for v, o in self.acked.items() if (o, v) not in have]
        assert not lost, f"leader {leader.id} lacks acknowledged records {lost}"

    # -- the end: heal and converge ------------------------------------------------------------

    def heal_and_check(self) -> None:
        event(f"acknowledged before healing: {min(len(self.acked), 10)}")
        event(f"ISR size before healing: {len(self.reg.isr)}")
        event(f"produced: {min(next(self.value_ids) - 1, 10)}")
        while self.net:
            self.lose(self.net.pop())
        for b in self.brokers.values():
            b.paused = False
            if not b.up:
                self.restart(b.id)
        for _ in range(60):
            self.tick(1_000)
            for b in self.brokers.values():
                if b.active:
                    self.sync(b)
                    self.send_fetch(b.id)
            while self.net:
                self.handle(self.net.pop(0))
            reg = self.reg
            hs = [b.h for b in self.brokers.values() if b.h is not None]
            leos = {h.log.log_end_offset for h in hs}
            hws = {h.core.high_watermark for h in hs}
            if reg.leader != -1 and len(reg.isr) == 3 and len(leos) == 1 and hws == leos:
                break
        else:
            raise AssertionError(
                f"no convergence: {self.reg} {[b.h for b in self.brokers.values()]}"
            )
        final = [entries(b.h.log) for b in self.brokers.values() if b.h is not None]
        assert all(f == final[0] for f in final), final
        for f in final:
            ids = [e[2] for e in f]
            assert len(ids) == len(set(ids)), f"a value twice: {f}"
            have = {(e[0], e[2]) for e in f}
            lost = [(v, o) for v, o in self.acked.items() if (o, v) not in have]
            assert not lost, f"acknowledged records lost: {lost}"
