"""Kafka's primitive types for internal records (coordinator/serde.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from onceflow.coordinator import serde
from onceflow.coordinator.group import log_records as group_records
from onceflow.coordinator.serde import Reader, RecordDecodeError, Writer
from onceflow.coordinator.transaction import log_records

flexibility = st.booleans()


def test_record_modules_share_the_error() -> None:
    assert group_records.RecordDecodeError is RecordDecodeError
    assert log_records.RecordDecodeError is RecordDecodeError
    assert group_records.UnknownKey is log_records.UnknownKey is serde.UnknownKey
    assert issubclass(RecordDecodeError, ValueError)


def test_fixed_width_integers_are_big_endian() -> None:
    w = Writer()
    w.int8(-2)
    w.int16(0x0102)
    w.int32(-1)
    w.int64(0x0102030405060708)
    data = w.getvalue()
    assert data == b"\xfe" + b"\x01\x02" + b"\xff" * 4 + bytes(range(1, 9))
    r = Reader(data)
    assert (r.int8(), r.int16(), r.int32(), r.int64()) == (-2, 0x0102, -1, 0x0102030405060708)


@given(st.integers(-128, 127), st.integers(-(2**15), 2**15 - 1), st.integers(-(2**31), 2**31 - 1),
       st.integers(-(2**63), 2**63 - 1))
def test_integer_round_trip(i8: int, i16: int, i32: int, i64: int) -> None:
    w = Writer()
    w.int8(i8)
    w.int16(i16)
    w.int32(i32)
    w.int64(i64)
    r = Reader(w.getvalue())
    assert (r.int8(), r.int16(), r.int32(), r.int64()) == (i8, i16, i32, i64)


@pytest.mark.parametrize(
    "n,encoded",
    [(0, b"\x00"), (1, b"\x01"), (127, b"\x7f"), (128, b"\x80\x01"), (300, b"\xac\x02"),
     (2**32 - 1, b"\xff\xff\xff\xff\x0f")],
)
def test_uvarint_layout(n: int, encoded: bytes) -> None:
    assert serde.uvarint(n) == encoded
    assert Reader(encoded).uvarint() == n


@given(st.integers(0, 2**35 - 1))
def test_uvarint_round_trip_up_to_five_bytes(n: int) -> None:
    w = Writer()
    w.uvarint(n)
    assert len(w.getvalue()) <= 5
    assert Reader(w.getvalue()).uvarint() == n


def test_uvarint_limits() -> None:
    with pytest.raises(ValueError):
        serde.uvarint(-1)
    with pytest.raises(RecordDecodeError, match="longer than 5 bytes"):
        Reader(b"\x80\x80\x80\x80\x80\x01").uvarint()
    with pytest.raises(RecordDecodeError, match="truncated"):
        Reader(b"\x80\x80").uvarint()


def test_string_layouts() -> None:
    w = Writer()
    w.string("héllo")
    w.string(None, nullable=True)
    assert w.getvalue() == b"\x00\x06h\xc3\xa9llo" + b"\xff\xff"
    w = Writer(flexible=True)
    w.string("héllo")
    w.string(None, nullable=True)
    assert w.getvalue() == b"\x07h\xc3\xa9llo" + b"\x00"


def test_bytes_and_array_layouts() -> None:
    w = Writer()
    w.bytes_(b"ab")
    w.bytes_(None, nullable=True)
    w.array_length(3)
    w.array_length(None)
    assert w.getvalue() == b"\x00\x00\x00\x02ab" + b"\xff" * 4 + b"\x00\x00\x00\x03" + b"\xff" * 4
    w = Writer(flexible=True)
    w.bytes_(b"ab")
    w.bytes_(None, nullable=True)
    w.array_length(3)
    w.array_length(None)
    assert w.getvalue() == b"\x03ab" + b"\x00" + b"\x04" + b"\x00"


@given(flexibility, st.text(max_size=50), st.none() | st.text(max_size=50), st.binary(max_size=50),
       st.none() | st.binary(max_size=50), st.none() | st.integers(0, 1000))
def test_round_trip(flexible: bool, s: str, ns: str | None, b: bytes, nb: bytes | None, n: int | None) -> None:
    w = Writer(flexible=flexible)
    w.string(s)
    w.string(ns, nullable=True)
    w.bytes_(b)
    w.bytes_(nb, nullable=True)
    w.array_length(n)
    r = Reader(w.getvalue(), flexible=flexible)
    assert r.required_string() == s
    assert r.string(nullable=True) == ns
    assert r.required_bytes() == b
    assert r.bytes_(nullable=True) == nb
    assert r.array_length(nullable=True) == n


@pytest.mark.parametrize("flexible", [False, True])
def test_null_where_not_nullable(flexible: bool) -> None:
    w = Writer(flexible=flexible)
    with pytest.raises(ValueError):
        w.string(None)
    with pytest.raises(ValueError):
        w.bytes_(None)
    w.string(None, nullable=True)
    w.bytes_(None, nullable=True)
    w.array_length(None)
    data = w.getvalue()
    for read in (Reader.required_string, Reader.required_bytes, Reader.required_array_length):
        r = Reader(data, flexible=flexible)
        with pytest.raises(RecordDecodeError, match="null"):
            read(r)
    r = Reader(data, flexible=flexible)
    assert (r.string(nullable=True), r.bytes_(nullable=True), r.array_length(nullable=True)) == (None, None, None)


def test_negative_lengths_are_malformed() -> None:
    with pytest.raises(RecordDecodeError):
        Reader(b"\xff\xfe").string(nullable=True)
    with pytest.raises(RecordDecodeError):
        Reader(b"\xff\xff\xff\xfe").bytes_(nullable=True)
    with pytest.raises(RecordDecodeError):
        Reader(b"\xff\xff\xff\xfe").array_length(nullable=True)


def test_invalid_utf8() -> None:
    with pytest.raises(RecordDecodeError, match="UTF-8"):
        Reader(b"\x00\x01\xff").string()


def test_max_string_length() -> None:
    for flexible in (False, True):
        w = Writer(flexible=flexible)
        w.string("x" * serde.MAX_STRING_BYTES)
        assert Reader(w.getvalue(), flexible=flexible).string() == "x" * serde.MAX_STRING_BYTES
        with pytest.raises(ValueError):
            w.string("x" * (serde.MAX_STRING_BYTES + 1))
        with pytest.raises(ValueError):  # the limit is in bytes of UTF-8
            w.string("é" * (serde.MAX_STRING_BYTES // 2 + 1))


@pytest.mark.parametrize(
    "read,data",
    [
        (Reader.int8, b""),
        (Reader.int16, b"\x00"),
        (Reader.int32, b"\x00\x00\x00"),
        (Reader.int64, b"\x00" * 7),
        (Reader.required_string, b"\x00"),
        (Reader.required_string, b"\x00\x03ab"),
        (Reader.required_bytes, b"\x00\x00\x00\x03ab"),
        (Reader.required_array_length, b"\x00\x00"),
    ],
)
def test_truncated_input(read, data: bytes) -> None:
    with pytest.raises(RecordDecodeError, match="truncated"):
        read(Reader(data))


def test_truncated_compact_input() -> None:
    with pytest.raises(RecordDecodeError, match="truncated"):
        Reader(b"\x04ab", flexible=True).string()
    with pytest.raises(RecordDecodeError, match="truncated"):
        Reader(b"\x04ab", flexible=True).bytes_()
    with pytest.raises(RecordDecodeError, match="truncated"):
        Reader(b"\x01\x00\x05ab", flexible=True).tagged_fields()


def test_tagged_fields() -> None:
    w = Writer(flexible=True)
    w.tagged_fields([(5, b"xyz"), (0, b"\x01")])  # written in tag order
    w.tagged_fields([])
    w.int8(7)
    data = w.getvalue()
    assert data == b"\x02" + b"\x00\x01\x01" + b"\x05\x03xyz" + b"\x00" + b"\x07"
    r = Reader(data, flexible=True)
    assert r.tagged_fields() == {0: b"\x01", 5: b"xyz"}
    assert r.tagged_fields() == {}
    assert r.int8() == 7
    r = Reader(data, flexible=True)
    r.skip_tagged_fields()
    r.skip_tagged_fields()
    assert r.int8() == 7


def test_no_tagged_fields_when_not_flexible() -> None:
    w = Writer()
    w.tagged_fields([(0, b"\x01")])
    assert w.getvalue() == b""
    r = Reader(b"\x01")
    assert r.tagged_fields() == {}
    r.skip_tagged_fields()
    assert r.int8() == 1


def test_flexible_can_be_switched_while_reading() -> None:
    # A version field (non-flexible int16) decides the form of the rest.
    r = Reader(b"\x00\x04" + b"\x03hi")
    assert r.int16() == 4
    r.flexible = True
    assert r.string() == "hi"
