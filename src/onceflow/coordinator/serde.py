"""Kafka's primitive types, as its generated messages lay them out.

The coordinators persist their state in internal topics (``__consumer_offsets``,
``__transaction_state``) whose keys and values are Kafka's *generated
messages* (``*.json`` schemas), so that Kafka's tools can read our logs and
we can read theirs.  ``Writer`` and ``Reader`` implement the primitive types
those messages are made of; the record modules (``group.log_records``,
``transaction.log_records``) lay the fields out on top of them, and share
``RecordDecodeError`` and ``UnknownKey`` from here.

Layouts (all integers big-endian, two's complement):

* ``int8`` / ``int16`` / ``int32`` / ``int64``: 1, 2, 4, 8 bytes.
* ``uuid``: 16 bytes, most significant first (Java's two longs).
* *unsigned varint*: 7 bits a byte, least significant group first, the high
  bit set on every byte but the last; at most 5 bytes (a 32-bit value).

A message version is either *non-flexible* or *flexible* (KIP-482); the
``flexible`` flag of ``Writer`` and ``Reader`` selects the forms:

============  ==================================  ==================================
type          non-flexible                        flexible ("compact")
============  ==================================  ==================================
string        int16 length N, N bytes of UTF-8    uvarint N+1, N bytes of UTF-8
bytes         int32 length N, N bytes             uvarint N+1, N bytes
array         int32 count N, N elements           uvarint N+1, N elements
null          length / count -1                   uvarint 0
============  ==================================  ==================================

A null is only valid in a *nullable* field; elsewhere it is an error.
Strings are at most 32767 bytes of UTF-8 (the int16 limit, which Kafka
applies to compact strings too); longer ones are refused when writing.

Flexible versions end every struct with *tagged fields*: a uvarint count,
then for each field (in ascending tag order) a uvarint tag, a uvarint size
and that many bytes.  Readers skip the tags they do not know.  Non-flexible
versions have no tagged fields at all.

Writing bad values (a null in a non-nullable field, an over-long string, a
negative varint) raises ``ValueError``; reading malformed bytes (truncated,
null where not allowed, invalid UTF-8, an over-long varint) raises
``RecordDecodeError``.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass

__all__ = ["MAX_STRING_BYTES", "Reader", "RecordDecodeError", "UnknownKey", "Writer", "uvarint"]

#: The longest string, in bytes of UTF-8, that may be written.
MAX_STRING_BYTES = 0x7FFF


class RecordDecodeError(ValueError):
    """Bytes that are not a valid key or value of an internal topic."""


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key of an internal topic whose version this broker does not know."""

    version: int


def uvarint(n: int) -> bytes:
    """``n`` as an unsigned varint."""
    if n < 0:
        raise ValueError("unsigned varint of a negative number")
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class Writer:
    """Appends Kafka's primitive types; ``flexible`` switches to compact forms."""

    __slots__ = ("_parts", "flexible")

    def __init__(self, flexible: bool = False) -> None:
        self._parts: list[bytes] = []
        self.flexible = flexible

    def int8(self, v: int) -> None:
        self._parts.append(struct.pack(">b", v))

    def int16(self, v: int) -> None:
        self._parts.append(struct.pack(">h", v))

    def int32(self, v: int) -> None:
        self._parts.append(struct.pack(">i", v))

    def int64(self, v: int) -> None:
        self._parts.append(struct.pack(">q", v))

    def uvarint(self, v: int) -> None:
        self._parts.append(uvarint(v))

    def uuid(self, v: uuid.UUID) -> None:
        self._parts.append(v.bytes)

    def _length(self, n: int | None, wide: bool) -> None:
        """A length prefix (None: null); ``wide``: int32 rather than int16."""
        if self.flexible:
            self.uvarint(0 if n is None else n + 1)
        elif wide:
            self.int32(-1 if n is None else n)
        else:
            self.int16(-1 if n is None else n)

    def _sized(self, data: bytes | None, wide: bool, nullable: bool, what: str) -> None:
        """A length prefix and ``data`` (None: null, if ``nullable``)."""
        if data is None:
            if not nullable:
                raise ValueError(f"null {what} in a non-nullable field")
            self._length(None, wide)
            return
        self._length(len(data), wide)
        self._parts.append(bytes(data))

    def string(self, v: str | None, nullable: bool = False) -> None:
        data = None if v is None else v.encode("utf-8")
        if data is not None and len(data) > MAX_STRING_BYTES:
            raise ValueError(f"string of {len(data)} bytes is longer than {MAX_STRING_BYTES}")
        self._sized(data, False, nullable, "string")

    def bytes_(self, v: bytes | None, nullable: bool = False) -> None:
        self._sized(v, True, nullable, "bytes")

    def array_length(self, n: int | None) -> None:
        """An array's count (None: the null array); the elements follow."""
        self._length(n, wide=True)

    def tagged_fields(self, fields: list[tuple[int, bytes]]) -> None:
        """The tagged fields ending a struct (nothing when not flexible)."""
        if not self.flexible:
            return
        self.uvarint(len(fields))
        for tag, data in sorted(fields):
            self.uvarint(tag)
            self.uvarint(len(data))
            self._parts.append(data)

    def getvalue(self) -> bytes:
        return b"".join(self._parts)


class Reader:
    """Reads Kafka's primitive types; ``flexible`` switches to compact forms.

    The flag may be changed while reading (a value's version, read first,
    decides the form of what follows).
    """

    __slots__ = ("_buf", "_pos", "flexible")

    def __init__(self, buf: bytes, flexible: bool = False) -> None:
        self._buf = memoryview(bytes(buf))
        self._pos = 0
        self.flexible = flexible

    def take(self, n: int) -> bytes:
        if n < 0 or self._pos + n > len(self._buf):
            raise RecordDecodeError(f"truncated record: wanted {n} bytes at {self._pos} of {len(self._buf)}")
        out = bytes(self._buf[self._pos : self._pos + n])
        self._pos += n
        return out

    def int8(self) -> int:
        return int(struct.unpack(">b", self.take(1))[0])

    def int16(self) -> int:
        return int(struct.unpack(">h", self.take(2))[0])

    def int32(self) -> int:
        return int(struct.unpack(">i", self.take(4))[0])

    def int64(self) -> int:
        return int(struct.unpack(">q", self.take(8))[0])

    def uvarint(self) -> int:
        result = 0
        shift = 0
        while True:
            b = self.take(1)[0]
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 28:
                raise RecordDecodeError("unsigned varint longer than 5 bytes")

    def _length(self, wide: bool, nullable: bool, what: str) -> int | None:
        """A length prefix (``wide``: int32 rather than int16); None: null."""
        if self.flexible:
            n = self.uvarint() - 1
        else:
            n = self.int32() if wide else self.int16()
        if n == -1 and nullable:
            return None
        if n == -1:
            raise RecordDecodeError(f"null {what} in a non-nullable field")
        if n < 0:
            raise RecordDecodeError(f"negative {what} length {n}")
        return n

    def string(self, nullable: bool = False) -> str | None:
        n = self._length(False, nullable, "string")
        if n is None:
            return None
        try:
            return self.take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordDecodeError(f"invalid UTF-8 in string: {exc}") from None

    def bytes_(self, nullable: bool = False) -> bytes | None:
        n = self._length(True, nullable, "bytes")
        return None if n is None else self.take(n)

    def array_length(self, nullable: bool = False) -> int | None:
        """An array's count; None for the null array (if ``nullable``)."""
        return self._length(True, nullable, "array")

    # Non-nullable reads, typed without None.

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=self.take(16))

    def required_string(self) -> str:
        s = self.string()
        assert s is not None
        return s

    def required_bytes(self) -> bytes:
        b = self.bytes_()
        assert b is not None
        return b

    def required_array_length(self) -> int:
        n = self.array_length()
        assert n is not None
        return n

    def tagged_fields(self) -> dict[int, bytes]:
        """The tagged fields ending a struct, by tag (empty when not flexible)."""
        if not self.flexible:
            return {}
        fields: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            fields[tag] = self.take(self.uvarint())
        return fields

    def skip_tagged_fields(self) -> None:
        self.tagged_fields()
