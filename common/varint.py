"""Kafka's variable-length integers and tagged-field sections, read and written once.

- Unsigned varints (Kafka's `ByteUtils.readUnsignedVarint`): compact lengths and array
  counts of flexible versions (KIP-482), tag numbers and sizes. At most 5 bytes.
- Zigzag varints and varlongs (`ByteUtils.readVarlong`): the fields inside a v2 record.
  At most 10 bytes.
- A tagged-field section: an unsigned count, then (tag, size, bytes) that many times.

Readers take `(buf, pos)` and return `(value, next pos)`; on bytes that cannot be a
varint (past the buffer, too long) they raise `MalformedError`, which callers turn into
their own error (a closed connection, CORRUPT_MESSAGE, a broken Fetch answer). The
one-byte case, by far the most common, is tested first: these readers run per request
and per record on the read paths.
"""

from __future__ import annotations

_U64 = 0xFFFFFFFFFFFFFFFF


class MalformedError(ValueError):
    """Bytes that do not decode: a varint or a tagged field past the buffer, a varint
    longer than Kafka allows, or (for the callers' own checks) a length that cannot be."""


def read_uvarint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Unsigned varint at `pos` -> (value, next pos). At most 5 bytes, as Kafka allows."""
    if pos < len(buf) and buf[pos] < 0x80:  # the common one-byte case
        return buf[pos], pos + 1
    value = shift = 0
    for i in range(5):
        if pos + i >= len(buf):
            raise MalformedError("varint runs past the buffer")
        b = buf[pos + i]
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos + i + 1
        shift += 7
    raise MalformedError("varint is longer than 5 bytes")


def encode_uvarint(n: int) -> bytes:
    """The unsigned varint of `n` (>= 0)."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_varint(buf: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    """Zigzag varint or varlong at `pos` -> (value, next pos). At most 10 bytes."""
    shift = 0
    v = 0
    while True:
        if pos >= len(buf):
            raise MalformedError("varint runs past the end of the record")
        b = buf[pos]
        pos += 1
        v |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise MalformedError("varint is longer than 10 bytes")
    return (v >> 1) ^ -(v & 1), pos


def write_varint(out: bytearray, n: int) -> None:
    """Append the zigzag varint/varlong of `n` to `out`."""
    v = ((n << 1) ^ (n >> 63)) & _U64
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def skip_tagged_fields(buf: bytes | bytearray | memoryview, pos: int) -> int:
    """Skip the tagged-field section at `pos` (every tag: the caller knows none of them);
    returns the position after it."""
    if pos < len(buf) and buf[pos] == 0:  # the common empty section
        return pos + 1
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise MalformedError("tagged field runs past the buffer")
    return pos
