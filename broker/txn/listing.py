"""DescribeTransactions and ListTransactions on the coordinator core: read-only views
of the transactional ids it coordinates (Kafka's TransactionStateManager.
listTransactionStates and TransactionCoordinator.handleDescribeTransactions)."""

from __future__ import annotations

from collections.abc import Iterable

from broker.txn.messages import TxnDescription
from broker.txn.state import TransactionMetadata, TransactionState
from common.errors import Errors


class ListingMixin:
    txns: dict[str, TransactionMetadata]
    owned: dict[int, tuple[int, bool]]

    def check(self, transactional_id: str | None) -> int: ...  # the core's

    def describe(self, transactional_id: str) -> TxnDescription:
        code = self.check(transactional_id)
        md = self.txns.get(transactional_id) if code == Errors.NONE else None
        if code == Errors.NONE and md is None:
            code = Errors.TRANSACTIONAL_ID_NOT_FOUND
        if md is None:
            return TxnDescription(transactional_id, code)
        return TxnDescription(
            transactional_id, Errors.NONE, md.state.kafka_name, md.timeout_ms, md.start_ms,
            md.producer_id, md.producer_epoch, tuple(sorted(md.partitions)),
        )  # fmt: skip

    def list_transactions(
        self, states: Iterable[str], producer_ids: Iterable[int], min_duration_ms: int, now_ms: int
    ) -> tuple[int, list[str], list[tuple[str, int, str]]]:
        """(error code, unknown state filters, [(id, producer id, state name)])."""
        wanted_states: set[TransactionState] = set()
        unknown: list[str] = []
        for name in states:
            s = TransactionState.from_kafka_name(name)
            if s is None:
                unknown.append(name)
            else:
                wanted_states.add(s)
        if any(not loaded for _, loaded in self.owned.values()):
            return Errors.COORDINATOR_LOAD_IN_PROGRESS, unknown, []
        states_given = bool(wanted_states) or bool(unknown)
        pids = set(producer_ids)
        found = []
        for tid, md in sorted(self.txns.items()):
            if states_given and md.state not in wanted_states:
                continue
            if pids and md.producer_id not in pids:
                continue
            # Kafka's filter, as written: running for longer than the duration
            if min_duration_ms >= 0 and now_ms - md.start_ms <= min_duration_ms:
                continue
            found.append((tid, md.producer_id, md.state.kafka_name))
        return Errors.NONE, unknown, found
