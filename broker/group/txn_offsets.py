"""Transactional offset commits for the coordinator core (a mixin of
`GroupCoordinatorCore`): Kafka's TxnOffsetCommit and GroupMetadata's
pendingTransactionalOffsetCommits.

A TxnOffsetCommit appends its offsets to `__consumer_offsets` as a transactional batch
of the request's producer id and epoch. They are held pending per producer id and
become the group's committed offsets only when that producer's commit marker is
written to the group's partition (`on_txn_marker`); its abort marker drops them. A
committed transactional offset replaces the current one only if its record is newer
in the log (a plain commit written after it wins), as Kafka compares batch offsets.
OffsetFetch with require_stable sees the pending ones as UNSTABLE_OFFSET_COMMIT.
"""

from __future__ import annotations

from typing import Any, TypeVar

from broker.group import messages as m
from broker.group.group import Group, GroupState, PendingTxnOffset
from broker.group.messages import Out, Reply
from broker.group.offsets import OffsetsMixin
from common.errors import Errors

T = TypeVar("T")
TP = tuple[str, int]


class TxnOffsetsMixin(OffsetsMixin[T]):
    """On OffsetsMixin: a transactional commit's records are built and its errors
    answered as a plain commit's; what differs is who may commit and when the offsets
    become committed."""

    def txn_commit(self, token: T, req: m.TxnCommitRequest, now_ms: int) -> list[Out[T]]:
        """TxnOffsetCommit (Kafka's handleTxnCommitOffsets + storeOffsets with a
        producer id): answered per partition once the transactional batch is appended."""

        def answer(code: int) -> list[Out[T]]:
            return self._answer_all(token, req.offsets, code)

        if (code := self.check(req.group_id)) != Errors.NONE:
            return answer(code)
        g = self.groups.get(req.group_id)
        if g is None:
            g = self._new_group(req.group_id, now_ms)
        if (code := self._txn_commit_allowed(g, req)) != Errors.NONE:
            return answer(code)
        results, records, values = self._offset_records(g, req.offsets, now_ms)
        if not records:
            return [Reply(token, m.PartitionResults(Errors.NONE, results))]
        pid = req.producer_id
        # prepareTxnOffsetCommit: pending (not yet appended) from now on, so a
        # require_stable OffsetFetch already waits for it.
        mine = g.pending_txn.setdefault(pid, {})
        # Each keeps what the transaction held there before: if this append fails, the
        # newest earlier one whose record is in the log is what commits (Kafka's
        # failPendingTxnOffsetCommit would forget it).
        staged = {tp: PendingTxnOffset(v, previous=mine.get(tp)) for tp, v in values.items()}
        mine.update(staged)

        def stored(code: int, _now: int, base_offset: int) -> list[Out[T]]:
            mine = g.pending_txn.get(pid, {})
            for tp, entry in staged.items():
                if code == Errors.NONE:
                    # onTxnOffsetCommitAppend (also when replaced meanwhile: a failure of
                    # the later append brings this one back)
                    entry.position, entry.previous = base_offset, None
                    continue
                entry.failed = True
                if mine.get(tp) is not entry:
                    continue  # replaced by a later commit, or its marker came first
                back = entry.previous
                while back is not None and back.failed:
                    back = back.previous
                if back is not None:
                    mine[tp] = back
                else:
                    del mine[tp]  # failPendingTxnOffsetCommit
            if not mine:
                g.pending_txn.pop(pid, None)
            final = Errors.NONE if code == Errors.NONE else m.txn_write_error(code)
            results.update(dict.fromkeys(values, final))
            return [Reply(token, m.PartitionResults(Errors.NONE, results))]

        txn = (req.transactional_id, pid, req.producer_epoch)
        return [self._append(g.partition, records, then_at=stored, txn=txn)]

    @staticmethod
    def _txn_commit_allowed(g: Group[Any], req: m.TxnCommitRequest) -> int:
        """Kafka's validateOffsetCommit with isTransactional: the member and generation
        are checked only when the request names them (v3+); v0-2 carry neither."""
        if g.state == GroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and g.state == GroupState.EMPTY:
            return Errors.NONE
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            code = g.member_error(req.member_id, req.group_instance_id)
            if code != Errors.NONE:
                return code
            if req.generation_id != g.generation_id:
                return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    def on_txn_marker(self, partition: int, producer_id: int, committed: bool) -> list[Out[T]]:
        """A commit or abort marker of `producer_id` was written to `partition` of
        __consumer_offsets (Kafka's handleTxnCompletion): its pending offsets in the
        groups of that partition become committed, or are dropped."""
        for g in self.groups.values():
            if g.partition != partition:
                continue
            pending = g.pending_txn.pop(producer_id, None)
            if not pending or not committed:
                continue
            for tp, entry in pending.items():
                if entry.position is None:
                    continue  # its append has not finished: nothing was promised
                current = g.offset_positions.get(tp)
                if tp not in g.offsets or current is None or current < entry.position:
                    g.offsets[tp] = entry.value
                    g.offset_positions[tp] = entry.position
        return []

    def unstable_partitions(self, group_id: str, partitions: list[TP] | None) -> set[TP]:
        """The partitions (of `partitions`, None: all) with a transactional commit still
        pending: OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT."""
        g = self.groups.get(group_id)
        if g is None:
            return set()
        out = {tp for pending in g.pending_txn.values() for tp in pending}
        return out if partitions is None else out & set(partitions)
