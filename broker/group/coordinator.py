"""The group coordinator, sans I/O: Kafka's classic group protocol (GroupCoordinator.scala).

No sockets, tasks or clocks: each request comes in with an opaque token and `now_ms`,
and the core returns intents: `Reply(token, result)` (now, or later for a JoinGroup
or SyncGroup that waits for the rebalance) and `Append(...)` (records for
`__consumer_offsets`; the shell appends them with acks=all and reports back through
`on_append_done`). `tick(now_ms)` runs the timers: session expiry, the end of the
join phase, the sync deadline, KIP-394 pending members, offset retention.

States: Empty -> PreparingRebalance (a member joins, leaves or changes) ->
CompletingRebalance (everyone joined: the generation is bumped, the leader gets the
members and computes the assignment) -> Stable (the leader's SyncGroup stored the
assignment) -> PreparingRebalance ...; a group whose last member left goes back to
Empty; a deleted or expired one is Dead and forgotten.

The coordinator of a group is the leader of partition `partition_for(group)` of
`__consumer_offsets`; the core serves the partitions it was told it owns
(`begin_load`, `load`, `unload`), answering COORDINATOR_LOAD_IN_PROGRESS while a
partition loads and NOT_COORDINATOR for the others.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Generic, TypeVar

from broker.group import messages as m
from broker.group.config import GroupConfig, partition_for
from broker.group.group import Group, GroupState, Member, log
from broker.group.messages import Append, Out, Reply
from broker.group.offsets import OffsetsMixin
from broker.group.sync import SyncMixin
from broker.group.timers import TimersMixin
from broker.group.txn_offsets import TxnOffsetsMixin
from common.errors import Errors

T = TypeVar("T")

EMPTY, PREPARING = GroupState.EMPTY, GroupState.PREPARING_REBALANCE
COMPLETING, STABLE, DEAD = (
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
    GroupState.DEAD,
)


class GroupCoordinatorCore(
    SyncMixin[T], TimersMixin[T], TxnOffsetsMixin[T], OffsetsMixin[T], Generic[T]
):
    def __init__(self, config: GroupConfig, new_member_id: Callable[[str], str]) -> None:
        self.config = config
        # The partition count of __consumer_offsets: the config's until the topic exists
        # (then the shell sets what it really has, as Kafka does).
        self.num_partitions = config.num_partitions
        self.groups: dict[str, Group[T]] = {}
        # Partitions we coordinate: partition -> loaded (False while loading).
        self.owned: dict[int, bool] = {}
        self._load_epoch: dict[int, int] = {}  # bumped on every load/unload: stale writes
        self._epochs = itertools.count(1)
        self._new_member_id = new_member_id
        self._writes: dict[int, Callable[[int, int, int], list[Out[T]]]] = {}
        self._write_ids = itertools.count(1)
        self._next_expiry_ms: int | None = None

    # -- ownership -----------------------------------------------------------------------------

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def check(self, group_id: str) -> int:
        """NONE when we coordinate the group now, else the error to answer."""
        if not group_id:
            return Errors.INVALID_GROUP_ID
        loaded = self.owned.get(self.partition_for(group_id))
        if loaded is None:
            return Errors.NOT_COORDINATOR
        return Errors.NONE if loaded else Errors.COORDINATOR_LOAD_IN_PROGRESS

    def begin_load(self, partition: int) -> list[Out[T]]:
        out = self.unload(partition)
        self.owned[partition] = False
        self._load_epoch[partition] = next(self._epochs)
        return out

    def unload(self, partition: int) -> list[Out[T]]:
        """We no longer lead the partition: its groups leave memory, and requests
        waiting on them answer NOT_COORDINATOR (the clients find the new one)."""
        out: list[Out[T]] = []
        for gid in [gid for gid, g in self.groups.items() if g.partition == partition]:
            g = self.groups.pop(gid)
            for mem in g.members.values():
                self._fail_waiting(mem, Errors.NOT_COORDINATOR, out)
        self.owned.pop(partition, None)
        self._load_epoch[partition] = next(self._epochs)
        return out

    def _append(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        then: Callable[[int, int], list[Out[T]]] | None = None,
        *,
        then_at: Callable[[int, int, int], list[Out[T]]] | None = None,
        txn: tuple[str, int, int] | None = None,
    ) -> Append:
        """An append intent; `then(code, now)` or `then_at(code, now, batch offset)`
        runs when it is done. `txn` (transactional id, producer id, epoch) makes the
        batch transactional (TxnOffsetCommit)."""
        write_id = next(self._write_ids)
        epoch = self._load_epoch.get(partition)

        def done(code: int, now_ms: int, base_offset: int) -> list[Out[T]]:
            if self._load_epoch.get(partition) != epoch:
                code = Errors.NOT_COORDINATOR  # the partition moved meanwhile
            if then_at is not None:
                return then_at(code, now_ms, base_offset)
            return then(code, now_ms) if then is not None else []

        self._writes[write_id] = done
        if txn is None:
            return Append(write_id, partition, tuple(records))
        tid, pid, pepoch = txn
        return Append(write_id, partition, tuple(records), pid, pepoch, tid)

    def on_append_done(
        self, write_id: int, error_code: int, now_ms: int, base_offset: int = -1
    ) -> list[Out[T]]:
        """An append finished; `base_offset` is where its batch landed (-1: unknown)."""
        done = self._writes.pop(write_id, None)
        return done(error_code, now_ms, base_offset) if done is not None else []

    # -- JoinGroup -----------------------------------------------------------------------------

    def join(self, token: T, req: m.JoinRequest, now_ms: int) -> list[Out[T]]:
        out: list[Out[T]] = []

        def fail(code: int) -> list[Out[T]]:
            return [Reply(token, m.JoinResult(code, req.member_id))]

        if (code := self.check(req.group_id)) != Errors.NONE:
            return fail(code)
        cfg = self.config
        if not cfg.min_session_timeout_ms <= req.session_timeout_ms <= cfg.max_session_timeout_ms:
            return fail(Errors.INVALID_SESSION_TIMEOUT)
        g = self.groups.get(req.group_id)
        if g is None:
            if req.member_id:
                return fail(Errors.UNKNOWN_MEMBER_ID)
            g = self._new_group(req.group_id, now_ms)
        if not g.supports(req.protocol_type, req.protocols):
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)
        known = req.member_id in g.members or (
            req.group_instance_id is not None and req.group_instance_id in g.static_members
        )
        if not known and len(g.members) >= cfg.max_size:
            return fail(Errors.GROUP_MAX_SIZE_REACHED)
        if not req.member_id:
            self._join_new(g, token, req, now_ms, out)
        else:
            self._join_known(g, token, req, now_ms, out)
        return out

    def _join_new(
        self, g: Group[T], token: T, req: m.JoinRequest, now_ms: int, out: list[Out[T]]
    ) -> None:
        instance = req.group_instance_id
        if instance is None:
            member_id = self._new_member_id(req.client_id)
            if req.require_known_member_id:
                # KIP-394: hand out the id; the member joins again with it.
                g.pending_members[member_id] = now_ms + req.session_timeout_ms
                out.append(Reply(token, m.JoinResult(Errors.MEMBER_ID_REQUIRED, member_id)))
                return
            self._add_member(g, token, req, member_id, now_ms, out)
            return
        member_id = self._new_member_id(instance)
        old_id = g.static_members.get(instance)
        old = g.members.get(old_id) if old_id is not None else None
        if old is None:
            self._add_member(g, token, req, member_id, now_ms, out)
            return
        # A static member restarted (KIP-345): the new id replaces the old one, which
        # is fenced from now on, and takes the protocols it joined with. In a Stable group
        # nobody else notices (no rebalance) unless the group's protocol would change:
        # Kafka compares the selected protocol, not the metadata, which a restarted client
        # always changes (librdkafka's carries its generation and owned partitions).
        self._fail_waiting(old, Errors.FENCED_INSTANCE_ID, out)
        del g.members[old.member_id]
        new = replace(old, member_id=member_id, join_token=None, sync_token=None)
        new.last_heartbeat_ms = now_ms
        g.members[member_id] = new
        g.static_members[instance] = member_id
        old_leader = g.leader_id
        if g.leader_id == old.member_id:
            g.leader_id = member_id
        if g.state == STABLE:
            new.protocols = list(req.protocols)
            new.rebalance_timeout_ms = req.rebalance_timeout_ms
            new.session_timeout_ms = req.session_timeout_ms
            if g.select_protocol() == g.protocol_name:
                out.append(self._store_group(g, lambda code, _now: []))
                out.append(Reply(token, self._static_rejoin_result(g, new, old_leader, req)))
                return
        self._update_member(g, new, token, req, out)
        if g.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(g, now_ms, out)
        else:
            self._maybe_complete_join(g, now_ms, out)

    def _static_rejoin_result(
        self, g: Group[T], new: Member[T], old_leader: str | None, req: m.JoinRequest
    ) -> m.JoinResult:
        """The current generation for a restarted static member. A leader that can skip
        the assignment (v9+) gets the members and is told to skip it; an older one is
        named follower (the old leader id), as Kafka does, so it does not assign."""
        if g.leader_id != new.member_id:
            return self._join_result(g, new, with_members=False)
        if req.supports_skip_assignment:
            return replace(self._join_result(g, new, with_members=True), skip_assignment=True)
        return replace(self._join_result(g, new, with_members=False), leader=old_leader or "")

    def _join_known(
        self, g: Group[T], token: T, req: m.JoinRequest, now_ms: int, out: list[Out[T]]
    ) -> None:
        member_id = req.member_id
        if member_id in g.pending_members:
            self._add_member(g, token, req, member_id, now_ms, out)
            return
        code = g.member_error(member_id, req.group_instance_id)
        if code == Errors.NONE and g.state in (EMPTY, DEAD):
            code = Errors.UNKNOWN_MEMBER_ID
        if code != Errors.NONE:
            out.append(Reply(token, m.JoinResult(code, member_id)))
            return
        mem = g.members[member_id]
        mem.last_heartbeat_ms = now_ms
        unchanged = mem.same_protocols(req.protocol_type, req.protocols)
        if g.state == PREPARING:
            self._update_member(g, mem, token, req, out)
            self._maybe_complete_join(g, now_ms, out)
        elif g.state == COMPLETING and unchanged and mem.join_answer is not None:
            # Asked again while its generation is being stored: answer this one then.
            out.append(
                Reply(mem.join_answer, m.JoinResult(Errors.REBALANCE_IN_PROGRESS, member_id))
            )
            mem.join_answer = token
        elif g.state == COMPLETING and unchanged:
            # Its JoinGroup answer was lost: the same answer again.
            out.append(Reply(token, self._join_result(g, mem, mem.member_id == g.leader_id)))
        elif g.state == STABLE and unchanged and member_id != g.leader_id:
            out.append(Reply(token, self._join_result(g, mem, with_members=False)))
        else:  # new protocols, or the leader rejoining: a new assignment is needed
            self._update_member(g, mem, token, req, out)
            self._prepare_rebalance(g, now_ms, out)

    def _add_member(
        self,
        g: Group[T],
        token: T,
        req: m.JoinRequest,
        member_id: str,
        now_ms: int,
        out: list[Out[T]],
    ) -> None:
        g.pending_members.pop(member_id, None)
        mem: Member[T] = Member(
            member_id,
            req.group_instance_id,
            req.client_id,
            req.client_host,
            req.rebalance_timeout_ms,
            req.session_timeout_ms,
            req.protocol_type,
            list(req.protocols),
            join_token=token,
            last_heartbeat_ms=now_ms,
            is_new=True,
        )
        g.members[member_id] = mem
        if req.group_instance_id is not None:
            g.static_members[req.group_instance_id] = member_id
        if g.protocol_type is None:
            g.protocol_type = req.protocol_type
        if g.leader_id is None:
            g.leader_id = member_id
        g.new_member_added = True
        if g.state in (STABLE, COMPLETING, EMPTY):
            self._prepare_rebalance(g, now_ms, out)
        else:
            self._maybe_complete_join(g, now_ms, out)

    def _update_member(
        self, g: Group[T], mem: Member[T], token: T, req: m.JoinRequest, out: list[Out[T]]
    ) -> None:
        if mem.join_token is not None and mem.join_token is not token:
            out.append(
                Reply(mem.join_token, m.JoinResult(Errors.REBALANCE_IN_PROGRESS, mem.member_id))
            )
        mem.protocol_type = req.protocol_type
        mem.protocols = list(req.protocols)
        mem.rebalance_timeout_ms = req.rebalance_timeout_ms
        mem.session_timeout_ms = req.session_timeout_ms
        mem.join_token = token

    def _join_result(self, g: Group[T], mem: Member[T], with_members: bool) -> m.JoinResult:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if with_members:
            members = tuple(
                (x.member_id, x.group_instance_id, x.metadata(g.protocol_name))
                for x in g.members.values()
            )
        return m.JoinResult(
            Errors.NONE,
            mem.member_id,
            g.generation_id,
            g.protocol_type,
            g.protocol_name,
            g.leader_id or "",
            members,
        )

    # -- rebalance -----------------------------------------------------------------------------

    def _prepare_rebalance(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None:
        if g.state == COMPLETING:
            self._reset_assignments(g, Errors.REBALANCE_IN_PROGRESS, out)
        initial = g.state == EMPTY
        g.transition(PREPARING, now_ms)
        g.awaiting_sync.clear()
        timeout = g.rebalance_timeout_ms()
        if initial and self.config.initial_rebalance_delay_ms > 0:
            # Kafka's InitialDelayedJoin: wait a little for the others of a starting
            # group, extended while new members keep arriving, up to the rebalance timeout.
            delay = min(self.config.initial_rebalance_delay_ms, timeout)
            g.initial_delay = True
            g.initial_delay_left_ms = timeout - delay
            g.new_member_added = False
            g.rebalance_deadline_ms = now_ms + delay
        else:
            g.initial_delay = False
            g.rebalance_deadline_ms = now_ms + timeout
        self._maybe_complete_join(g, now_ms, out)

    def _maybe_complete_join(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None:
        if g.state == PREPARING and not g.initial_delay and g.all_joined():
            self._complete_join(g, now_ms, out)

    def _complete_join(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None:
        for mem in list(g.members.values()):
            if not mem.awaiting_join:  # did not rejoin in time
                self._remove_member(g, mem, out, "did not rejoin in time")
        g.initial_delay = False
        g.generation_id += 1
        if g.is_empty():
            g.protocol_name = None
            g.leader_id = None
            g.transition(EMPTY, now_ms)
            out.append(self._store_group(g, lambda code, _now: []))
            return
        g.protocol_name = g.select_protocol()
        if g.leader_id not in g.members:
            g.leader_id = next(iter(g.members))
        g.transition(COMPLETING, now_ms)
        g.rebalance_deadline_ms = now_ms + g.rebalance_timeout_ms()
        g.awaiting_sync = set(g.members)
        for mem in g.members.values():
            mem.join_answer, mem.join_token = mem.join_token, None
            mem.is_new = False
            mem.last_heartbeat_ms = now_ms
            mem.assignment = b""
        generation = g.generation_id

        # The new generation is stored before anyone hears of it (Kafka stores it only
        # with the assignment): a coordinator that takes over then never hands out a
        # generation id again, and a group loaded without assignments rebalances.
        def stored(code: int, now: int) -> list[Out[T]]:
            done: list[Out[T]] = []
            if self.groups.get(g.group_id) is not g or g.generation_id != generation:
                return done
            if code != Errors.NONE:
                for x in g.members.values():
                    self._fail_waiting(x, m.write_error(code, offsets=False), done)
                if g.state == COMPLETING:
                    self._prepare_rebalance(g, now, done)
                return done
            for x in g.members.values():
                if x.join_answer is not None:
                    result = self._join_result(g, x, x.member_id == g.leader_id)
                    done.append(Reply(x.join_answer, result))
                    x.join_answer = None
            return done

        out.append(self._store_group(g, stored))

    def _remove_member(
        self, g: Group[T], mem: Member[T], out: list[Out[T]], why: str = "left"
    ) -> None:
        log.info("group %s: member %s removed (%s)", g.group_id, mem.member_id, why)
        self._fail_waiting(mem, Errors.UNKNOWN_MEMBER_ID, out)
        g.members.pop(mem.member_id, None)
        g.awaiting_sync.discard(mem.member_id)
        instance = mem.group_instance_id
        if instance is not None and g.static_members.get(instance) == mem.member_id:
            del g.static_members[instance]
        if g.leader_id == mem.member_id:
            g.leader_id = next(iter(g.members), None)

    def _member_gone(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None:
        """After members left or expired: rebalance, or finish the join phase."""
        if g.state in (STABLE, COMPLETING):
            self._prepare_rebalance(g, now_ms, out)
        else:
            self._maybe_complete_join(g, now_ms, out)

    @staticmethod
    def _fail_waiting(mem: Member[Any], code: int, out: list[Out[Any]]) -> None:
        for token in (mem.join_token, mem.join_answer):
            if token is not None:
                out.append(Reply(token, m.JoinResult(code, mem.member_id)))
        mem.join_token = mem.join_answer = None
        if mem.sync_token is not None:
            out.append(Reply(mem.sync_token, m.SyncResult(code)))
            mem.sync_token = None

    # -- Heartbeat, LeaveGroup -----------------------------------------------------------------

    def heartbeat(
        self,
        token: T,
        group_id: str,
        member_id: str,
        instance: str | None,
        generation_id: int,
        now_ms: int,
    ) -> list[Out[T]]:
        code = self.check(group_id)
        g = self.groups.get(group_id)
        if code != Errors.NONE:
            pass
        elif g is None or g.state == EMPTY:
            code = Errors.UNKNOWN_MEMBER_ID
        elif (code := g.member_error(member_id, instance)) != Errors.NONE:
            pass
        elif generation_id != g.generation_id:
            code = Errors.ILLEGAL_GENERATION
        else:
            g.members[member_id].last_heartbeat_ms = now_ms
            code = Errors.REBALANCE_IN_PROGRESS if g.state == PREPARING else Errors.NONE
        return [Reply(token, code)]

    def leave(
        self,
        token: T,
        group_id: str,
        members: list[tuple[str, str | None]],
        now_ms: int,
    ) -> list[Out[T]]:
        """LeaveGroup: (member id, instance id) pairs; v0-v2 send one with no instance."""
        if (code := self.check(group_id)) != Errors.NONE:
            return [Reply(token, m.LeaveResult(code))]
        g = self.groups.get(group_id)
        out: list[Out[T]] = []
        results: list[tuple[str, str | None, int]] = []
        removed = False
        for member_id, instance in members:
            if g is None:
                results.append((member_id, instance, Errors.UNKNOWN_MEMBER_ID))
                continue
            if instance is not None:
                known = g.static_members.get(instance)
                if known is None:
                    code = Errors.UNKNOWN_MEMBER_ID
                elif member_id and member_id != known:
                    code = Errors.FENCED_INSTANCE_ID
                else:
                    self._remove_member(g, g.members[known], out)
                    removed, code = True, Errors.NONE
            elif g.pending_members.pop(member_id, None) is not None:
                code = Errors.NONE
            elif (mem := g.members.get(member_id)) is not None and mem.group_instance_id is None:
                self._remove_member(g, mem, out)
                removed, code = True, Errors.NONE
            else:
                code = Errors.UNKNOWN_MEMBER_ID if mem is None else Errors.FENCED_INSTANCE_ID
            results.append((member_id, instance, code))
        if g is not None and (removed or g.state == PREPARING):
            self._member_gone(g, now_ms, out)
        out.append(Reply(token, m.LeaveResult(Errors.NONE, tuple(results))))
        return out

    # -- records -------------------------------------------------------------------------------

    def _store_group(self, g: Group[T], then: Callable[[int, int], list[Out[T]]]) -> Append:
        return self._append(g.partition, [self.group_record(g)], then)
