"""Records inside a batch, for the few places that must look at them.

The produce and fetch paths never decode records.  Three things do:
ListOffsets by timestamp (the first *record* at or after a time, as Kafka
answers), coordinator replay at start-up (offset commits, group metadata),
and log compaction (keys; ``log.compaction``).  They go through
``iter_records`` (or ``iter_raw_records``, which also keeps each record's
encoded bytes), which decompress the batch if needed (gzip, snappy, lz4,
zstd: Kafka's codecs) and walk the record layout (KIP-98, "Record")::

    length: varint | attributes: int8 | timestampDelta: varlong | offsetDelta: varint
    | keyLength: varint | key | valueLength: varint | value
    | headerCount: varint | [headerKeyLength: varint | headerKey | headerValueLength: varint | headerValue]

Varints are zig-zag encoded, as in protobuf.  kio's record reader is not
used here because it rounds record timestamps to whole seconds and does not
decompress.

The cleaner also *writes* batches: ``encode_batch`` builds a magic-v2 batch
from already-encoded records, keeping whatever base offset, last offset
delta, producer fields and timestamps it is given (kio's writer numbers
records from 0 and cannot leave offset gaps, which a compacted batch has).
"""

from __future__ import annotations

import gzip
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import NamedTuple

from crc32c import crc32c

from .batch import COMPRESSION_MASK, CRC_START, CURRENT_MAGIC, HEADER, HEADER_SIZE, LOG_OVERHEAD, TIMESTAMP_TYPE_MASK, BatchHeader

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


class CorruptRecords(ValueError):
    pass


def decompress(codec: int, data: bytes | memoryview) -> bytes:
    """The records of a batch compressed with ``codec``; bytes the codec refuses raise CorruptRecords."""
    if codec == NONE:
        return bytes(data)
    import cramjam

    try:
        return _decompress(codec, data)
    except (OSError, EOFError, zlib.error, cramjam.DecompressionError) as exc:
        raise CorruptRecords(f"compressed records do not decompress: {type(exc).__name__}: {exc}") from None


def _decompress(codec: int, data: bytes | memoryview) -> bytes:
    if codec == GZIP:
        return gzip.decompress(data)
    import cramjam

    if codec == SNAPPY:
        raw = bytes(data)
        if raw.startswith(_XERIAL_MAGIC):  # Java's snappy-java stream framing
            out = bytearray()
            pos = 16
            while pos + 4 <= len(raw):
                size = int.from_bytes(raw[pos : pos + 4], "big")
                out += bytes(cramjam.snappy.decompress_raw(raw[pos + 4 : pos + 4 + size]))
                pos += 4 + size
            return bytes(out)
        return bytes(cramjam.snappy.decompress_raw(raw))
    if codec == LZ4:
        return bytes(cramjam.lz4.decompress(bytes(data)))
    if codec == ZSTD:
        return bytes(cramjam.zstd.decompress(bytes(data)))
    raise CorruptRecords(f"unknown compression codec {codec}")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        if pos >= len(buf):
            raise CorruptRecords("varint runs past the end of the records")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecords("varint too long")


def _bytes(buf: bytes, pos: int) -> tuple[bytes | None, int]:
    length, pos = _varint(buf, pos)
    if length < 0:
        return None, pos
    if pos + length > len(buf):
        raise CorruptRecords("record field runs past the end of the records")
    return buf[pos : pos + length], pos + length


def iter_records(batch: bytes | memoryview, header: BatchHeader) -> Iterator[Record]:
    """Every record of one stored batch, with absolute offsets and timestamps."""
    body = decompress(header.attributes & COMPRESSION_MASK, memoryview(batch)[HEADER_SIZE : header.size])
    log_append_time = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    pos = 0
    for _ in range(header.record_count):
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise CorruptRecords("record length runs past the end of the batch")
        pos += 1  # attributes (unused)
        ts_delta, pos = _varint(body, pos)
        offset_delta, pos = _varint(body, pos)
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        count, pos = _varint(body, pos)
        headers = []
        for _ in range(count):
            hkey, pos = _bytes(body, pos)
            hvalue, pos = _bytes(body, pos)
            headers.append(((hkey or b"").decode("utf-8", "replace"), hvalue))
        if pos != end:
            raise CorruptRecords("record length does not match its fields")
        timestamp = header.max_timestamp if log_append_time else header.base_timestamp + ts_delta
        yield Record(header.base_offset + offset_delta, timestamp, key, value, tuple(headers))


# -- raw records and the batch encoder -------------------------------------------


class RawRecord(NamedTuple):
    """One record as stored: its deltas, key and value, and the encoded bytes
    of everything from the key on (key, value, headers), to re-emit unchanged."""

    attributes: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None
    value: bytes | None
    #: key length .. last header, as encoded.
    fields: bytes
    #: The whole record as encoded, length prefix included.
    encoded: bytes


def iter_raw_records(batch: bytes | memoryview, header: BatchHeader) -> Iterator[RawRecord]:
    """Every record of one stored batch, undecoded beyond its key and value (decompressed if needed)."""
    body = decompress(header.attributes & COMPRESSION_MASK, memoryview(batch)[HEADER_SIZE : header.size])
    pos = 0
    for _ in range(header.record_count):
        start = pos
        length, pos = _varint(body, pos)
        end = pos + length
        if length < 0 or end > len(body):
            raise CorruptRecords("record length runs past the end of the batch")
        attributes = body[pos]
        ts_delta, pos = _varint(body, pos + 1)
        offset_delta, pos = _varint(body, pos)
        fields_start = pos
        key, pos = _bytes(body, pos)
        value, pos = _bytes(body, pos)
        count, pos = _varint(body, pos)
        for _ in range(count):
            _, pos = _bytes(body, pos)
            _, pos = _bytes(body, pos)
        if pos != end:
            raise CorruptRecords("record length does not match its fields")
        yield RawRecord(attributes, ts_delta, offset_delta, key, value, body[fields_start:end], body[start:end])


def encode_varint(value: int) -> bytes:
    """A zig-zag varint (varlong), as records use."""
    n = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _encode_bytes(data: bytes | None) -> bytes:
    if data is None:
        return encode_varint(-1)
    return encode_varint(len(data)) + data


def encode_fields(key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]] = ()) -> bytes:
    """The key/value/headers part of a record."""
    parts = [_encode_bytes(key), _encode_bytes(value), encode_varint(len(headers))]
    for hkey, hvalue in headers:
        parts.append(_encode_bytes(hkey.encode()))
        parts.append(_encode_bytes(hvalue))
    return b"".join(parts)


def encode_record(offset_delta: int, timestamp_delta: int, fields: bytes, attributes: int = 0) -> bytes:
    """One record: length prefix, attributes, the two deltas, then ``fields`` (see ``encode_fields``)."""
    inner = bytes([attributes]) + encode_varint(timestamp_delta) + encode_varint(offset_delta) + fields
    return encode_varint(len(inner)) + inner


def encode_batch(
    *,
    base_offset: int,
    last_offset_delta: int,
    attributes: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    records: Sequence[bytes],
    partition_leader_epoch: int = 0,
) -> bytes:
    """An uncompressed magic-v2 batch of ``records`` (each from ``encode_record``), with a fresh CRC32C.

    Every header field is taken as given: offsets need not be contiguous
    (``last_offset_delta`` may exceed the record count), and an empty
    ``records`` makes the empty batch the cleaner keeps for a producer's
    last sequence number.  Layout (big-endian, KIP-98 "Message Format")::

        +--------------------------------------------------------------+
        | baseOffset int64 | batchLength int32 | partitionLeaderEpoch int32 |
        +--------------------------------------------------------------+
        | magic int8 = 2 | crc uint32  (CRC32C of attributes .. end)   |
        +--------------------------------------------------------------+
        | attributes int16  compression 0-2 | timestampType 3 |        |
        |                   transactional 4 | control 5 | horizon 6    |
        | lastOffsetDelta int32 | baseTimestamp int64 | maxTimestamp int64 |
        | producerId int64 | producerEpoch int16 | baseSequence int32   |
        | recordCount int32 | records ...                              |
        +--------------------------------------------------------------+
    """
    if attributes & COMPRESSION_MASK:
        raise ValueError("encode_batch writes uncompressed batches only")
    body = b"".join(records)
    size = HEADER_SIZE + len(body)
    out = bytearray(size)
    HEADER.pack_into(
        out, 0, base_offset, size - LOG_OVERHEAD, partition_leader_epoch, CURRENT_MAGIC, 0, attributes,
        last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch, base_sequence, len(records),
    )
    out[HEADER_SIZE:] = body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
