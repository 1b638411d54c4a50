"""Record batches (magic v2) as stored bytes: header view, validation, offset patching.

Theory of operation: the broker never decodes records on the produce or
fetch path.  It reads the fixed 61-byte batch header, checks the CRC32C over
the rest of the batch, assigns offsets by rewriting ``baseOffset`` (which the
CRC does not cover) and stores the bytes exactly as produced.  Everything
the log needs (offset range, timestamps, producer id/epoch/sequence, the
transactional and control flags) is in the header.

Wire layout (big-endian; KIP-98 "Message Format")::

    offset  size  field
    0       8     baseOffset
    8       4     batchLength            bytes after this field
    12      4     partitionLeaderEpoch
    16      1     magic                  2
    17      4     crc                    CRC32C of bytes 21..end
    21      2     attributes             bits 0-2 compression, 3 timestamp type,
                                         4 transactional, 5 control, 6 delete horizon
    23      4     lastOffsetDelta
    27      8     baseTimestamp
    35      8     maxTimestamp
    43      8     producerId
    51      2     producerEpoch
    53      4     baseSequence
    57      4     recordCount
    61      ...   records
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from crc32c import crc32c

from ..protocol.errors import ErrorCode

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength: bytes not counted by batchLength
CRC_START = 21
MAGIC_OFFSET = 16
CURRENT_MAGIC = 2
#: Kafka's LegacyRecord.RECORD_OVERHEAD_V0: no batch length below it is read as a batch.
_MIN_RECORD_OVERHEAD = 14

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_TIMESTAMP = -1

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies in the log."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    return BatchHeader._make(HEADER.unpack_from(buf, pos))


def crc_matches(buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader) -> bool:
    view = memoryview(buf)[pos + CRC_START : pos + header.size]
    return crc32c(view) == header.crc


class Invalid(NamedTuple):
    """A batch refused on produce, with the error Kafka gives and why (for the log line)."""

    error: ErrorCode
    reason: str


def validate_produced(records: bytes, max_message_bytes: int) -> BatchHeader | Invalid:
    """Check a partition's produce payload the way Kafka's ProduceRequest and
    LogValidator do, without looking at individual records.

    Since Produce v3 a partition's payload must be exactly one magic-v2 batch.
    The framing checks come in Kafka's order (``ByteBufferLogInputStream.nextBatchSize``,
    then ``ProduceRequest.validateRecords``), so each bad shape gets Kafka's code: bytes that
    hold no whole batch are INVALID_RECORD ("at least one record batch"), a length below the
    smallest record or an impossible magic is CORRUPT_MESSAGE.
    """
    n = len(records)
    if n < LOG_OVERHEAD:
        return Invalid(ErrorCode.invalid_record, f"{n} bytes hold no record batch")
    batch_length = int.from_bytes(records[8:12], "big", signed=True)
    if batch_length < _MIN_RECORD_OVERHEAD:
        return Invalid(ErrorCode.corrupt_message,
                       f"record size {batch_length} is less than the minimum record overhead ({_MIN_RECORD_OVERHEAD})")
    if n <= MAGIC_OFFSET:
        return Invalid(ErrorCode.invalid_record, f"{n} bytes hold no record batch")
    magic = int.from_bytes(records[MAGIC_OFFSET : MAGIC_OFFSET + 1], "big", signed=True)
    if not 0 <= magic <= CURRENT_MAGIC:
        return Invalid(ErrorCode.corrupt_message, f"invalid magic {magic}")
    if n < batch_length + LOG_OVERHEAD:
        return Invalid(ErrorCode.invalid_record, f"a batch of {batch_length + LOG_OVERHEAD} bytes is cut to {n}")
    if magic < CURRENT_MAGIC:
        return Invalid(ErrorCode.invalid_record, f"magic {magic} batches are not accepted (produce v3+)")
    if n < HEADER_SIZE or batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return Invalid(ErrorCode.corrupt_message, f"a magic-2 batch of {batch_length + LOG_OVERHEAD} bytes cannot hold its header")
    header = read_header(records)
    if header.size < n:
        return Invalid(ErrorCode.invalid_record, "a produce payload must hold exactly one record batch")
    if header.size > max_message_bytes:
        return Invalid(
            ErrorCode.message_too_large, f"batch of {header.size} bytes exceeds max.message.bytes={max_message_bytes}"
        )
    if not crc_matches(records, 0, header):
        return Invalid(ErrorCode.corrupt_message, "record batch CRC mismatch")
    if header.record_count <= 0 or header.last_offset_delta < 0:
        return Invalid(ErrorCode.invalid_record, f"batch reports {header.record_count} records")
    if header.record_count != header.last_offset_delta + 1:
        return Invalid(
            ErrorCode.invalid_record,
            f"inconsistent batch offset range ({header.last_offset_delta + 1}) and record count ({header.record_count})",
        )
    # Each record takes at least 7 bytes (length, attributes, three varints, header count), but
    # only before compression: many small records compress to far fewer bytes.
    if not header.attributes & COMPRESSION_MASK and header.record_count * 7 > header.size - HEADER_SIZE:
        return Invalid(ErrorCode.corrupt_message, f"{header.record_count} records cannot fit in {header.size} bytes")
    if header.is_control:
        return Invalid(ErrorCode.invalid_record, "clients may not produce control batches")
    if header.is_transactional and not header.has_producer_id:
        return Invalid(ErrorCode.invalid_record, "a transactional batch must carry a producer id")
    if header.has_producer_id and header.base_sequence < 0:
        # LogValidator.validateBatch: accepted, it would make the producer's next
        # batch look out of order (issue 7).
        return Invalid(ErrorCode.invalid_record,
                       f"invalid sequence number {header.base_sequence} in a batch of producer {header.producer_id}")
    return header


def stamped_prefix(base_offset: int, header: BatchHeader) -> bytes:
    """The first 16 bytes of a stored batch: its assigned base offset, length and leader epoch 0.

    None of them is covered by the CRC, so the rest of the batch is written unchanged.
    """
    return _PREFIX.pack(base_offset, header.batch_length, 0)


def with_log_append_time(records: bytes, header: BatchHeader, timestamp_ms: int) -> bytes:
    """A copy of the batch marked LogAppendTime with ``maxTimestamp`` set, and its CRC redone.

    This is Kafka's ``message.timestamp.type=LogAppendTime``: consumers take
    every record's timestamp from the batch's max timestamp.
    """
    out = bytearray(records)
    struct.pack_into(">h", out, 21, header.attributes | TIMESTAMP_TYPE_MASK)
    struct.pack_into(">q", out, 35, timestamp_ms)
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)


class ScanStop(NamedTuple):
    """Where ``scan`` stopped and why (None: it reached the end cleanly)."""

    position: int
    reason: str | None


def scan(buf: bytes | bytearray | memoryview, start: int = 0, verify_crc: bool = False) -> Iterator[tuple[int, BatchHeader]]:
    """Yield (position, header) of each complete batch in ``buf`` from ``start``.

    Stops silently at the first incomplete or invalid batch; use ``scan_until_invalid``
    to learn where and why.
    """
    yield from _scan(buf, start, verify_crc, [])


def scan_until_invalid(
    buf: bytes | bytearray | memoryview, start: int = 0, verify_crc: bool = True
) -> tuple[list[tuple[int, BatchHeader]], ScanStop]:
    """All complete valid batches from ``start``, and where the valid data ends."""
    stop: list[ScanStop] = []
    batches = list(_scan(buf, start, verify_crc, stop))
    return batches, stop[0]


def _scan(
    buf: bytes | bytearray | memoryview, pos: int, verify_crc: bool, stop: list[ScanStop]
) -> Iterator[tuple[int, BatchHeader]]:
    end = len(buf)
    while True:
        if pos == end:
            stop.append(ScanStop(pos, None))
            return
        if end - pos < HEADER_SIZE:
            stop.append(ScanStop(pos, f"{end - pos} trailing bytes are not a whole batch header"))
            return
        header = read_header(buf, pos)
        if header.magic != CURRENT_MAGIC:
            stop.append(ScanStop(pos, f"magic {header.magic}"))
            return
        if header.batch_length < HEADER_SIZE - LOG_OVERHEAD:
            stop.append(ScanStop(pos, f"batch length {header.batch_length}"))
            return
        if pos + header.size > end:
            stop.append(ScanStop(pos, f"batch of {header.size} bytes is cut off after {end - pos}"))
            return
        if verify_crc and not crc_matches(buf, pos, header):
            stop.append(ScanStop(pos, "CRC mismatch"))
            return
        yield pos, header
        pos += header.size
