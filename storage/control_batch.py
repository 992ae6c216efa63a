"""Transaction markers: the control batch that ends a transaction, in Kafka's format.

Kafka's EndTransactionMarker / ControlRecordType / MemoryRecords.withEndTransactionMarker:
one magic-2 batch with the control and transactional attribute bits, the producer's id
and epoch, base sequence -1, no compression, CreateTime, holding one record whose key is
(version int16 = 0, type int16: ABORT 0, COMMIT 1) and whose value is (version int16 = 0,
coordinatorEpoch int32).
"""

from __future__ import annotations

import struct
from typing import Final

from storage.record_batch import CorruptRecordError, RecordBatchView
from storage.records import Record, build_batch, decode_batch

ABORT: Final = 0
COMMIT: Final = 1
# The other control types are KRaft's (LEADER_CHANGE 2 .. KRAFT_VOTERS 6); only the
# two transaction markers ever appear in a partition of ours.
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
CONTROL_KEY_VERSION: Final = 0
END_TXN_MARKER_VERSION: Final = 0
NO_SEQUENCE: Final = -1


def marker_key(control_type: int) -> bytes:
    return _KEY.pack(CONTROL_KEY_VERSION, control_type)


def marker_value(coordinator_epoch: int) -> bytes:
    return _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)


def build_marker_batch(
    producer_id: int,
    producer_epoch: int,
    control_type: int,
    coordinator_epoch: int,
    leader_epoch: int = -1,
    now_ms: int | None = None,
) -> bytes:
    """The marker batch at base offset 0 (the log assigns the real one on append)."""
    if control_type not in (ABORT, COMMIT):
        raise ValueError(f"control type {control_type} is not a transaction marker")
    if producer_id < 0:
        raise ValueError("an end transaction marker needs a valid producer id")
    record = Record(
        key=marker_key(control_type), value=marker_value(coordinator_epoch), timestamp=now_ms
    )
    return build_batch(
        [record],
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=NO_SEQUENCE,
        partition_leader_epoch=leader_epoch,
        is_transactional=True,
        is_control=True,
        now_ms=now_ms,
    )


def marker_of(view: RecordBatchView) -> tuple[int, int] | None:
    """(control type, coordinator epoch) of a transaction marker batch, else None.

    None for data batches and for control batches of other types. A control batch
    whose key or value is too short raises CorruptRecordError (Kafka's
    InvalidRecordException): such bytes never come from a coordinator. `view` must
    cover the whole batch (a header-only view, as `LogSegment.iter_headers` gives,
    tells a control batch by `is_control` but not its type).
    """
    if not view.is_control:
        return None
    records = decode_batch(view).records
    if not records:
        raise CorruptRecordError("control batch holds no record")
    key, value = records[0].key, records[0].value
    if key is None or len(key) < _KEY.size:
        raise CorruptRecordError(f"control record key is {0 if key is None else len(key)} bytes")
    version, control_type = _KEY.unpack_from(key)
    if version < 0:
        raise CorruptRecordError(f"control record key has an invalid version {version}")
    if control_type not in (ABORT, COMMIT):
        return None
    if value is None or len(value) < _VALUE.size:
        raise CorruptRecordError(
            f"end transaction marker value is {0 if value is None else len(value)} bytes, "
            f"need {_VALUE.size}"
        )
    value_version, coordinator_epoch = _VALUE.unpack_from(value)
    if value_version < 0:
        raise CorruptRecordError(f"end transaction marker has an invalid version {value_version}")
    return control_type, coordinator_epoch
