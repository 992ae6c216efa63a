"""KIP-890 part 1 on the produce path: a transactional batch that would open a
transaction on a partition is appended only once the transaction coordinator confirms
the partition is in the producer's ongoing transaction (Kafka's
ReplicaManager.maybeStartTransactionVerificationForPartition and handleProduceAppend).
Without it a late or hanging produce could open a transaction the coordinator never
ends, holding the LSO for ever.

A verification guard is taken before asking; the append checks it is still current (a
marker or another append in between drops it: the answer is then about a transaction
that is no longer the one open here).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from broker.hosted import HostedPartition
from broker.producer_state import VerificationGuard
from broker.results import ProduceResult
from common.errors import Errors
from storage.record_batch import TRANSACTIONAL_MASK, CheckedBatch

# (transactional id, producer id, producer epoch, topic, partition) -> error code, 0 = in
Verifier = Callable[[str, int, int, str, int], Awaitable[int]]

# Kafka's handleProduceAppend: verification errors older clients would not retry
# become NOT_ENOUGH_REPLICAS (retriable, no metadata refresh).
_RETRIABLE = frozenset(
    {
        Errors.CONCURRENT_TRANSACTIONS,
        Errors.NETWORK_EXCEPTION,
        Errors.COORDINATOR_LOAD_IN_PROGRESS,
        Errors.COORDINATOR_NOT_AVAILABLE,
        Errors.NOT_COORDINATOR,
    }
)


async def verify_first_append(
    verifier: Verifier,
    h: HostedPartition,
    topic: str,
    partition: int,
    first: CheckedBatch,
    transactional_id: str | None,
) -> VerificationGuard | ProduceResult | None:
    """None: nothing to verify (not transactional, or its transaction is open here);
    the guard to append with once the coordinator said yes; else the refusal."""
    _b, _l, _e, _m, _c, attributes, *_rest = first.fields
    if not attributes & TRANSACTIONAL_MASK:
        return None
    producer_id, epoch = first.fields[9], first.fields[10]
    if h.producers.has_ongoing_txn(producer_id):
        return None
    if transactional_id is None:  # Kafka skips verification, then the append refuses
        why = "Record was not part of an ongoing transaction (no transactional id)"
        return ProduceResult(Errors.INVALID_TXN_STATE, error_message=why)
    guard = h.producers.start_verification(producer_id)
    code = await verifier(transactional_id, producer_id, epoch, topic, partition)
    if code == Errors.NONE:
        return guard
    if code == Errors.INVALID_TXN_STATE:
        return ProduceResult(code, error_message="Partition was not added to the transaction")
    if code in _RETRIABLE:
        why = (
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {Errors(code).name}"
        )
        return ProduceResult(Errors.NOT_ENOUGH_REPLICAS, error_message=why)
    return ProduceResult(code)
