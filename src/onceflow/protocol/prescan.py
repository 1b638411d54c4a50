"""A walk over a request frame before kio decodes it: bounds checks, and unknown tagged fields
skipped as Kafka skips them (KIP-482).

Why, bounds: kio's native decoder sizes an array from the count the request
claims before reading any element; a forged count (say two billion) makes it
ask for hundreds of gigabytes, and an allocation failure in Rust aborts the
whole process.  One client could take the broker down.  Kafka's generated
parsers refuse such requests first ("Tried to allocate a collection of size
N, but there are only M bytes remaining"), and so does this module.

Why, tagged fields: in flexible versions (KIP-482) the request header (v2)
and every struct end with a tagged-field section: a uvarint count, then per
field a uvarint tag, a uvarint size and that many bytes.  A receiver skips
the tags it does not know; that is what lets a client of a newer version add
optional data without breaking older brokers.  Kafka's generated readers
(``MessageDataGenerator``) keep them as ``_unknownTaggedFields``.  kio
refuses them instead (``KeyError: Unknown tagged field tag``), which closed
the connection.  kio is not changed: this walk finds the unknown fields and,
when there are any, hands kio a copy of the frame without them.

How: ``scan_request`` walks the header, then the body's wire layout from the
same kio schema that will decode it, skipping over bytes without building
anything.  It raises ``InvalidRequest`` as soon as an array count, string or
bytes length is larger than what is left of the frame (every element takes
at least one byte), and returns the frame unchanged, or, if it met unknown
tagged fields, a copy where each tagged-field section that held one is
rewritten with the known fields alone (the count re-encoded).  The walk
costs a few microseconds per request: it touches fields, never records; the
copy is made only for a request that carries unknown tags.

In a tagged-field section, what Kafka does, and so what this walk does
(checked against Kafka 4.3.1's generated ``*RequestData.read``):

- A tag this version of the struct knows is read as its field, in the flexible
  encoding whatever the field's size prefix says: Kafka ignores the size of a
  known field, and so does kio, so the walk steps over the value itself (and
  checks its bounds, and drops unknown tags nested in it).
- A tag that another version of the same struct knows (Fetch's ReplicaState,
  tag 1, sent in a v12 request) is refused: Kafka throws "Tag 1 is not valid
  for version 12", which closes the connection.  The other versions are
  kio's, for that API.
- Any other tag is unknown: its size must fit in what is left of the frame
  (``readUnknownTaggedField``) and its bytes are skipped unread.  The request
  header v2 has no tagged fields of its own: every tag there is unknown.
- Neither the order of the tags nor repeats are checked (Kafka's reader does
  not; its writer emits tags in increasing order).  A repeated known tag is
  decoded twice by kio, the last one winning, as in Kafka.
- A uvarint takes at most five bytes (Kafka's ``ByteUtils``, and kio).
  Kafka keeps it in a Java int, its low 32 bits: a count of 2^31 or more
  reads as a negative number of fields, that is none; a size as a negative
  size, refused; a tag as another tag.  The walk reads them the same way and
  hands kio the fields Kafka would have read.
"""

from __future__ import annotations

import dataclasses
import io
from functools import cache
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin

from kio.index import load_request_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial.writers import write_unsigned_varint
from kio.static.constants import EntityType

from .errors import InvalidRequest

_FIXED = {
    "int8": 1, "uint8": 1, "bool": 1,
    "int16": 2, "uint16": 2, "error_code": 2,
    "int32": 4, "uint32": 4, "timedelta_i32": 4,
    "int64": 8, "uint64": 8, "float64": 8, "timedelta_i64": 8, "datetime_i64": 8,
    "uuid": 16,
}  # fmt: skip

# A field step: (kind, detail, array).  kind is "fixed" (detail: size), "string",
# "bytes", "entity" (detail: the nested class) or "nullable_entity" (a nullable
# struct, e.g. DescribeTopicPartitions' cursor: an int8 marker, -1 for null,
# then the struct); ``array`` says whether the field is a sequence of them.
_Step = tuple[str, Any, bool]


@dataclasses.dataclass(frozen=True, slots=True)
class _Plan:
    """How one struct is laid out: its untagged fields in order, then its tagged-field section."""

    steps: tuple[_Step, ...]
    #: tag -> step of the tagged fields this version of the struct has.
    tagged: dict[int, _Step]


_plans: dict[tuple[type, bool], _Plan] = {}
#: The request header (v1 and v2): no tagged fields in any version.
_HEADER_PLAN = _Plan((), {})


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


def _step(cls: type, f: dataclasses.Field[Any]) -> _Step:
    element, array, nullable = field_shape(f)
    if dataclasses.is_dataclass(element):
        if nullable and not array and "tag" in f.metadata:
            # Kafka writes a tagged nullable struct behind a uvarint marker; no request of ours
            # has one, and kio's reading of it is unchecked: fail loudly (tests plan every schema).
            raise AssertionError(f"tagged nullable struct {cls.__name__}.{f.name} is not supported")
        return ("nullable_entity" if nullable and not array else "entity", element, array)
    kafka_type = f.metadata["kafka_type"]
    if kafka_type in _FIXED:
        return ("fixed", _FIXED[kafka_type], array)
    if kafka_type == "string":
        return ("string", None, array)
    if kafka_type in ("bytes", "records"):
        return ("bytes", None, array)
    raise AssertionError(f"unknown kafka_type {kafka_type!r} in {cls.__name__}.{f.name}")


def _struct_tags(cls: type, out: dict[str, set[int]]) -> None:
    """Add the tags of ``cls`` and of the structs nested in it to ``out``, by struct name."""
    tags = out.setdefault(cls.__name__, set())
    for f in dataclasses.fields(cls):
        if "tag" in f.metadata:
            tags.add(f.metadata["tag"])
        element, _, _ = field_shape(f)
        if dataclasses.is_dataclass(element):
            _struct_tags(element, out)  # type: ignore[arg-type]


@cache
def _tags_in_any_version(api_key: int) -> dict[str, frozenset[int]]:
    """Struct name -> every tag the struct has in some version of the API's request.

    Kafka generates one class per struct name for all versions of a message, and its
    reader knows every tag of every version (see the module docstring)."""
    out: dict[str, set[int]] = {}
    for version, entities in schema_name_map[api_key_map[api_key]].items():
        if EntityType.request in entities:
            _struct_tags(load_request_schema(api_key, version), out)
    return {name: frozenset(tags) for name, tags in out.items()}


def _is_foreign(cls: type, tag: int) -> bool:
    """Whether another version of struct ``cls`` has ``tag`` (looked up only for tags that this
    version does not have, so that only requests carrying such tags pay for loading every
    version's schema)."""
    api_key = getattr(cls, "__api_key__", None)
    return api_key is not None and tag in _tags_in_any_version(api_key).get(cls.__name__, frozenset())


def _plan(cls: type, flexible: bool) -> _Plan:
    key = (cls, flexible)
    plan = _plans.get(key)
    if plan is None:
        steps: list[_Step] = []
        tagged: dict[int, _Step] = {}
        for f in dataclasses.fields(cls):
            if "tag" in f.metadata:
                tagged[f.metadata["tag"]] = _step(cls, f)  # lives in the tagged-field section
            else:
                steps.append(_step(cls, f))
        plan = _plans[key] = _Plan(tuple(steps), tagged)
    return plan


def _uvarint_bytes(value: int) -> bytes:
    """``value`` as an unsigned varint, by kio's writer."""
    buffer = io.BytesIO()
    write_unsigned_varint(buffer, value)  # type: ignore[arg-type]
    return buffer.getvalue()


def _int32(value: int) -> int:
    """A uvarint as Kafka holds it: in a Java int (the low 32 bits, signed)."""
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


#: A replacement of frame bytes [start, end) by new bytes: a tagged-field section rewritten.
_Edit = tuple[int, int, bytes]


class _Cursor:
    __slots__ = ("buf", "edits", "end", "pos")

    def __init__(self, buf: bytes | memoryview, pos: int) -> None:
        self.buf = buf
        self.pos = pos
        self.end = len(buf)
        #: In frame order and never overlapping: a section's edit absorbs those inside it.
        self.edits: list[_Edit] = []

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
            if shift > 28:  # a fifth byte with its high bit set: Kafka's and kio's limit
                raise InvalidRequest("varint too long")

    def int_be(self, size: int) -> int:
        self.need(size, "field")
        value = int.from_bytes(self.buf[self.pos : self.pos + size], "big", signed=True)
        self.pos += size
        return value


def _apply(buf: bytes | memoryview, edits: list[_Edit], start: int, end: int) -> bytes:
    """The bytes [start, end) of ``buf`` with ``edits`` (all inside that range) applied."""
    parts: list[bytes | memoryview] = []
    pos = start
    for edit_start, edit_end, replacement in edits:
        parts.append(buf[pos:edit_start])
        parts.append(replacement)
        pos = edit_end
    parts.append(buf[pos:end])
    return b"".join(parts)


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


def _skip_field(cur: _Cursor, step: _Step, flexible: bool) -> None:
    kind, detail, is_array = step
    if not is_array:
        _skip_value(cur, kind, detail, flexible)
        return
    count = _length(cur, flexible, 4)
    if count <= 0:
        return
    cur.need(count, f"array of {count} elements")  # each element takes at least a byte
    for _ in range(count):
        _skip_value(cur, kind, detail, flexible)


def _skip_entity(cur: _Cursor, cls: type, flexible: bool) -> None:
    plan = _plan(cls, flexible)
    for step in plan.steps:
        _skip_field(cur, step, flexible)
    if flexible:
        _tagged_section(cur, plan, cls)


def _tagged_section(cur: _Cursor, plan: _Plan, cls: type | None) -> None:
    if cur.pos < cur.end and cur.buf[cur.pos] == 0:  # no tagged fields: nearly every section
        cur.pos += 1
        return
    _tagged_fields(cur, plan, cls)


def _tagged_fields(cur: _Cursor, plan: _Plan, cls: type | None) -> None:
    """Step over the tagged-field section of a ``cls`` struct (None: the request header) and
    record an edit if it holds unknown tags.  The rules are in the module docstring."""
    start = cur.pos
    raw_count = cur.uvarint()
    count = max(_int32(raw_count), 0)
    changed = count != raw_count  # a count Kafka reads as negative: no fields
    kept: list[tuple[int, int] | bytes] = []  # frame spans of the fields kio is given, or fields rewritten
    for _ in range(count):
        entry = cur.pos
        raw_tag = cur.uvarint()
        tag = _int32(raw_tag)
        size = _int32(cur.uvarint())
        step = plan.tagged.get(tag)
        if step is None:
            if cls is not None and _is_foreign(cls, tag):
                raise InvalidRequest(f"tag {tag} of {cls.__name__} is not valid for version {getattr(cls, '__version__', '?')}")
            cur.need(size, f"unknown tagged field {tag}")
            cur.pos += size
            changed = True
            continue
        value = cur.pos
        mark = len(cur.edits)
        _skip_field(cur, step, True)  # tagged fields are always in the flexible encoding
        if len(cur.edits) == mark and raw_tag == tag:
            kept.append((entry, cur.pos))
            continue
        inner = _apply(cur.buf, cur.edits[mark:], value, cur.pos)  # unknown tags dropped inside it
        del cur.edits[mark:]
        kept.append(_uvarint_bytes(tag) + _uvarint_bytes(len(inner)) + inner)
        changed = True
    if changed:
        fields = [cur.buf[k[0] : k[1]] if isinstance(k, tuple) else k for k in kept]
        cur.edits.append((start, cur.pos, _uvarint_bytes(len(kept)) + b"".join(fields)))


def _skip_header(cur: _Cursor, flexible: bool) -> None:
    """api_key, api_version, correlation_id, client_id, then (v2) the header's tagged fields."""
    cur.need(8, "request header")
    cur.pos += 8
    _skip_value(cur, "string", None, False)  # client_id stays a legacy string in header v2
    if flexible:
        _tagged_section(cur, _HEADER_PLAN, None)


def scan_request(frame: bytes | memoryview, schema: Any) -> bytes | memoryview:
    """Check the bounds of the header and of the ``schema`` body in ``frame`` (InvalidRequest if
    they claim more than the frame holds, or carry a tag of another version) and return the frame
    for kio: ``frame`` itself, or a copy without the unknown tagged fields it carries."""
    flexible = bool(schema.__flexible__)
    cur = _Cursor(frame, 0)
    _skip_header(cur, flexible)
    _skip_entity(cur, schema, flexible)
    if not cur.edits:
        return frame
    return _apply(frame, cur.edits, 0, len(frame))  # bytes after the body are kept, as they were


def scan_header_v2(frame: bytes | memoryview) -> bytes | memoryview:
    """``scan_request`` for a flexible request header alone (the body is not read, KIP-511)."""
    cur = _Cursor(frame, 0)
    _skip_header(cur, True)
    if not cur.edits:
        return frame
    return _apply(frame, cur.edits, 0, len(frame))
