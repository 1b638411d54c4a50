"""A bounds check of a request body before kio decodes it.

Why: kio's native decoder sizes an array from the count the request claims
before reading any element; a forged count (say two billion) makes it ask
for hundreds of gigabytes, and an allocation failure in Rust aborts the
whole process.  One client could take the broker down.  Kafka's generated
parsers refuse such requests first ("Tried to allocate a collection of size
N, but there are only M bytes remaining"), and so does this module.

How: ``check_body`` walks the body's wire layout from the same kio schema
that will decode it, skipping over bytes without building anything, and
raises ``InvalidRequest`` as soon as an array count, string or bytes length
is larger than what is left of the frame (every element takes at least one
byte).  Tagged fields (flexible versions) are size-prefixed and skipped
whole.  The walk costs a few microseconds per request: it touches fields,
never records.
"""

from __future__ import annotations

import dataclasses
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from .errors import InvalidRequest

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip

# A field step: (kind, detail).  kind is "fixed" (detail: size), "string",
# "bytes", "entity" (detail: the nested class) or "nullable_entity" (a nullable
# struct, e.g. DescribeTopicPartitions' cursor: an int8 marker, -1 for null,
# then the struct); ``array`` says whether the field is a sequence of them.
_Step = tuple[str, Any, bool]
_plans: dict[tuple[type, bool], tuple[_Step, ...]] = {}


def field_shape(f: dataclasses.Field[Any]) -> tuple[Any, bool, bool]:
    """A kio schema field's type, as its element type, whether it is an array and whether it is
    nullable: ``X``, ``X | None``, ``tuple[X, ...]`` or ``tuple[X, ...] | None``."""
    element = f.type
    nullable = get_origin(element) in (UnionType, Union) and NoneType in get_args(element)
    if nullable:
        (element,) = (t for t in get_args(element) if t is not NoneType)
    array = get_origin(element) is tuple
    if array:
        element = get_args(element)[0]
    return element, array, nullable


def _plan(cls: type, flexible: bool) -> tuple[_Step, ...]:
    key = (cls, flexible)
    plan = _plans.get(key)
    if plan is None:
        steps: list[_Step] = []
        for f in dataclasses.fields(cls):
            if "tag" in f.metadata:
                continue  # tagged: lives in the tagged-fields section
            element, array, nullable = field_shape(f)
            if dataclasses.is_dataclass(element):
                steps.append(("nullable_entity" if nullable and not array else "entity", element, array))
                continue
            kafka_type = f.metadata["kafka_type"]
            if kafka_type in _FIXED:
                steps.append(("fixed", _FIXED[kafka_type], array))
            elif kafka_type == "string":
                steps.append(("string", None, array))
            elif kafka_type in ("bytes", "records"):
                steps.append(("bytes", None, array))
            else:
                raise AssertionError(f"unknown kafka_type {kafka_type!r} in {cls.__name__}.{f.name}")
        plan = _plans[key] = tuple(steps)
    return plan


class _Cursor:
    __slots__ = ("buf", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.end:
            raise InvalidRequest(f"{what} of {n} bytes, but only {self.end - self.pos} remain")

    def uvarint(self) -> int:
        result = shift = 0
        while True:
            if self.pos >= self.end:
                raise InvalidRequest("varint runs past the end of the request")
            b = self.buf[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise InvalidRequest("varint too long")

    def int_be(self, size: int) -> int:
        self.need(size, "field")
        value = int.from_bytes(self.buf[self.pos : self.pos + size], "big", signed=True)
        self.pos += size
        return value


def _length(cur: _Cursor, flexible: bool, legacy_size: int) -> int:
    """A length prefix; -1 means null."""
    if flexible:
        return cur.uvarint() - 1
    return cur.int_be(legacy_size)


def _skip_value(cur: _Cursor, kind: str, detail: Any, flexible: bool) -> None:
    if kind == "fixed":
        cur.need(detail, "field")
        cur.pos += detail
    elif kind == "string":
        n = _length(cur, flexible, 2)
        if n > 0:
            cur.need(n, "string")
            cur.pos += n
    elif kind == "bytes":
        n = _length(cur, flexible, 4)
        if n > 0:
            cur.need(n, "bytes")
            cur.pos += n
    elif kind == "nullable_entity":
        if cur.int_be(1) >= 0:
            _skip_entity(cur, detail, flexible)
    else:
        _skip_entity(cur, detail, flexible)


def _skip_entity(cur: _Cursor, cls: type, flexible: bool) -> None:
    for kind, detail, is_array in _plan(cls, flexible):
        if not is_array:
            _skip_value(cur, kind, detail, flexible)
            continue
        count = _length(cur, flexible, 4)
        if count <= 0:
            continue
        cur.need(count, f"array of {count} elements")  # each element takes at least a byte
        for _ in range(count):
            _skip_value(cur, kind, detail, flexible)
    if flexible:
        for _ in range(cur.uvarint()):
            cur.uvarint()  # tag
            size = cur.uvarint()
            cur.need(size, "tagged field")
            cur.pos += size


def check_body(schema: Any, frame: bytes | memoryview, offset: int) -> None:
    """Raise InvalidRequest if the body at ``offset`` claims more than the frame holds."""
    _skip_entity(_Cursor(frame, offset), schema, bool(schema.__flexible__))
