"""The transaction coordinator, sans I/O (Kafka's TransactionCoordinator and
TransactionStateManager, transaction.version 0/1: no per-transaction epoch bump).

Each request comes in with an opaque token and `now_ms`; the core returns intents:
`Reply(token, result)`, `Append(...)` (a record for `__transaction_state`; the shell
appends it with acks=all and reports `on_append_done`) and `SendMarkers(...)` (the
shell writes the markers to the partitions' leaders and reports `on_markers_done`).
`tick(now_ms)` aborts transactions past their timeout (with an epoch bump, which fences
the producer) and expires idle transactional ids.

A transition is written before it is applied: the metadata carries the pending state
meanwhile, and requests racing it answer CONCURRENT_TRANSACTIONS. EndTxn answers once
PrepareCommit/PrepareAbort is written; the markers follow, then CompleteCommit/Abort.

The coordinator of a transactional id is the leader of partition `partition_for(id)` of
`__transaction_state`; the coordinator epoch written into the markers is that
partition's leader epoch.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from broker.group.config import partition_for
from broker.group.messages import write_error
from broker.group.records import RecordFormatError
from broker.txn import records as rec
from broker.txn.listing import ListingMixin
from broker.txn.messages import (
    Append,
    InitResult,
    Out,
    Reply,
    SendMarkers,
    TxnConfig,
)
from broker.txn.parking import ParkedRequests
from broker.txn.state import (
    COMPLETED,
    NO_PRODUCER_EPOCH,
    TransactionMetadata,
    TransactionState,
    TxnTransit,
    epoch_exhausted,
)
from common.errors import Errors

T = TypeVar("T")
S = TransactionState
TP = tuple[str, int]
Then = Callable[[int, int], list[Out[T]]]


class TransactionCoordinatorCore(ListingMixin, Generic[T]):
    def __init__(
        self,
        config: TxnConfig,
        take_producer_id: Callable[[], int | None],
        offsets_partition_for: Callable[[str], TP],
    ) -> None:
        self.config = config
        self.num_partitions = config.num_partitions  # the topic's own count once it exists
        self._take_pid = take_producer_id  # None: no producer id at hand right now
        self._offsets_partition_for = offsets_partition_for
        self.txns: dict[str, TransactionMetadata] = {}
        # partition -> (coordinator epoch, loaded); absent: not ours
        self.owned: dict[int, tuple[int, bool]] = {}
        self._load_gen: dict[int, int] = {}  # bumped on load/unload: stale writes fail
        self._gens = itertools.count(1)
        self._writes: dict[int, Callable[[int, int], list[Out[T]]]] = {}
        self._write_ids = itertools.count(1)
        self._next_abort_ms: int | None = None
        self._next_expire_ms: int | None = None
        self._retry_complete: dict[str, tuple[int, int, int]] = {}  # markers written
        # AddPartitions/AddOffsets waiting for the producer's last transaction to complete
        self.parked: ParkedRequests[Out[T]] = ParkedRequests()

    # -- ownership -----------------------------------------------------------------------------

    def partition_for(self, transactional_id: str) -> int:
        return partition_for(transactional_id, self.num_partitions)

    def check(self, transactional_id: str | None) -> int:
        if not transactional_id:
            return Errors.INVALID_REQUEST
        owned = self.owned.get(self.partition_for(transactional_id))
        if owned is None:
            return Errors.NOT_COORDINATOR
        return Errors.NONE if owned[1] else Errors.COORDINATOR_LOAD_IN_PROGRESS

    def coordinator_epoch(self, partition: int) -> int:
        return self.owned[partition][0]

    def begin_load(self, partition: int, coordinator_epoch: int) -> list[Out[T]]:
        out = self.unload(partition)
        self.owned[partition] = (coordinator_epoch, False)
        return out

    def load(
        self, partition: int, records: Iterable[tuple[bytes | None, bytes | None]], now_ms: int
    ) -> tuple[list[Out[T]], int]:
        """The partition's records, oldest first: the last value of each id wins, a
        tombstone forgets it. Transactions caught between Prepare and Complete get their
        markers sent again (as Kafka's coordinator does on failover). Returns the intents
        and how many records did not read."""
        owned = self.owned.get(partition)
        if owned is None:
            return [], 0
        bad = 0
        latest: dict[str, rec.TxnLogValue | None] = {}
        for key, value in records:
            try:
                tid = rec.decode_key(key or b"")
                latest[tid] = None if value is None else rec.decode_value(value)
            except (RecordFormatError, UnicodeDecodeError):
                bad += 1
        for tid, v in latest.items():
            if v is None or v.state == S.DEAD:
                self.txns.pop(tid, None)
                continue
            self.txns[tid] = TransactionMetadata(
                tid, v.producer_id, v.previous_producer_id, v.producer_epoch, NO_PRODUCER_EPOCH,
                v.timeout_ms, v.state, set(v.partitions), v.start_ms, v.last_update_ms,
            )  # fmt: skip
        self.owned[partition] = (owned[0], True)
        self._schedule(now_ms)
        out: list[Out[T]] = []
        for tid, md in self.txns.items():
            if self.partition_for(tid) == partition and md.state in (
                S.PREPARE_COMMIT,
                S.PREPARE_ABORT,
            ):
                out.append(self._markers(md, md.state == S.PREPARE_COMMIT))
        return out, bad

    def unload(self, partition: int) -> list[Out[T]]:
        """We no longer lead the partition: its transactions leave memory (the new
        coordinator loads them and finishes what was in flight)."""
        out: list[Out[T]] = []
        for tid in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[tid]
            self._retry_complete.pop(tid, None)
            out += self.parked.refuse(tid, Errors.NOT_COORDINATOR)
        self.owned.pop(partition, None)
        self._load_gen[partition] = next(self._gens)
        return out

    # -- log writes ----------------------------------------------------------------------------

    def _write(self, md: TransactionMetadata, t: TxnTransit, then: Then[T]) -> Append:
        """Append the transition; on success apply it, then run `then(code, now)`."""
        partition = self.partition_for(md.transactional_id)
        gen = self._load_gen.get(partition)
        md.pending = t.state
        write_id = next(self._write_ids)

        def done(code: int, now_ms: int) -> list[Out[T]]:
            if self._load_gen.get(partition) != gen:
                return then(Errors.NOT_COORDINATOR, now_ms)  # moved meanwhile: not ours
            if code != Errors.NONE:
                md.pending = None
                return then(write_error(code, False), now_ms)
            if t.state == S.DEAD:
                self.txns.pop(md.transactional_id, None)
            else:
                md.apply(t)
            return then(Errors.NONE, now_ms)

        self._writes[write_id] = done
        if t.state == S.DEAD:
            value = None
        else:
            value = rec.encode_value(
                rec.TxnLogValue(
                    t.producer_id, t.producer_epoch, t.timeout_ms, t.state,
                    tuple(sorted(t.partitions)), t.update_ms, t.start_ms,
                )
            )  # fmt: skip
        return Append(write_id, partition, ((rec.encode_key(md.transactional_id), value),))

    def on_append_done(self, write_id: int, error_code: int, now_ms: int) -> list[Out[T]]:
        done = self._writes.pop(write_id, None)
        return done(error_code, now_ms) if done is not None else []

    # -- InitProducerId ------------------------------------------------------------------------

    def init_producer_id(
        self,
        token: T,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int,
        expected_epoch: int,
        now_ms: int,
    ) -> list[Out[T]]:
        def reply(code: int, pid: int = -1, epoch: int = -1) -> list[Out[T]]:
            return [Reply(token, InitResult(code, pid, epoch))]

        if not transactional_id:
            return reply(Errors.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return reply(Errors.INVALID_TRANSACTION_TIMEOUT)
        if (code := self.check(transactional_id)) != Errors.NONE:
            return reply(code)
        expected = expected_producer_id >= 0 or expected_epoch >= 0
        md = self.txns.get(transactional_id)
        if md is None:
            pid = self._take_pid()
            if pid is None:
                return reply(Errors.COORDINATOR_LOAD_IN_PROGRESS)  # Kafka's answer meanwhile
            md = TransactionMetadata(
                transactional_id, pid, -1, NO_PRODUCER_EPOCH, NO_PRODUCER_EPOCH, timeout_ms,
                S.EMPTY, set(), -1, now_ms,
            )  # fmt: skip
            self.txns[transactional_id] = md
        if md.pending is not None:
            return reply(Errors.CONCURRENT_TRANSACTIONS)
        if expected and not (
            md.producer_epoch == NO_PRODUCER_EPOCH
            or expected_producer_id == md.producer_id
            or (expected_producer_id == md.last_producer_id and epoch_exhausted(expected_epoch))
        ):
            return reply(Errors.PRODUCER_FENCED)
        if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return reply(Errors.CONCURRENT_TRANSACTIONS)
        if md.state == S.ONGOING:
            # Fence the current producer (epoch bump) and abort its transaction; the
            # client retries until the abort is complete.
            def after_abort(code: int, _now: int) -> list[Out[T]]:
                return reply(Errors.CONCURRENT_TRANSACTIONS if code == Errors.NONE else code)

            return self._abort_fenced(md, now_ms, after_abort)
        if md.state not in COMPLETED:
            return reply(Errors.UNKNOWN_SERVER_ERROR)
        if expected and expected_producer_id == md.last_producer_id != md.producer_id:
            # A retry of an InitProducerId that rotated the producer id.
            return reply(Errors.NONE, md.producer_id, md.producer_epoch)
        if epoch_exhausted(md.producer_epoch):
            pid = self._take_pid()
            if pid is None:
                return reply(Errors.COORDINATOR_LOAD_IN_PROGRESS)
            t = md.transit(
                producer_id=pid, last_producer_id=md.producer_id, producer_epoch=0,
                last_producer_epoch=md.producer_epoch, timeout_ms=timeout_ms, state=S.EMPTY,
                partitions=frozenset(), start_ms=-1, update_ms=now_ms,
            )  # fmt: skip
        else:
            bumped = md.producer_epoch + 1
            if not expected or md.producer_epoch in (NO_PRODUCER_EPOCH, expected_epoch):
                epoch, last = bumped, (md.producer_epoch if expected else NO_PRODUCER_EPOCH)
            elif expected_epoch == md.last_producer_epoch:
                epoch, last = md.producer_epoch, md.last_producer_epoch  # a retry: no bump
            else:
                return reply(Errors.PRODUCER_FENCED)
            t = md.transit(
                producer_epoch=epoch, last_producer_epoch=last, timeout_ms=timeout_ms,
                state=S.EMPTY, partitions=frozenset(), start_ms=-1, update_ms=now_ms,
            )  # fmt: skip

        def answered(code: int, _now: int) -> list[Out[T]]:
            if code != Errors.NONE:
                return reply(code)
            return reply(Errors.NONE, t.producer_id, t.producer_epoch)

        return [self._write(md, t, answered)]

    def _abort_fenced(self, md: TransactionMetadata, now_ms: int, then: Then[T]) -> list[Out[T]]:
        """Kafka's prepareFenceProducerEpoch + abort: PrepareAbort at epoch + 1 (kept at
        the last epoch when exhausted), then the markers at that epoch."""
        epoch = md.producer_epoch if epoch_exhausted(md.producer_epoch) else md.producer_epoch + 1
        t = md.transit(
            producer_epoch=epoch, last_producer_epoch=md.producer_epoch, state=S.PREPARE_ABORT,
            update_ms=now_ms,
        )  # fmt: skip
        return self._prepare(md, t, False, then)

    def _prepare(self, md: TransactionMetadata, t: TxnTransit, commit: bool, then: Then[T]):
        def prepared(code: int, now: int) -> list[Out[T]]:
            out = then(code, now)
            if code == Errors.NONE:
                out.append(self._markers(md, commit))
            return out

        return [self._write(md, t, prepared)]

    def _markers(self, md: TransactionMetadata, commit: bool) -> SendMarkers:
        epoch = self.coordinator_epoch(self.partition_for(md.transactional_id))
        return SendMarkers(
            md.transactional_id, md.producer_id, md.producer_epoch, commit, epoch,
            tuple(sorted(md.partitions)),
        )  # fmt: skip

    def on_markers_done(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        written: bool,
        now_ms: int,
    ) -> list[Out[T]]:
        """Every marker is written (or the send was abandoned): CompleteCommit/Abort."""
        md = self.txns.get(transactional_id)
        if (
            not written
            or md is None
            or md.pending is not None
            or (md.producer_id, md.producer_epoch) != (producer_id, producer_epoch)
            or md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        ):
            return []
        p = self.partition_for(transactional_id)
        if self.owned.get(p, (None,))[0] != coordinator_epoch:
            return []  # another coordinator epoch: that one completes it
        state = S.COMPLETE_COMMIT if md.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        t = md.transit(state=state, partitions=frozenset(), update_ms=now_ms)

        def completed(code: int, now: int) -> list[Out[T]]:
            if code == Errors.COORDINATOR_NOT_AVAILABLE:  # retriable: again at the next tick
                self._retry_complete[transactional_id] = (
                    producer_id, producer_epoch, coordinator_epoch,
                )  # fmt: skip
            # Complete (or not): the requests that waited for it run again now.
            return self.parked.release(transactional_id, now)

        return [self._write(md, t, completed)]

    # -- AddPartitionsToTxn, AddOffsetsToTxn ---------------------------------------------------

    def _check_producer(
        self, transactional_id: str, producer_id: int, epoch: int
    ) -> tuple[int, TransactionMetadata | None]:
        if (code := self.check(transactional_id)) != Errors.NONE:
            return code, None
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return Errors.INVALID_PRODUCER_ID_MAPPING, None
        if md.producer_epoch != epoch:
            return Errors.PRODUCER_FENCED, None
        if md.pending is not None or md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return Errors.CONCURRENT_TRANSACTIONS, None
        return Errors.NONE, md

    def add_partitions(
        self,
        token: T,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TP],
        now_ms: int,
    ) -> list[Out[T]]:
        """Reply: {partition: error code}."""
        return self._add(token, transactional_id, producer_id, epoch, partitions, now_ms, False)

    def _add(
        self, token: T, transactional_id: str, producer_id: int, epoch: int,
        partitions: Iterable[TP], now_ms: int, one_code: bool,
    ) -> list[Out[T]]:  # fmt: skip
        parts = frozenset(partitions)

        def reply(code: int) -> list[Out[T]]:
            return [Reply(token, code if one_code else dict.fromkeys(parts, code))]

        code, md = self._check_producer(transactional_id, producer_id, epoch)
        completing = self.txns.get(transactional_id)
        if (
            code == Errors.CONCURRENT_TRANSACTIONS
            and completing is not None
            and completing.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT)
        ):
            # The next transaction's first request, while the last one writes its
            # markers: wait for it to complete rather than send the client to back off.
            self.parked.park(
                transactional_id, now_ms,
                lambda now: self._add(token, transactional_id, producer_id, epoch, parts, now,
                                      one_code),
                lambda c: reply(c),
            )  # fmt: skip
            return []
        if md is None:
            return reply(code)
        if md.state == S.ONGOING and parts <= md.partitions:
            return reply(Errors.NONE)  # nothing new: no write
        start = md.start_ms if md.state == S.ONGOING else now_ms
        t = md.transit(
            state=S.ONGOING, partitions=frozenset(md.partitions | parts), start_ms=start,
            update_ms=now_ms,
        )  # fmt: skip
        return [self._write(md, t, lambda c, _now: reply(c))]

    def verify_partitions(
        self,
        token: T,
        transactional_id: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TP],
    ) -> list[Out[T]]:
        """AddPartitionsToTxn v4 verify_only (KIP-890 part 1): is each partition in the
        producer's ongoing transaction? Nothing is written."""
        parts = list(partitions)
        code = self.check(transactional_id)
        md = self.txns.get(transactional_id) if code == Errors.NONE else None
        if code == Errors.NONE and (md is None or md.producer_id != producer_id):
            code = Errors.INVALID_PRODUCER_ID_MAPPING
        elif md is not None and md.producer_epoch != epoch:
            code = Errors.PRODUCER_FENCED
        if code != Errors.NONE or md is None:
            return [Reply(token, dict.fromkeys(parts, code))]
        ongoing = md.state == S.ONGOING
        result = {
            tp: Errors.NONE if ongoing and tp in md.partitions else Errors.INVALID_TXN_STATE
            for tp in parts
        }
        return [Reply(token, result)]

    def add_offsets(
        self, token: T, transactional_id: str, producer_id: int, epoch: int, group_id: str,
        now_ms: int,
    ) -> list[Out[T]]:  # fmt: skip
        """The group's `__consumer_offsets` partition joins the transaction; reply: code."""
        tp = self._offsets_partition_for(group_id)
        return self._add(token, transactional_id, producer_id, epoch, [tp], now_ms, True)

    # -- EndTxn --------------------------------------------------------------------------------

    def end_txn(
        self, token: T, transactional_id: str, producer_id: int, epoch: int, commit: bool,
        now_ms: int,
    ) -> list[Out[T]]:  # fmt: skip
        def reply(code: int) -> list[Out[T]]:
            return [Reply(token, code)]

        if (code := self.check(transactional_id)) != Errors.NONE:
            return reply(code)
        md = self.txns.get(transactional_id)
        if md is None or md.producer_id != producer_id:
            return reply(Errors.INVALID_PRODUCER_ID_MAPPING)
        if md.producer_epoch != epoch:
            return reply(Errors.PRODUCER_FENCED)
        if md.pending is not None:
            return reply(Errors.CONCURRENT_TRANSACTIONS)
        state = md.state
        if state == S.ONGOING:
            t = md.transit(state=S.PREPARE_COMMIT if commit else S.PREPARE_ABORT, update_ms=now_ms)
            return self._prepare(md, t, commit, lambda c, _now: reply(c))
        done, prepare = (
            (S.COMPLETE_COMMIT, S.PREPARE_COMMIT) if commit else (S.COMPLETE_ABORT, S.PREPARE_ABORT)
        )
        if state == done:
            return reply(Errors.NONE)  # a retry of the EndTxn that completed it
        if state == prepare:
            return reply(Errors.CONCURRENT_TRANSACTIONS)
        return reply(Errors.INVALID_TXN_STATE)

    # -- timers --------------------------------------------------------------------------------

    def _schedule(self, now_ms: int) -> None:
        if self._next_abort_ms is None:
            self._next_abort_ms = now_ms + self.config.abort_check_interval_ms
        if self._next_expire_ms is None:
            self._next_expire_ms = now_ms + self.config.remove_check_interval_ms

    def next_deadline_ms(self) -> int | None:
        ds = [
            d
            for d in (self._next_abort_ms, self._next_expire_ms, self.parked.next_deadline_ms())
            if d is not None
        ]
        return min(ds) if ds else None

    def tick(self, now_ms: int) -> list[Out[T]]:
        out: list[Out[T]] = self.parked.expire(now_ms, Errors.CONCURRENT_TRANSACTIONS)
        self._schedule(now_ms)
        for tid, (pid, epoch, ce) in list(self._retry_complete.items()):
            del self._retry_complete[tid]
            out += self.on_markers_done(tid, pid, epoch, ce, True, now_ms)
        if self._next_abort_ms is not None and now_ms >= self._next_abort_ms:
            self._next_abort_ms = now_ms + self.config.abort_check_interval_ms
            out += self.abort_timed_out(now_ms)
        if self._next_expire_ms is not None and now_ms >= self._next_expire_ms:
            self._next_expire_ms = now_ms + self.config.remove_check_interval_ms
            out += self.expire_ids(now_ms)
        return out

    def abort_timed_out(self, now_ms: int) -> list[Out[T]]:
        """Ongoing transactions past their timeout are aborted with an epoch bump."""
        out: list[Out[T]] = []
        for tid, md in list(self.txns.items()):
            if self.check(tid) != Errors.NONE or md.pending is not None:
                continue
            if md.state == S.ONGOING and md.start_ms + md.timeout_ms < now_ms:
                out += self._abort_fenced(md, now_ms, lambda _c, _now: [])
        return out

    def expire_ids(self, now_ms: int) -> list[Out[T]]:
        """Transactional ids idle past transactional.id.expiration.ms are tombstoned."""
        out: list[Out[T]] = []
        for tid, md in list(self.txns.items()):
            if self.check(tid) != Errors.NONE or md.pending is not None:
                continue
            if md.state in COMPLETED and md.update_ms + self.config.id_expiration_ms <= now_ms:
                out.append(self._write(md, md.transit(state=S.DEAD), lambda _c, _now: []))
        return out
