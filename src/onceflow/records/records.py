"""Records inside a batch, for the few places that must look at them.

The produce and fetch paths never decode records.  Three things do:
ListOffsets by timestamp (the first *record* at or after a time, as Kafka
answers), coordinator replay at start-up (offset commits, group metadata),
and, later, log compaction (keys).  They go through ``iter_records``, which
decompresses the batch if needed (gzip, snappy, lz4, zstd: Kafka's codecs)
and walks the record layout (KIP-98, "Record")::

    length: varint | attributes: int8 | timestampDelta: varlong | offsetDelta: varint
    | keyLength: varint | key | valueLength: varint | value
    | headerCount: varint | [headerKeyLength: varint | headerKey | headerValueLength: varint | headerValue]

Varints are zig-zag encoded, as in protobuf.  kio's record reader is not
used here because it rounds record timestamps to whole seconds and does not
decompress.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from typing import NamedTuple

from .batch import COMPRESSION_MASK, HEADER_SIZE, TIMESTAMP_TYPE_MASK, BatchHeader

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
    if codec == NONE:
        return bytes(data)
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
