"""The follower side of a hosted partition (a mixin of `HostedPartition`): what a leader's
fetch answer does to our log (append, truncate on a diverging epoch, restart at the
leader's log start, move the log start) and to our HW. The fetcher (broker/fetcher.py)
sends `fetch_state()` and hands the answer back here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker.fetcher import FollowerData, FollowerFetchState
from broker.producer_state import BatchHeader, CompletedTxn, ProducerStateManager
from common.errors import Errors
from storage.epoch_cache import UNDEFINED_EPOCH
from storage.log import Log
from storage.log_types import UnexpectedAppendOffsetError
from storage.record_batch import RecordBatchError, iter_batches

if TYPE_CHECKING:
    from broker.partition import Partition

log = logging.getLogger("broker.replica_manager")


class FollowerSideMixin:
    # HostedPartition's fields and methods this side uses.
    core: Partition[asyncio.Future[int]]
    log: Log
    producers: ProducerStateManager
    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        def _index(self, completed: Iterable[CompletedTxn]) -> None: ...

        def reload_producers(self) -> None: ...

    def fetch_state(self) -> FollowerFetchState:
        lg = self.log
        return FollowerFetchState(
            self.core.leader_epoch,
            lg.log_end_offset,
            lg.latest_epoch,
            lg.log_start_offset,
            self.core.topic_id,
        )

    async def apply_leader_answer(self, sent: FollowerFetchState, data: FollowerData) -> int:
        """Apply the leader's answer to the fetch we sent as `sent` (truncations, which
        may delete files, in a thread). Returns its error code (non-zero: the fetcher
        backs off this partition until metadata catches up)."""
        if data.diverging_epoch is not None or data.error_code == Errors.OFFSET_OUT_OF_RANGE:
            return await asyncio.to_thread(self.apply_leader_answer_now, sent, data)
        return self.apply_leader_answer_now(sent, data)

    def apply_leader_answer_now(self, sent: FollowerFetchState, data: FollowerData) -> int:
        """`apply_leader_answer`, all in the calling thread."""
        lg = self.log
        now = self.fetch_state()
        if now.leader_epoch != sent.leader_epoch or now.fetch_offset != sent.fetch_offset:
            # Our log or leader moved while the request was out (a truncation, a new
            # epoch): the answer is about a state we left. Kafka's fetcher drops it too.
            return Errors.NONE
        if data.error_code == Errors.OFFSET_OUT_OF_RANGE:
            if data.log_start_offset > lg.log_end_offset:
                self._restart_at(data.log_start_offset)
            else:  # ahead of the leader: back to what was committed
                self._truncate(self.core.high_watermark)
            return Errors.NONE
        if data.error_code:
            return data.error_code
        if data.diverging_epoch is not None:
            self._truncate(self._truncation_point(*data.diverging_epoch))
            return Errors.NONE
        if data.records:
            try:
                self._append(data.records)
            except UnexpectedAppendOffsetError:
                # Our tail ends inside a batch of the leader's: drop it and take theirs.
                self._truncate(next(iter_batches(data.records)).base_offset)
                try:
                    self._append(data.records)
                except RecordBatchError as exc:
                    log.error("cannot append the leader's batches to %s: %s", self.name, exc)
                    return exc.error_code
            except RecordBatchError as exc:
                log.error("bad batch from the leader of %s: %s", self.name, exc)
                return exc.error_code
        if lg.log_start_offset < data.log_start_offset <= lg.log_end_offset:
            lg.delete_records_before(data.log_start_offset)
        self.core.on_follower_progress(data.high_watermark, lg.log_end_offset)
        return Errors.NONE

    def _truncation_point(self, epoch: int, end_offset: int) -> int:
        """Where to cut our log given the leader's (epoch, end offset) for our last
        fetched epoch (KIP-279/320): the smaller of the two ends of that epoch. When we
        do not have that epoch, cut where our next epoch starts and let the leader
        check again on the next fetch."""
        lg = self.log
        local_epoch, local_end = lg.leader_epoch_cache.end_offset_for(epoch, lg.log_end_offset)
        if local_epoch == UNDEFINED_EPOCH or local_end < 0:
            target = min(end_offset, lg.log_end_offset)
        elif local_epoch == epoch:
            target = min(end_offset, local_end)
        else:
            target = local_end
        log.info("%s diverged at epoch %d; truncating to %d", self.name, epoch, target)
        return max(0, target)

    def _append(self, records: bytes) -> None:
        if self.log.append_as_follower(records) is not None:
            headers = [BatchHeader.of(v) for v in iter_batches(records)]
            self._index(self.producers.record(headers))

    def _truncate(self, offset: int) -> None:
        if offset < self.core.high_watermark:
            # Epoch-based truncation never needs this (KIP-101); Kafka warns and goes on.
            log.warning(
                "%s truncating to %d, below its HW %d", self.name, offset, self.core.high_watermark
            )
        if self.log.truncate_to(offset):
            self.reload_producers()
        self.core.on_truncate(self.log.log_end_offset)

    def _restart_at(self, offset: int) -> None:
        self.log.truncate_fully_and_start_at(offset)
        self.producers.clear()
        self.core.on_truncate(offset)
        self.core.high_watermark = offset
