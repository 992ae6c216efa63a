"""Walking kio's schemas: the wire shape of each field, building entities from plain
data (`build`), stripping unknown tagged fields (`strip_unknown_tags`).

Kept apart from `codec` so the request/response code reads on its own; this is the
slow, generic, schema-driven side (Python per field), used for rare responses and on
the rare path where a request carries a tag kio does not know.
"""

from __future__ import annotations

import dataclasses
import datetime
import struct
import types
import typing
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from common.varint import MalformedError, encode_uvarint, read_uvarint

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


_FIXED = {
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}


@dataclass(frozen=True, slots=True)
class _FieldShape:
    name: str
    kind: str  # "prim", "prims", "entity", "entities"
    sub: type | None  # nested entity class
    ktype: str  # kafka_type of primitives ("" for entities)
    optional: bool
    tag: int | None


@cache
def _shapes(cls: type) -> tuple[_FieldShape, ...]:
    """How each field of a kio entity is laid out on the wire."""
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        optional = False
        if typing.get_origin(t) in (types.UnionType, typing.Union):
            args = [a for a in typing.get_args(t) if a is not type(None)]
            optional = len(args) < len(typing.get_args(t))
            t = args[0]
        is_array = typing.get_origin(t) is tuple
        inner = typing.get_args(t)[0] if is_array else t
        if dataclasses.is_dataclass(inner):
            kind = "entities" if is_array else "entity"
            out.append(_FieldShape(f.name, kind, inner, "", optional, f.metadata.get("tag")))
        else:
            kind = "prims" if is_array else "prim"
            ktype = f.metadata["kafka_type"]
            out.append(_FieldShape(f.name, kind, None, ktype, optional, f.metadata.get("tag")))
    return tuple(out)


# -- the array-count guard ---------------------------------------------------------------
#
# kio's native reader reserves memory for an array from its count before reading any
# element (`Vec::with_capacity(count)`): a 20-byte frame claiming 3 * 2^30 elements aborts
# the whole process (Rust's out-of-memory abort, not an exception), and smaller absurd
# counts reserve gigabytes. So every request is walked once here first, by a plan
# compiled from kio's own schema, refusing any count whose minimal element size cannot
# fit in the bytes left. Fixed-size runs of fields are skipped in one step, so the walk
# costs a few Python operations per array element (per partition), never per record.

_SKIP, _STR, _ARR, _ENT, _TAGS = range(5)
_STR_COMPACT, _STR_LEGACY16, _STR_LEGACY32 = range(3)
_STR_MIN = {_STR_COMPACT: 1, _STR_LEGACY16: 2, _STR_LEGACY32: 4}


def _str_kind(ktype: str, flexible: bool) -> int:
    if flexible:
        return _STR_COMPACT
    return _STR_LEGACY16 if ktype == "string" else _STR_LEGACY32


def _field_steps(f: _FieldShape, flexible: bool) -> tuple[list[tuple[Any, ...]], int]:
    """(steps, minimal wire size) of one field."""
    if f.kind == "prim":
        size = _FIXED.get(f.ktype)
        if size is not None:
            return [(_SKIP, size)], size
        kind = _str_kind(f.ktype, flexible)
        return [(_STR, kind)], _STR_MIN[kind]
    if f.kind == "entity":
        sub, sub_min = _plan(f.sub)  # type: ignore[arg-type]
        return [(_ENT, sub, f.optional)], 1 if f.optional else sub_min
    if f.kind == "entities":
        sub, elem_min = _plan(f.sub)  # type: ignore[arg-type]
        fixed, str_kind = 0, 0
    else:
        sub = None
        fixed = _FIXED.get(f.ktype, 0)
        str_kind = _str_kind(f.ktype, flexible)
        elem_min = fixed or _STR_MIN[str_kind]
    step = (_ARR, flexible, sub, fixed, str_kind, max(elem_min, 1))
    return [step], 1 if flexible else 4


@cache
def _plan(cls: type) -> tuple[tuple[tuple[Any, ...], ...], int]:
    """(steps, minimal wire size) to walk an entity of `cls`."""
    flexible = cls.__flexible__
    steps: list[tuple[Any, ...]] = []
    minimum = 0
    tags: dict[int, tuple[tuple[Any, ...], ...]] = {}
    for f in _shapes(cls):
        field_steps, size = _field_steps(f, flexible)
        if f.tag is not None:
            tags[f.tag] = tuple(field_steps)
            continue
        minimum += size
        for step in field_steps:
            if step[0] == _SKIP and steps and steps[-1][0] == _SKIP:
                steps[-1] = (_SKIP, steps[-1][1] + step[1])  # merge fixed-size runs
            else:
                steps.append(step)
    if flexible:
        steps.append((_TAGS, tags))
        minimum += 1
    return tuple(steps), minimum


def check_counts(cls: type, buf: bytes, offset: int) -> int:
    """Walk the entity at `offset`; raise MalformedError on any array count, string
    length or tagged field that cannot fit in `buf`. Returns the end position."""
    try:
        return _walk(_plan(cls)[0], buf, offset, len(buf))
    except (struct.error, IndexError) as e:
        raise MalformedError(f"request runs past its frame: {e}") from e


def _skip_string(buf: bytes, pos: int, kind: int) -> int:
    if kind == _STR_COMPACT:
        n, pos = read_uvarint(buf, pos)
        return pos + n - 1 if n else pos
    if kind == _STR_LEGACY16:
        n = _I16.unpack_from(buf, pos)[0]
        pos += 2
    else:
        n = _I32.unpack_from(buf, pos)[0]
        pos += 4
    if n < -1:
        raise MalformedError(f"negative length {n}")
    return pos + n if n > 0 else pos


def _walk(plan: tuple[tuple[Any, ...], ...], buf: bytes, pos: int, end: int) -> int:
    # One-byte varints (the usual case) are read inline: this walk runs on every request.
    for step in plan:
        op = step[0]
        if op == _SKIP:
            pos += step[1]
        elif op == _STR:
            if step[1] == _STR_COMPACT and buf[pos] < 0x80:
                n = buf[pos]
                pos += n if n else 1
            else:
                pos = _skip_string(buf, pos, step[1])
        elif op == _ARR:
            _, flexible, sub, fixed, str_kind, min_elem = step
            if flexible:
                n = buf[pos]
                if n < 0x80:
                    pos += 1
                else:
                    n, pos = read_uvarint(buf, pos)
                n -= 1
            else:
                n = _I32.unpack_from(buf, pos)[0]
                pos += 4
                if n < -1:
                    raise MalformedError(f"negative array length {n}")
            if n <= 0:
                continue
            if n * min_elem > end - pos:
                raise MalformedError(f"array of {n} elements cannot fit in {end - pos} bytes")
            if sub is not None:
                for _ in range(n):
                    pos = _walk(sub, buf, pos, end)
            elif fixed:
                pos += n * fixed
            else:
                for _ in range(n):
                    pos = _skip_string(buf, pos, str_kind)
        elif op == _ENT:
            if step[2]:  # nullable struct (KIP-893): a marker byte, -1 = null
                pos += 1
                if _I8.unpack_from(buf, pos - 1)[0] < 0:
                    continue
            pos = _walk(step[1], buf, pos, end)
        elif buf[pos] == 0:  # an empty tag section
            pos += 1
        else:  # tags: known ones are walked too (they may hold arrays)
            count, pos = read_uvarint(buf, pos)
            if count > end - pos:
                raise MalformedError(f"{count} tagged fields cannot fit in {end - pos} bytes")
            for _ in range(count):
                tag, pos = read_uvarint(buf, pos)
                size, pos = read_uvarint(buf, pos)
                if pos + size > end:
                    raise MalformedError("tagged field runs past the buffer")
                sub = step[1].get(tag)
                if sub is not None:
                    _walk(sub, buf, pos, pos + size)
                pos += size
        if pos > end:
            raise MalformedError("request runs past its frame")
    return pos


def strip_unknown_tags(cls: type, buf: bytes, offset: int) -> bytes:
    """A copy of the entity at `offset` with every tag kio does not know removed."""
    stripper = _Stripper(buf, offset)
    end = stripper.entity(cls, offset)
    stripper.out += buf[stripper.copied : end]
    return bytes(stripper.out)


class _Stripper:
    """Walks an entity by its kio schema, copying bytes and dropping unknown tags."""

    def __init__(self, buf: bytes, start: int) -> None:
        self.buf = buf
        self.out = bytearray()
        self.copied = start  # bytes before this position are already in `out`

    def entity(self, cls: type, pos: int) -> int:
        flexible = cls.__flexible__
        for f in _shapes(cls):
            if f.tag is None:
                pos = self.field(f, flexible, pos)
        if flexible:
            pos = self.tags(cls, pos)
        return pos

    def field(self, f: _FieldShape, flexible: bool, pos: int) -> int:
        if f.kind == "entity":
            if f.optional:  # KIP-893 nullable struct: a marker byte
                marker = self._fixed(pos, 1)
                pos += 1
                if _I8.unpack_from(self.buf, marker)[0] < 0:
                    return pos
            assert f.sub is not None
            return self.entity(f.sub, pos)
        if f.kind in ("entities", "prims"):
            count, pos = self._array_length(flexible, pos)
            for _ in range(count):
                if f.sub is not None:
                    pos = self.entity(f.sub, pos)
                else:
                    pos = self.prim(f.ktype, flexible, pos)
                if pos > len(self.buf):
                    raise MalformedError("array runs past the buffer")
            return pos
        return self.prim(f.ktype, flexible, pos)

    def prim(self, ktype: str, flexible: bool, pos: int) -> int:
        size = _FIXED.get(ktype)
        if size is not None:
            self._fixed(pos, size)
            return pos + size
        if flexible:  # compact string/bytes: length + 1, 0 = null
            n, pos = read_uvarint(self.buf, pos)
            n -= 1
        elif ktype == "string":
            n = _I16.unpack_from(self.buf, self._fixed(pos, 2))[0]
            pos += 2
        else:
            n = _I32.unpack_from(self.buf, self._fixed(pos, 4))[0]
            pos += 4
        if n < -1:
            raise MalformedError(f"negative length {n}")
        return pos + max(n, 0)

    def tags(self, cls: type, pos: int) -> int:
        """Rewrite the tag section at `pos` keeping only the tags `cls` knows."""
        self.out += self.buf[self.copied : pos]
        known = {f.tag: f for f in _shapes(cls) if f.tag is not None}
        count, pos = read_uvarint(self.buf, pos)
        kept: list[tuple[int, bytes]] = []
        for _ in range(count):
            tag, pos = read_uvarint(self.buf, pos)
            size, pos = read_uvarint(self.buf, pos)
            end = pos + size
            if end > len(self.buf):
                raise MalformedError("tagged field runs past the buffer")
            f = known.get(tag)
            if f is not None:
                data = self.buf[pos:end]
                if f.kind != "prim":  # structs inside a known tag may carry unknown tags
                    inner = _Stripper(data, 0)
                    inner_end = inner.field(f, True, 0)
                    inner.out += data[inner.copied : inner_end]
                    data = bytes(inner.out)
                kept.append((tag, data))
            pos = end
        self.out += encode_uvarint(len(kept))
        for tag, data in kept:
            self.out += encode_uvarint(tag) + encode_uvarint(len(data)) + data
        self.copied = pos
        return pos

    def _array_length(self, flexible: bool, pos: int) -> tuple[int, int]:
        if flexible:
            n, pos = read_uvarint(self.buf, pos)
            return max(n - 1, 0), pos
        n = _I32.unpack_from(self.buf, self._fixed(pos, 4))[0]
        if n < -1:
            raise MalformedError(f"negative array length {n}")
        return max(n, 0), pos + 4

    def _fixed(self, pos: int, size: int) -> int:
        if pos + size > len(self.buf):
            raise MalformedError("field runs past the buffer")
        return pos


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """A kio entity from plain data, keeping only the fields this version has.

    Handlers describe a response once, for every version, as dicts of plain values
    (ints for error codes and milliseconds); this picks what `cls` has and converts.
    """
    kwargs: dict[str, Any] = {}
    for f in _shapes(cls):
        if f.name not in data:
            continue
        v = data[f.name]
        if v is None:
            pass
        elif f.kind == "entity":
            v = build(f.sub, v)  # type: ignore[arg-type]
        elif f.kind == "entities":
            v = tuple(build(f.sub, x) for x in v)  # type: ignore[arg-type]
        elif f.kind == "prims":
            v = tuple(v)
        elif f.ktype == "error_code":
            v = ErrorCode(v)
        elif f.ktype in ("timedelta_i32", "timedelta_i64"):
            v = datetime.timedelta(milliseconds=v)
        elif f.ktype == "uuid" and isinstance(v, str):
            v = topic_uuid(v)
        kwargs[f.name] = v
    return cls(**kwargs)


def topic_uuid(topic_id: str) -> uuid.UUID:
    """Our topic ids are UUID strings; anything else maps to the zero UUID (Kafka's
    "no id") instead of failing a whole response."""
    try:
        return uuid.UUID(topic_id)
    except ValueError:
        return uuid.UUID(int=0)
