"""common.varint: Kafka's unsigned and zigzag varints and tagged-field sections."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.varint import (
    MalformedError,
    encode_uvarint,
    read_uvarint,
    read_varint,
    skip_tagged_fields,
    write_varint,
)


@given(st.integers(0, 2**32 - 1), st.binary(max_size=3))
def test_uvarint_round_trip(n: int, tail: bytes) -> None:
    data = b"\x07" + encode_uvarint(n) + tail
    assert read_uvarint(data, 1) == (n, len(data) - len(tail))


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip(n: int) -> None:
    out = bytearray(b"\x01")
    write_varint(out, n)
    assert read_varint(bytes(out), 1) == (n, len(out))
    assert read_varint(memoryview(out), 1) == (n, len(out))


@pytest.mark.parametrize(("n", "wire"), [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-64, b"\x7f"),
                                         (64, b"\x80\x01"), (300, b"\xd8\x04")])  # fmt: skip
def test_zigzag_matches_kafka(n: int, wire: bytes) -> None:
    out = bytearray()
    write_varint(out, n)
    assert bytes(out) == wire


def test_uvarint_known_bytes() -> None:
    assert encode_uvarint(300) == b"\xac\x02"
    assert read_uvarint(b"\xff\xff\xff\xff\x0f", 0) == (2**32 - 1, 5)


@pytest.mark.parametrize("bad", [b"", b"\x80", b"\xff\xff\xff\xff\xff\x01"])
def test_malformed_uvarint(bad: bytes) -> None:
    with pytest.raises(MalformedError):
        read_uvarint(bad, 0)


@pytest.mark.parametrize("bad", [b"", b"\x80", b"\xff" * 10 + b"\x01"])
def test_malformed_varint(bad: bytes) -> None:
    with pytest.raises(MalformedError):
        read_varint(bad, 0)


def test_skip_tagged_fields() -> None:
    assert skip_tagged_fields(b"\x00\x09", 0) == 1
    section = encode_uvarint(2) + b"\x00\x02ab" + encode_uvarint(200) + b"\x01z"
    assert skip_tagged_fields(section + b"rest", 0) == len(section)
    with pytest.raises(MalformedError):
        skip_tagged_fields(b"\x01\x00\x05ab", 0)  # 5 bytes announced, 2 there
    with pytest.raises(MalformedError):
        skip_tagged_fields(b"", 0)
    assert issubclass(MalformedError, ValueError)  # callers that catch ValueError still do
