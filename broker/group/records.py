"""The records of `__consumer_offsets`, in Kafka's own formats.

Each record's key starts with an int16 version that says what it is: 0 and 1 are an
offset commit (group, topic, partition), 2 is a group's metadata (group). Values are
versioned the same way; a null value is a tombstone (the offset or group is gone). We
write the versions Kafka 3.x writes (offset commit key 1 / value 3, group key 2 / value
3) and read every non-flexible version, so a log written here reads with Kafka's
tools and the other way round.

Keys and values are small and rare next to the data path, so plain `struct` is fine.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

OFFSET_KEY_VERSION = 1
GROUP_KEY_VERSION = 2
OFFSET_VALUE_VERSION = 3
GROUP_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    """A key or value that is not one of Kafka's __consumer_offsets formats."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int  # -1: unknown
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the chosen protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int  # -1: unknown
    members: tuple[MemberValue, ...]


# -- writing -------------------------------------------------------------------------------------


def _str(s: str | None) -> bytes:
    if s is None:
        return _I16.pack(-1)
    b = s.encode()
    return _I16.pack(len(b)) + b


def _bytes(b: bytes) -> bytes:
    return _I32.pack(len(b)) + b


def encode_key(key: OffsetKey | GroupKey) -> bytes:
    if isinstance(key, OffsetKey):
        return (
            _I16.pack(OFFSET_KEY_VERSION)
            + _str(key.group)
            + _str(key.topic)
            + _I32.pack(key.partition)
        )
    return _I16.pack(GROUP_KEY_VERSION) + _str(key.group)


def encode_offset_value(v: OffsetValue) -> bytes:
    return (
        _I16.pack(OFFSET_VALUE_VERSION)
        + _I64.pack(v.offset)
        + _I32.pack(v.leader_epoch)
        + _str(v.metadata)
        + _I64.pack(v.commit_timestamp)
    )


def encode_group_value(v: GroupValue) -> bytes:
    out = bytearray(_I16.pack(GROUP_VALUE_VERSION))
    out += _str(v.protocol_type) + _I32.pack(v.generation) + _str(v.protocol) + _str(v.leader)
    out += _I64.pack(v.current_state_timestamp) + _I32.pack(len(v.members))
    for m in v.members:
        out += _str(m.member_id) + _str(m.group_instance_id) + _str(m.client_id)
        out += _str(m.client_host)
        out += _I32.pack(m.rebalance_timeout_ms) + _I32.pack(m.session_timeout_ms)
        out += _bytes(m.subscription) + _bytes(m.assignment)
    return bytes(out)


# -- reading -------------------------------------------------------------------------------------


class _Reader:
    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = buf, 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise RecordFormatError(f"field of {n} bytes runs past a {len(self.buf)}-byte record")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def i16(self) -> int:
        return int(_I16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_I32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_I64.unpack(self._take(8))[0])

    def nullable_str(self) -> str | None:
        n = self.i16()
        if n == -1:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"a string that is not UTF-8: {e}") from e

    def str(self) -> str:
        s = self.nullable_str()
        if s is None:
            raise RecordFormatError("a null string where one is required")
        return s

    def bytes(self) -> bytes:
        n = self.i32()
        return b"" if n == -1 else self._take(n)


def decode_key(buf: bytes) -> OffsetKey | GroupKey:
    r = _Reader(buf)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.str(), r.str(), r.i32())
    if version == GROUP_KEY_VERSION:
        return GroupKey(r.str())
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def decode_offset_value(buf: bytes) -> OffsetValue:
    r = _Reader(buf)
    version = r.i16()
    if version > OFFSET_VALUE_VERSION or version < 0:
        raise RecordFormatError(f"unknown offset commit value version {version}")
    offset = r.i64()
    epoch = r.i32() if version >= 3 else -1
    metadata = r.str()
    ts = r.i64()
    return OffsetValue(offset, epoch, metadata, ts)  # v1's expire timestamp is ignored


def decode_group_value(buf: bytes) -> GroupValue:
    r = _Reader(buf)
    version = r.i16()
    if version > GROUP_VALUE_VERSION or version < 0:
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type = r.str()
    generation = r.i32()
    protocol = r.nullable_str()
    leader = r.nullable_str()
    state_ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        member_id = r.str()
        instance = r.nullable_str() if version >= 3 else None
        client_id, client_host = r.str(), r.str()
        rebalance_timeout = r.i32() if version >= 1 else -1
        session_timeout = r.i32()
        if rebalance_timeout == -1:
            rebalance_timeout = session_timeout
        members.append(
            MemberValue(
                member_id,
                instance,
                client_id,
                client_host,
                rebalance_timeout,
                session_timeout,
                r.bytes(),
                r.bytes(),
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, state_ts, tuple(members))
