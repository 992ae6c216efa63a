"""The group coordinator core's timers (a mixin of `GroupCoordinatorCore`): session
expiry, the end of the join phase (and Kafka's initial delay), the sync deadline,
KIP-394 pending members, and the periodic offset retention check."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar

from broker.group.group import Group, GroupState, Member
from broker.group.messages import Out

if TYPE_CHECKING:
    from broker.group.config import GroupConfig

T = TypeVar("T")
PREPARING = GroupState.PREPARING_REBALANCE


class TimersMixin(Generic[T]):
    config: GroupConfig
    groups: dict[str, Group[T]]
    owned: dict[int, bool]
    _next_expiry_ms: int | None

    if TYPE_CHECKING:

        def _complete_join(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None: ...
        def _remove_member(
            self, g: Group[T], mem: Member[T], out: list[Out[T]], why: str = "left"
        ) -> None: ...
        def _member_gone(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None: ...
        def expire_offsets(self, now_ms: int) -> list[Out[T]]: ...

    def tick(self, now_ms: int) -> list[Out[T]]:
        out: list[Out[T]] = []
        for g in list(self.groups.values()):
            if self.owned.get(g.partition) is not True:
                continue
            self._expire_members(g, now_ms, out)
            if g.state == PREPARING and now_ms >= g.rebalance_deadline_ms:
                if g.initial_delay and g.new_member_added and g.initial_delay_left_ms > 0:
                    step = min(self.config.initial_rebalance_delay_ms, g.initial_delay_left_ms)
                    g.initial_delay_left_ms -= step
                    g.new_member_added = False
                    g.rebalance_deadline_ms = now_ms + step
                else:
                    g.initial_delay = False
                    self._complete_join(g, now_ms, out)
            elif g.awaiting_sync and now_ms >= g.rebalance_deadline_ms:
                # Members that got their JoinGroup answer but never synced (Kafka 2.8+).
                for member_id in list(g.awaiting_sync):
                    if (mem := g.members.get(member_id)) is not None:
                        self._remove_member(g, mem, out, "no SyncGroup before the deadline")
                g.awaiting_sync.clear()
                self._member_gone(g, now_ms, out)
        if self._next_expiry_ms is None:
            self._next_expiry_ms = now_ms + self.config.retention_check_interval_ms
        elif now_ms >= self._next_expiry_ms:
            self._next_expiry_ms = now_ms + self.config.retention_check_interval_ms
            out += self.expire_offsets(now_ms)
        return out

    def _expire_members(self, g: Group[T], now_ms: int, out: list[Out[T]]) -> None:
        gone = False
        for member_id, deadline in list(g.pending_members.items()):
            if now_ms >= deadline:
                del g.pending_members[member_id]
                gone = True
        for mem in list(g.members.values()):
            if not self._keep_alive(g, mem, now_ms):
                self._remove_member(g, mem, out, "session expired")
                gone = True
        if gone:
            self._member_gone(g, now_ms, out)

    def _keep_alive(self, g: Group[T], mem: Member[T], now_ms: int) -> bool:
        """Kafka's MemberMetadata.shouldKeepAlive: a member waiting in the join phase
        lives until the join phase ends (a brand-new one at most the new-member
        timeout); one that owes a SyncGroup until the sync deadline; the others as long
        as they heartbeat within their session timeout."""
        if mem.awaiting_join:
            return not mem.is_new or (
                now_ms < mem.last_heartbeat_ms + self.config.new_member_join_timeout_ms
            )
        if mem.sync_token is not None or mem.join_answer is not None:
            return True
        return now_ms < mem.last_heartbeat_ms + mem.session_timeout_ms

    def next_deadline_ms(self) -> int | None:
        """When `tick` next has something to do (for the shell's timer)."""
        times = [] if self._next_expiry_ms is None else [self._next_expiry_ms]
        for g in self.groups.values():
            if g.state == PREPARING or g.awaiting_sync:
                times.append(g.rebalance_deadline_ms)
            times.extend(g.pending_members.values())
            for mem in g.members.values():
                if not mem.awaiting_join and mem.sync_token is None and mem.join_answer is None:
                    times.append(mem.last_heartbeat_ms + mem.session_timeout_ms)
                elif mem.is_new:
                    times.append(mem.last_heartbeat_ms + self.config.new_member_join_timeout_ms)
        return min(times, default=None)
