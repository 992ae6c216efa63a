"""Transaction APIs on the transaction coordinator (`broker/txn/`): InitProducerId with
a transactional id (called from `apis_data`'s InitProducerId handler), AddPartitionsToTxn
(v0-3 from clients; v4's batched form from brokers, with `verify_only` for KIP-890),
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions.

Authorization as Kafka's KafkaApis: WRITE on the transactional id for the producer's
requests, WRITE on each topic added, READ on the group whose offsets join, CLUSTER_ACTION
for v4 AddPartitionsToTxn (only brokers send it), DESCRIBE on the transactional ids (and
topics) described or listed. Versions stop where transaction.version 2 (KIP-890 part 2)
begins: EndTxn v5, AddPartitionsToTxn v5, AddOffsetsToTxn v4, InitProducerId v5.
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH for the versions that predate it.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from broker.apis_common import ApiHandler, BrokerApis, Response, answer, by_topic, to_ms
from broker.codec import RequestHeader
from broker.txn.messages import InitResult, TxnDescription
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from common.api_keys import ApiKey
from common.errors import Errors

if TYPE_CHECKING:
    from broker.txn.manager import TransactionCoordinator


def _txn(apis: BrokerApis) -> TransactionCoordinator:
    return apis.txn


def _fenced(code: int, version: int, since: int) -> int:
    """PRODUCER_FENCED is only known to clients from version `since` on."""
    return (
        Errors.INVALID_PRODUCER_EPOCH
        if code == Errors.PRODUCER_FENCED and version < since
        else code
    )


# -- InitProducerId (transactional) ------------------------------------------------------------


async def init_transactional_producer_id(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    """InitProducerId for a transactional id (the caller checked WRITE on it)."""
    txn = _txn(apis)
    tid = body.transactional_id
    timeout = to_ms(body.transaction_timeout)
    pid = int(getattr(body, "producer_id", -1))
    epoch = int(getattr(body, "producer_epoch", -1))
    if txn.core.check(tid) == Errors.NONE and tid not in txn.core.txns:
        await txn.ensure_producer_id()
    core = txn.core
    r: InitResult = await txn.call(
        lambda t, now: core.init_producer_id(t, tid, timeout, pid, epoch, now)
    )
    return answer(
        ApiKey.INIT_PRODUCER_ID,
        header,
        {
            "throttle_time": 0,
            "error_code": _fenced(r.error_code, header.api_version, 4),
            "producer_id": r.producer_id,
            "producer_epoch": r.producer_epoch,
        },
    )


# -- AddPartitionsToTxn --------------------------------------------------------------------------


def _partition_rows(codes: dict[tuple[str, int], int]) -> list[dict[str, Any]]:
    rows = [
        (t, {"partition_index": p, "partition_error_code": c})
        for (t, p), c in sorted(codes.items())
    ]
    return by_topic(rows, "name", "results_by_partition")


async def _add_one(
    apis: BrokerApis, tid: str, pid: int, epoch: int, tps: list[tuple[str, int]], client: bool
) -> dict[tuple[str, int], int]:
    """One transaction's partitions: ACLs (client form), existence, then the core."""
    if client and not apis.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return dict.fromkeys(tps, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    refused: dict[tuple[str, int], int] = {}
    image = apis.image()
    for t, p in tps:
        if client and not apis.authorize(AclOperation.WRITE, ResourceType.TOPIC, t):
            refused[(t, p)] = Errors.TOPIC_AUTHORIZATION_FAILED
        elif (topic := image.topic_by_name(t)) is None or p not in topic.partitions:
            refused[(t, p)] = Errors.UNKNOWN_TOPIC_OR_PARTITION
    if refused:  # Kafka: nothing is added, the others are not attempted
        return {tp: refused.get(tp, Errors.OPERATION_NOT_ATTEMPTED) for tp in tps}
    txn = _txn(apis)
    core = txn.core
    result: dict[tuple[str, int], int] = await txn.call(
        lambda t, now: core.add_partitions(t, tid, pid, epoch, tps, now)
    )
    return result


async def _verify_one(
    apis: BrokerApis, tid: str, pid: int, epoch: int, tps: list[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    txn = _txn(apis)
    core = txn.core
    result: dict[tuple[str, int], int] = await txn.call(
        lambda t, _now: core.verify_partitions(t, tid, pid, epoch, tps)
    )
    return result


async def handle_add_partitions_to_txn(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    v = header.api_version
    if v < 4:
        tps = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
        codes = await _add_one(
            apis,
            body.v3_and_below_transactional_id,
            int(body.v3_and_below_producer_id),
            int(body.v3_and_below_producer_epoch),
            tps,
            client=True,
        )
        codes = {tp: _fenced(c, v, 2) for tp, c in codes.items()}
        return answer(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            header,
            {"throttle_time": 0, "results_by_topic_v3_and_below": _partition_rows(codes)},
        )
    if not apis.authorize(AclOperation.CLUSTER_ACTION, ResourceType.CLUSTER, CLUSTER_NAME):
        return add_partitions_to_txn_error(header, body, Errors.CLUSTER_AUTHORIZATION_FAILED)
    results = []
    for tx in body.transactions:
        tps = [(t.name, int(p)) for t in tx.topics for p in t.partitions]
        args = (apis, tx.transactional_id, int(tx.producer_id), int(tx.producer_epoch), tps)
        codes = await (_verify_one(*args) if tx.verify_only else _add_one(*args, client=False))
        results.append(
            {"transactional_id": tx.transactional_id, "topic_results": _partition_rows(codes)}
        )
    return answer(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        header,
        {"throttle_time": 0, "error_code": Errors.NONE, "results_by_transaction": results},
    )


def add_partitions_to_txn_error(header: RequestHeader, body: Any, code: int) -> Response:
    if header.api_version < 4:
        tps = [(t.name, int(p)) for t in body.v3_and_below_topics for p in t.partitions]
        rows = _partition_rows(dict.fromkeys(tps, code))
        return answer(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            header,
            {"throttle_time": 0, "results_by_topic_v3_and_below": rows},
        )
    return answer(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        header,
        {"throttle_time": 0, "error_code": code, "results_by_transaction": []},
    )


# -- AddOffsetsToTxn, EndTxn ---------------------------------------------------------------------


async def handle_add_offsets_to_txn(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    tid, group = body.transactional_id, body.group_id
    if not apis.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return add_offsets_to_txn_error(header, body, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not apis.authorize(AclOperation.READ, ResourceType.GROUP, group):
        return add_offsets_to_txn_error(header, body, Errors.GROUP_AUTHORIZATION_FAILED)
    txn = _txn(apis)
    core = txn.core
    pid, epoch = int(body.producer_id), int(body.producer_epoch)
    code: int = await txn.call(lambda t, now: core.add_offsets(t, tid, pid, epoch, group, now))
    return add_offsets_to_txn_error(header, body, _fenced(code, header.api_version, 2))


def add_offsets_to_txn_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(ApiKey.ADD_OFFSETS_TO_TXN, header, {"throttle_time": 0, "error_code": code})


async def handle_end_txn(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    tid = body.transactional_id
    if not apis.authorize(AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, tid):
        return end_txn_error(header, body, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    txn = _txn(apis)
    core = txn.core
    pid, epoch, commit = int(body.producer_id), int(body.producer_epoch), bool(body.committed)
    code: int = await txn.call(lambda t, now: core.end_txn(t, tid, pid, epoch, commit, now))
    return end_txn_error(header, body, _fenced(code, header.api_version, 2))


def end_txn_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(ApiKey.END_TXN, header, {"throttle_time": 0, "error_code": code})


# -- DescribeTransactions, ListTransactions ------------------------------------------------------


def _describe_row(apis: BrokerApis, d: TxnDescription) -> dict[str, Any]:
    topics: dict[str, list[int]] = {}
    for t, p in d.partitions:
        if apis.authorize(AclOperation.DESCRIBE, ResourceType.TOPIC, t):  # Kafka filters
            topics.setdefault(t, []).append(p)
    return {
        "error_code": d.error_code,
        "transactional_id": d.transactional_id,
        "transaction_state": d.state,
        "transaction_timeout": d.timeout_ms,
        "transaction_start_time": datetime.datetime.fromtimestamp(d.start_ms / 1000, datetime.UTC),
        "producer_id": d.producer_id,
        "producer_epoch": d.producer_epoch,
        "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
    }


async def handle_describe_transactions(
    apis: BrokerApis, header: RequestHeader, body: Any
) -> Response:
    core = _txn(apis).core
    rows = []
    for tid in body.transactional_ids:
        if not apis.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
            d = TxnDescription(tid, Errors.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        else:
            d = core.describe(tid)
        rows.append(_describe_row(apis, d))
    return answer(
        ApiKey.DESCRIBE_TRANSACTIONS, header, {"throttle_time": 0, "transaction_states": rows}
    )


def describe_transactions_error(header: RequestHeader, body: Any, code: int) -> Response:
    rows = [
        {**_EMPTY_DESCRIBE, "transactional_id": t, "error_code": code}
        for t in body.transactional_ids
    ]
    return answer(
        ApiKey.DESCRIBE_TRANSACTIONS, header, {"throttle_time": 0, "transaction_states": rows}
    )


_EPOCH_START = datetime.datetime.fromtimestamp(-0.001, datetime.UTC)
_EMPTY_DESCRIBE: dict[str, Any] = {
    "transaction_state": "",
    "transaction_timeout": 0,
    "transaction_start_time": _EPOCH_START,
    "producer_id": -1,
    "producer_epoch": -1,
    "topics": [],
}


async def handle_list_transactions(apis: BrokerApis, header: RequestHeader, body: Any) -> Response:
    txn = _txn(apis)
    duration = int(getattr(body, "duration_filter", -1))
    code, unknown, found = txn.core.list_transactions(
        list(body.state_filters), [int(p) for p in body.producer_id_filters], duration,
        txn.now_ms(),
    )  # fmt: skip
    rows = [
        {"transactional_id": tid, "producer_id": pid, "transaction_state": state}
        for tid, pid, state in found
        if apis.authorize(AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid)
    ]
    return answer(
        ApiKey.LIST_TRANSACTIONS,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "unknown_state_filters": unknown,
            "transaction_states": rows,
        },
    )


def list_transactions_error(header: RequestHeader, body: Any, code: int) -> Response:
    return answer(
        ApiKey.LIST_TRANSACTIONS,
        header,
        {
            "throttle_time": 0,
            "error_code": code,
            "unknown_state_filters": [],
            "transaction_states": [],
        },
    )


API_HANDLERS: tuple[ApiHandler, ...] = (
    ApiHandler(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        0,
        4,
        handle_add_partitions_to_txn,
        add_partitions_to_txn_error,
    ),
    ApiHandler(
        ApiKey.ADD_OFFSETS_TO_TXN, 0, 3, handle_add_offsets_to_txn, add_offsets_to_txn_error
    ),
    ApiHandler(ApiKey.END_TXN, 0, 4, handle_end_txn, end_txn_error),
    ApiHandler(
        ApiKey.DESCRIBE_TRANSACTIONS,
        0,
        0,
        handle_describe_transactions,
        describe_transactions_error,
    ),
    ApiHandler(ApiKey.LIST_TRANSACTIONS, 0, 1, handle_list_transactions, list_transactions_error),
)
