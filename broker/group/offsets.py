"""Committed offsets and the group records of `__consumer_offsets`, for the coordinator
core (OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups, retention, loading).

An offset counts as committed once its record is appended with acks=all: the
in-memory map changes only in `on_append_done`, so what a new coordinator loads from
the log is what this one answered NONE for.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from broker.group import messages as m
from broker.group.group import Group, GroupState, PendingTxnOffset
from broker.group.messages import Append, Out, Reply
from broker.group.records import (
    GroupKey,
    GroupValue,
    OffsetKey,
    OffsetValue,
    RecordFormatError,
    decode_group_value,
    decode_key,
    decode_offset_value,
    encode_group_value,
    encode_key,
    encode_offset_value,
)
from common.errors import Errors

if TYPE_CHECKING:
    from broker.group.config import GroupConfig

T = TypeVar("T")
TP = tuple[str, int]


class OffsetsMixin(Generic[T]):
    config: GroupConfig
    groups: dict[str, Group[T]]
    owned: dict[int, bool]

    if TYPE_CHECKING:

        def check(self, group_id: str) -> int: ...
        def partition_for(self, group_id: str) -> int: ...
        def _append(
            self,
            partition: int,
            records: list[tuple[bytes, bytes | None]],
            then: Callable[[int, int], list[Out[T]]] | None = None,
            *,
            then_at: Callable[[int, int, int], list[Out[T]]] | None = None,
            txn: tuple[str, int, int] | None = None,
        ) -> Append: ...

    @staticmethod
    def group_record(g: Group[Any]) -> tuple[bytes, bytes | None]:
        return encode_key(GroupKey(g.group_id)), encode_group_value(g.to_value())

    # -- OffsetCommit --------------------------------------------------------------------------

    def commit(self, token: T, req: m.CommitRequest, now_ms: int) -> list[Out[T]]:
        def answer(code: int) -> list[Out[T]]:
            return self._answer_all(token, req.offsets, code)

        if (code := self.check(req.group_id)) != Errors.NONE:
            return answer(code)
        g = self.groups.get(req.group_id)
        if g is None:
            if req.generation_id >= 0:
                return answer(Errors.ILLEGAL_GENERATION)  # a generation of a group now gone
            g = self._new_group(req.group_id, now_ms)
        if (code := self._commit_allowed(g, req)) != Errors.NONE:
            return answer(code)
        results, records, values = self._offset_records(g, req.offsets, now_ms)
        if not records:
            return [Reply(token, m.PartitionResults(Errors.NONE, results))]

        def stored(code: int, _now: int, base_offset: int) -> list[Out[T]]:
            if code == Errors.NONE and self.groups.get(g.group_id) is g:
                g.offsets.update(values)
                g.offset_positions.update(dict.fromkeys(values, base_offset))
            final = Errors.NONE if code == Errors.NONE else m.write_error(code, offsets=True)
            results.update(dict.fromkeys(values, final))
            return [Reply(token, m.PartitionResults(Errors.NONE, results))]

        return [self._append(g.partition, records, then_at=stored)]

    # OffsetCommit's and TxnOffsetCommit's (`txn_offsets.py`) alike:

    def _new_group(self, group_id: str, now_ms: int) -> Group[T]:
        """A group that does not exist yet, kept from now on (a JoinGroup's or a
        commit's, as Kafka's getOrMaybeCreateGroup): Empty, on its partition."""
        g = Group(group_id, self.partition_for(group_id), state_since_ms=now_ms)
        self.groups[group_id] = g
        return g

    @staticmethod
    def _answer_all(token: T, offsets: list[m.OffsetCommit], code: int) -> list[Out[T]]:
        """One error for every partition of a commit request."""
        parts = {(o.topic, o.partition): code for o in offsets}
        return [Reply(token, m.PartitionResults(Errors.NONE, parts))]

    def _offset_records(
        self, g: Group[T], offsets: list[m.OffsetCommit], now_ms: int
    ) -> tuple[dict[TP, int], list[tuple[bytes, bytes | None]], dict[TP, OffsetValue]]:
        """(results so far, records to append, their values) of a commit's offsets: one
        whose metadata is over offset.metadata.max.bytes is answered
        OFFSET_METADATA_TOO_LARGE now and not written."""
        results: dict[TP, int] = {}
        records: list[tuple[bytes, bytes | None]] = []
        values: dict[TP, OffsetValue] = {}
        for o in offsets:
            tp = (o.topic, o.partition)
            metadata = o.metadata or ""
            if len(metadata.encode()) > self.config.offset_metadata_max_bytes:
                results[tp] = Errors.OFFSET_METADATA_TOO_LARGE
                continue
            values[tp] = OffsetValue(o.offset, o.leader_epoch, metadata, now_ms)
            records.append(
                (encode_key(OffsetKey(g.group_id, *tp)), encode_offset_value(values[tp]))
            )
        return results, records, values

    @staticmethod
    def _commit_allowed(g: Group[Any], req: m.CommitRequest) -> int:
        """Kafka's validateOffsetCommit: a commit from outside group management is only
        for a group with no members; a member's commit needs its current generation."""
        if g.state == GroupState.DEAD:
            return Errors.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and g.state == GroupState.EMPTY:
            return Errors.NONE
        code = g.member_error(req.member_id, req.group_instance_id)
        if code == Errors.FENCED_INSTANCE_ID:
            return code
        if g.state == GroupState.COMPLETING_REBALANCE:
            return Errors.REBALANCE_IN_PROGRESS
        if code != Errors.NONE:
            return code
        if req.generation_id != g.generation_id:
            return Errors.ILLEGAL_GENERATION
        return Errors.NONE

    # -- OffsetFetch ---------------------------------------------------------------------------

    def fetch_offsets(
        self, group_id: str, partitions: list[TP] | None
    ) -> tuple[int, dict[TP, OffsetValue | None]]:
        """(group error, offsets); `partitions` None: every committed one."""
        if (code := self.check(group_id)) != Errors.NONE:
            return code, {}
        g = self.groups.get(group_id)
        offsets = g.offsets if g is not None else {}
        if partitions is None:
            return Errors.NONE, dict(sorted(offsets.items()))
        return Errors.NONE, {tp: offsets.get(tp) for tp in partitions}

    # -- DeleteGroups, OffsetDelete ------------------------------------------------------------

    def delete_group(self, token: T, group_id: str) -> list[Out[T]]:
        if (code := self.check(group_id)) != Errors.NONE:
            return [Reply(token, code)]
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return [Reply(token, Errors.GROUP_ID_NOT_FOUND)]
        if g.state != GroupState.EMPTY:
            return [Reply(token, Errors.NON_EMPTY_GROUP)]
        # Forget it now, as Kafka does, so nothing joins a group being deleted.
        del self.groups[group_id]
        g.state = GroupState.DEAD
        g.pending_txn.clear()

        def stored(code: int, _now: int) -> list[Out[T]]:
            return [
                Reply(token, Errors.NONE if code == Errors.NONE else m.write_error(code, False))
            ]

        return [self._append(g.partition, self._tombstones(g, g.offsets, group=True), stored)]

    def delete_offsets(self, token: T, group_id: str, partitions: list[TP]) -> list[Out[T]]:
        if (code := self.check(group_id)) != Errors.NONE:
            return [Reply(token, m.PartitionResults(code))]
        g = self.groups.get(group_id)
        if g is None or g.state == GroupState.DEAD:
            return [Reply(token, m.PartitionResults(Errors.GROUP_ID_NOT_FOUND))]
        subscribed: set[str] = set()
        if not g.is_empty():
            topics = g.subscribed_topics()
            if topics is None:
                return [Reply(token, m.PartitionResults(Errors.NON_EMPTY_GROUP))]
            subscribed = topics
        results = {
            tp: Errors.GROUP_SUBSCRIBED_TO_TOPIC if tp[0] in subscribed else Errors.NONE
            for tp in partitions
        }
        gone = {
            tp: g.offsets[tp] for tp, c in results.items() if c == Errors.NONE and tp in g.offsets
        }
        if not gone:
            return [Reply(token, m.PartitionResults(Errors.NONE, results))]

        def stored(code: int, _now: int) -> list[Out[T]]:
            if code == Errors.NONE:
                for tp in gone:
                    g.offsets.pop(tp, None)
                    g.offset_positions.pop(tp, None)
                    for pending in g.pending_txn.values():
                        pending.pop(tp, None)  # as Kafka's removeOffsets
                return [Reply(token, m.PartitionResults(Errors.NONE, results))]
            return [Reply(token, m.PartitionResults(m.write_error(code, True)))]

        return [self._append(g.partition, self._tombstones(g, gone, group=False), stored)]

    @staticmethod
    def _tombstones(
        g: Group[Any], offsets: Iterable[TP], group: bool
    ) -> list[tuple[bytes, bytes | None]]:
        out: list[tuple[bytes, bytes | None]] = [
            (encode_key(OffsetKey(g.group_id, *tp)), None) for tp in offsets
        ]
        if group:
            out.append((encode_key(GroupKey(g.group_id)), None))
        return out

    # -- retention -----------------------------------------------------------------------------

    def expire_offsets(self, now_ms: int) -> list[Out[T]]:
        """offsets.retention.minutes (KIP-211): an empty group's offsets expire that long
        after it became empty; a group outside group management's, that long after each
        commit; a stable consumer group's, for topics it no longer subscribes to. An
        empty group left with no offsets is deleted."""
        out: list[Out[T]] = []
        retention = self.config.offsets_retention_ms
        for g in list(self.groups.values()):
            if self.owned.get(g.partition) is not True:
                continue
            expired: dict[TP, OffsetValue] = {}
            if g.state == GroupState.EMPTY and g.protocol_type is not None:
                if g.state_since_ms + retention <= now_ms:
                    expired = dict(g.offsets)
            elif g.state == GroupState.EMPTY or (
                g.state == GroupState.STABLE and g.subscribed_topics() is not None
            ):
                keep = g.subscribed_topics() if g.state == GroupState.STABLE else set()
                expired = {
                    tp: v
                    for tp, v in g.offsets.items()
                    if tp[0] not in (keep or set()) and v.commit_timestamp + retention <= now_ms
                }
            for tp in expired:
                del g.offsets[tp]
                g.offset_positions.pop(tp, None)
            # An open transaction's offsets keep the group (Kafka's hasOffsets).
            dead = g.state == GroupState.EMPTY and not g.offsets and not g.pending_txn
            if dead:
                del self.groups[g.group_id]
                g.state = GroupState.DEAD
            if expired or dead:
                out.append(self._append(g.partition, self._tombstones(g, expired, group=dead)))
        return out

    # -- loading -------------------------------------------------------------------------------

    def load(
        self,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes | None] | m.LoadedRecord | m.TxnMarker],
        now_ms: int,
    ) -> int:
        """Rebuild the groups of `partition` from its records in log order (the last
        value of a key wins; a null value deletes it). Transactional offset commits
        (Kafka's doLoadGroupsAndOffsets) are held per producer id and applied at that
        producer's commit marker when newer than what is loaded, dropped at its abort
        marker; those with no marker yet stay pending. Plain (key, value) pairs are
        non-transactional records at their position in `records`. Returns how many
        records were skipped as unreadable. The partition then serves requests. A load
        for a partition that is no longer loading (unloaded meanwhile) does nothing."""
        if self.owned.get(partition) is not False:
            return 0
        offsets: dict[str, dict[TP, tuple[int, OffsetValue]]] = {}
        pending: dict[int, dict[str, dict[TP, tuple[int, OffsetValue]]]] = {}
        values: dict[str, GroupValue | None] = {}
        bad = 0
        for i, item in enumerate(records):
            if isinstance(item, m.TxnMarker):
                done = pending.pop(item.producer_id, {})
                if item.committed:
                    for gid, per_tp in done.items():
                        loaded = offsets.setdefault(gid, {})
                        for tp, pv in per_tp.items():
                            if tp not in loaded or loaded[tp][0] < pv[0]:
                                loaded[tp] = pv
                continue
            if isinstance(item, m.LoadedRecord):
                key, value, pos, pid = item.key, item.value, item.batch_offset, item.producer_id
            else:
                (key, value), pos, pid = item, i, -1
            try:
                k = decode_key(key or b"")
                if isinstance(k, OffsetKey):
                    if pid >= 0:
                        per = pending.setdefault(pid, {}).setdefault(k.group, {})
                    else:
                        per = offsets.setdefault(k.group, {})
                    if value is None:
                        per.pop((k.topic, k.partition), None)
                    else:
                        per[(k.topic, k.partition)] = (pos, decode_offset_value(value))
                else:
                    values[k.group] = None if value is None else decode_group_value(value)
            except RecordFormatError:
                bad += 1
        open_txn: dict[str, dict[int, dict[TP, tuple[int, OffsetValue]]]] = {}
        for pid, per_group in pending.items():
            for gid, per_tp in per_group.items():
                if per_tp:
                    open_txn.setdefault(gid, {})[pid] = per_tp
        for gid in set(offsets) | set(values) | set(open_txn):
            if self.partition_for(gid) != partition:
                continue
            v = values.get(gid)
            group_offsets = offsets.get(gid, {})
            if v is None and not group_offsets and gid not in open_txn:
                continue  # deleted
            g: Group[T] = (
                Group.from_value(gid, partition, v, now_ms)
                if v is not None
                else Group(gid, partition, state_since_ms=now_ms)
            )
            g.offsets = {tp: ov for tp, (_, ov) in group_offsets.items()}
            g.offset_positions = {tp: pos for tp, (pos, _) in group_offsets.items()}
            g.pending_txn = {
                pid: {tp: PendingTxnOffset(ov, pos) for tp, (pos, ov) in per_tp.items()}
                for pid, per_tp in open_txn.get(gid, {}).items()
            }
            self.groups[gid] = g
        self.owned[partition] = True
        return bad
