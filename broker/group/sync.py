"""SyncGroup (a mixin of `GroupCoordinatorCore`): the members of a completed join
phase ask for their assignment; the leader's request carries everyone's. The
assignment is stored in `__consumer_offsets` before anyone is answered, so a
coordinator that moves hands out the same one (Kafka's GroupCoordinator.doSyncGroup)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from broker.group import messages as m
from broker.group.group import Group, GroupState
from broker.group.messages import Append, Out, Reply
from common.errors import Errors

T = TypeVar("T")

PREPARING, COMPLETING, STABLE = (
    GroupState.PREPARING_REBALANCE,
    GroupState.COMPLETING_REBALANCE,
    GroupState.STABLE,
)


class SyncMixin(Generic[T]):
    groups: dict[str, Group[T]]

    if TYPE_CHECKING:

        def check(self, group_id: str) -> int: ...
        def _prepare_rebalance(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None: ...
        def _store_group(self, g: Group[T], then: Callable[[int, int], list[Out[T]]]) -> Append: ...

    def sync(self, token: T, req: m.SyncRequest, now_ms: int) -> list[Out[T]]:
        def fail(code: int) -> list[Out[T]]:
            return [Reply(token, m.SyncResult(code))]

        if (code := self.check(req.group_id)) != Errors.NONE:
            return fail(code)
        g = self.groups.get(req.group_id)
        if g is None:
            return fail(Errors.UNKNOWN_MEMBER_ID)
        if (code := g.member_error(req.member_id, req.group_instance_id)) != Errors.NONE:
            return fail(code)
        mem = g.members[req.member_id]
        if req.generation_id != g.generation_id:
            return fail(Errors.ILLEGAL_GENERATION)
        if (req.protocol_type is not None and req.protocol_type != g.protocol_type) or (
            req.protocol_name is not None and req.protocol_name != g.protocol_name
        ):
            return fail(Errors.INCONSISTENT_GROUP_PROTOCOL)
        if g.state == PREPARING:
            return fail(Errors.REBALANCE_IN_PROGRESS)
        if g.state != COMPLETING and g.state != STABLE:
            return fail(Errors.UNKNOWN_MEMBER_ID)
        mem.last_heartbeat_ms = now_ms
        g.awaiting_sync.discard(mem.member_id)
        if g.state == STABLE:
            return [Reply(token, self._sync_result(g, mem.assignment))]
        out: list[Out[T]] = []
        if mem.sync_token is not None:
            out.append(Reply(mem.sync_token, m.SyncResult(Errors.REBALANCE_IN_PROGRESS)))
        mem.sync_token = token
        if mem.member_id == g.leader_id:
            assignment = dict(req.assignments)
            generation = g.generation_id
            for x in g.members.values():
                x.assignment = assignment.get(x.member_id, b"")

            def stored(code: int, now: int) -> list[Out[T]]:
                done: list[Out[T]] = []
                if g.state != COMPLETING or g.generation_id != generation:
                    return done  # a newer rebalance took over; it answered the waiters
                if self.groups.get(g.group_id) is not g:
                    return done
                if code != Errors.NONE:
                    self._reset_assignments(g, m.write_error(code, offsets=False), done)
                    self._prepare_rebalance(g, now, done)
                    return done
                g.transition(STABLE, now)
                for x in g.members.values():
                    if x.sync_token is not None:
                        done.append(Reply(x.sync_token, self._sync_result(g, x.assignment)))
                        x.sync_token = None
                return done

            out.append(self._store_group(g, stored))
        return out

    @staticmethod
    def _sync_result(g: Group[Any], assignment: bytes) -> m.SyncResult:
        return m.SyncResult(Errors.NONE, g.protocol_type, g.protocol_name, assignment)

    def _reset_assignments(self, g: Group[T], code: int, out: list[Out[T]]) -> None:
        for mem in g.members.values():
            mem.assignment = b""
            if mem.sync_token is not None:
                out.append(Reply(mem.sync_token, m.SyncResult(code)))
                mem.sync_token = None
