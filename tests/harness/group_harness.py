"""A driver for the sans-I/O group coordinator core in tests: it keeps the answers by
token, a per-partition log of what the core appended, and can fail or hold appends."""

from __future__ import annotations

import itertools
from typing import Any

from broker.group import messages as m
from broker.group.config import GroupConfig
from broker.group.coordinator import GroupCoordinatorCore
from broker.group.messages import Append, Out, Reply
from common.errors import Errors

PROTOCOL = [("range", b"\x00\x01\x00\x00\x00\x01\x00\x01t")]  # subscribes to topic "t"


class Harness:
    def __init__(self, partitions: int = 4, **config: Any) -> None:
        ids = itertools.count(1)
        config.setdefault("initial_rebalance_delay_ms", 0)
        self.core: GroupCoordinatorCore[str] = GroupCoordinatorCore(
            GroupConfig(num_partitions=partitions, **config),
            new_member_id=lambda prefix: f"{prefix}-{next(ids)}",
        )
        self.now = 0
        self.answers: dict[str, object] = {}
        # Per partition, what was appended: plain records as (key, value), transactional
        # ones as LoadedRecord, markers as TxnMarker; a record's position is its index.
        self.log: dict[int, list[Any]] = {p: [] for p in range(partitions)}
        self.held: list[Append] = []
        self.hold = False  # keep appends in flight until `release`
        self.fail_code = Errors.NONE  # what the next appends end with
        self._tokens = itertools.count(1)
        for p in range(partitions):
            self.core.begin_load(p)
            self.core.load(p, [], 0)

    def token(self, what: str) -> str:
        return f"{what}#{next(self._tokens)}"

    def run(self, outs: list[Out[str]]) -> None:
        for o in outs:
            if isinstance(o, Reply):
                assert o.token not in self.answers, f"{o.token} answered twice"
                self.answers[o.token] = o.result
            elif self.hold:
                self.held.append(o)
            else:
                self.complete(o, self.fail_code)

    def complete(self, a: Append, code: int) -> None:
        log = self.log[a.partition]
        base = len(log)
        if code == Errors.NONE:
            if a.producer_id >= 0:
                log.extend(m.LoadedRecord(k, v, base, a.producer_id) for k, v in a.records)
            else:
                log.extend(a.records)
        self.run(self.core.on_append_done(a.write_id, code, self.now, base))

    def marker(self, partition: int, producer_id: int, committed: bool) -> None:
        """The transaction coordinator's marker lands on an offsets partition."""
        self.log[partition].append(m.TxnMarker(producer_id, committed))
        self.run(self.core.on_txn_marker(partition, producer_id, committed))

    def release(self, code: int = Errors.NONE) -> None:
        held, self.held = self.held, []
        for a in held:
            self.complete(a, code)

    # -- requests ----------------------------------------------------------------------------

    def join(
        self,
        group: str,
        member_id: str = "",
        instance: str | None = None,
        protocols: list[tuple[str, bytes]] | None = None,
        session_ms: int = 10_000,
        rebalance_ms: int = 30_000,
        v4: bool = True,
        v9: bool = False,
    ) -> str:
        t = self.token("join")
        req = m.JoinRequest(
            group,
            member_id,
            instance,
            "client",
            "/127.0.0.1",
            session_ms,
            rebalance_ms,
            "consumer",
            PROTOCOL if protocols is None else protocols,
            v4,
            v9,
        )
        self.run(self.core.join(t, req, self.now))
        return t

    def join_until_member(self, group: str, **kw: Any) -> tuple[str, str]:
        """KIP-394: the first join answers MEMBER_ID_REQUIRED with the id; join again."""
        t = self.join(group, **kw)
        first = self.answers[t]
        assert isinstance(first, m.JoinResult)
        if first.error_code != Errors.MEMBER_ID_REQUIRED:
            return t, first.member_id
        return self.join(group, member_id=first.member_id, **kw), first.member_id

    def sync(
        self,
        group: str,
        member_id: str,
        generation: int,
        assignments: list[tuple[str, bytes]] | None = None,
        instance: str | None = None,
    ) -> str:
        t = self.token("sync")
        req = m.SyncRequest(
            group, generation, member_id, instance, "consumer", None, assignments or []
        )
        self.run(self.core.sync(t, req, self.now))
        return t

    def heartbeat(
        self, group: str, member_id: str, generation: int, instance: str | None = None
    ) -> int:
        t = self.token("hb")
        self.run(self.core.heartbeat(t, group, member_id, instance, generation, self.now))
        code = self.answers[t]
        assert isinstance(code, int)
        return code

    def leave(self, group: str, *members: tuple[str, str | None]) -> m.LeaveResult:
        t = self.token("leave")
        self.run(self.core.leave(t, group, list(members), self.now))
        r = self.answers[t]
        assert isinstance(r, m.LeaveResult)
        return r

    def commit(
        self,
        group: str,
        member_id: str,
        generation: int,
        offsets: dict[tuple[str, int], int],
        instance: str | None = None,
    ) -> str:
        t = self.token("commit")
        req = m.CommitRequest(
            group,
            generation,
            member_id,
            instance,
            [m.OffsetCommit(tp[0], tp[1], off, -1, "") for tp, off in offsets.items()],
        )
        self.run(self.core.commit(t, req, self.now))
        return t

    def txn_commit(
        self,
        group: str,
        producer_id: int,
        offsets: dict[tuple[str, int], int],
        member_id: str = "",
        generation: int = -1,
        epoch: int = 0,
    ) -> str:
        t = self.token("txn-commit")
        req = m.TxnCommitRequest(
            "txn",
            group,
            producer_id,
            epoch,
            generation,
            member_id,
            None,
            [m.OffsetCommit(tp[0], tp[1], off, -1, "") for tp, off in offsets.items()],
        )
        self.run(self.core.txn_commit(t, req, self.now))
        return t

    def tick(self, ms: int) -> None:
        self.now += ms
        self.run(self.core.tick(self.now))

    def move(self, partition: int) -> int:
        """The coordinator moves away and back: unload, then load from the log."""
        self.run(self.core.unload(partition))
        self.run(self.core.begin_load(partition))
        return self.core.load(partition, self.log[partition], self.now)
