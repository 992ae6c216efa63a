"""The records of `__transaction_state`, in Kafka's formats (TransactionLogKey.json,
TransactionLogValue.json), so a log written here reads with Kafka's tools.

Key: int16 version 0, then the transactional id. Value: int16 version, then the
transaction's metadata; a null value is a tombstone (the id expired). We write value
version 0 (what Kafka writes for transaction.version < 2, the only one we speak) and read
0 and 1 (v1 is flexible: compact strings and arrays, tagged fields).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.group.records import RecordFormatError, _Reader
from broker.txn.state import TransactionState

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

KEY_VERSION = 0
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: tuple[tuple[str, int], ...]  # sorted (topic, partition)
    last_update_ms: int
    start_ms: int  # -1: no transaction started
    previous_producer_id: int = -1  # v1 tagged fields (read only)
    next_producer_id: int = -1


def _str(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _str(transactional_id)


def decode_key(buf: bytes) -> str:
    r = _Reader(buf)
    version = r.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown __transaction_state key version {version}")
    return r.str()


def encode_value(v: TxnLogValue) -> bytes:
    out = bytearray(_I16.pack(VALUE_VERSION))
    out += _I64.pack(v.producer_id) + _I16.pack(v.producer_epoch) + _I32.pack(v.timeout_ms)
    out += _I8.pack(int(v.state))
    if v.state == TransactionState.EMPTY:
        out += _I32.pack(-1)  # Kafka writes a null partition list for Empty
    else:
        by_topic: dict[str, list[int]] = {}
        for t, p in sorted(v.partitions):
            by_topic.setdefault(t, []).append(p)
        out += _I32.pack(len(by_topic))
        for t, ps in by_topic.items():
            out += _str(t) + _I32.pack(len(ps)) + b"".join(_I32.pack(p) for p in ps)
    out += _I64.pack(v.last_update_ms) + _I64.pack(v.start_ms)
    return bytes(out)


class _FlexReader(_Reader):
    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise RecordFormatError("varint too long")

    def compact_str(self) -> str:
        n = self.uvarint() - 1
        if n < 0:
            raise RecordFormatError("a null string where one is required")
        return self._take(n).decode()


def decode_value(buf: bytes) -> TxnLogValue:
    r = _FlexReader(buf)
    version = r.i16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown __transaction_state value version {version}")
    flexible = version >= 1
    pid = r.i64()
    epoch = r.i16()
    timeout = r.i32()
    try:
        state = TransactionState(_I8.unpack(r._take(1))[0])
    except ValueError as e:
        raise RecordFormatError(str(e)) from e
    parts: list[tuple[str, int]] = []
    n = r.uvarint() - 1 if flexible else r.i32()
    for _ in range(max(n, 0)):
        topic = r.compact_str() if flexible else r.str()
        m = r.uvarint() - 1 if flexible else r.i32()
        parts.extend((topic, r.i32()) for _ in range(max(m, 0)))
        if flexible:
            _skip_tags(r, {})
    last_update, start = r.i64(), r.i64()
    tags: dict[int, bytes] = {}
    if flexible:
        _skip_tags(r, tags)
    prev = _I64.unpack(tags[0])[0] if len(tags.get(0, b"")) == 8 else -1
    nxt = _I64.unpack(tags[1])[0] if len(tags.get(1, b"")) == 8 else -1
    return TxnLogValue(pid, epoch, timeout, state, tuple(parts), last_update, start, prev, nxt)


def _skip_tags(r: _FlexReader, into: dict[int, bytes]) -> None:
    for _ in range(r.uvarint()):
        tag, size = r.uvarint(), r.uvarint()
        into[tag] = r._take(size)
