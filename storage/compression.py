"""Kafka's record batch codecs (gzip, snappy, lz4, zstd) over cramjam.

The broker never recompresses: these are used to read records (tools, timestamp
lookup, Spark) and to build batches in tests and tools.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam


class Compression(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


# Kafka's Java client frames snappy the way snappy-java's SnappyOutputStream does
# ("xerial" framing): a magic header, then length-prefixed raw snappy blocks.
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024


def compress(codec: Compression | int, data: bytes) -> bytes:
    codec = Compression(codec)
    if codec is Compression.NONE:
        return bytes(data)
    if codec is Compression.GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec is Compression.SNAPPY:
        return _xerial_compress(data)
    if codec is Compression.LZ4:
        return bytes(cramjam.lz4.compress(data))
    return bytes(cramjam.zstd.compress(data))


def decompress(codec: Compression | int, data: bytes | memoryview) -> bytes:
    """Decompress a batch's record payload; raises ValueError on corrupt input."""
    try:
        codec = Compression(codec)
    except ValueError:
        raise ValueError(f"unknown compression codec {codec}") from None
    try:
        if codec is Compression.NONE:
            return bytes(data)
        if codec is Compression.GZIP:
            return bytes(cramjam.gzip.decompress(data))
        if codec is Compression.SNAPPY:
            return _snappy_decompress(bytes(data))
        if codec is Compression.LZ4:
            return bytes(cramjam.lz4.decompress(data))
        return bytes(cramjam.zstd.decompress(data))
    except cramjam.DecompressionError as exc:
        raise ValueError(f"{codec.name.lower()} payload is corrupt: {exc}") from exc


def _xerial_compress(data: bytes) -> bytes:
    out = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for i in range(0, len(data), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(data[i : i + _XERIAL_BLOCK]))
        out.append(struct.pack(">i", len(block)))
        out.append(block)
    return b"".join(out)


def _snappy_decompress(data: bytes) -> bytes:
    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    pos = _XERIAL_HEADER.size
    out = []
    while pos < len(data):
        if pos + 4 > len(data):
            raise ValueError("snappy (xerial) block length is truncated")
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if n < 0 or pos + n > len(data):
            raise ValueError("snappy (xerial) block runs past the payload")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos : pos + n])))
        pos += n
    return b"".join(out)
