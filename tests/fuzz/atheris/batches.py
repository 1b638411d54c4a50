"""Harness: record-batch validation on the produce path, and what an accepted batch meets later.

Input: a flag byte, then a produce payload (one partition's records).  Flag bits: 0, compute
the CRC32C as a client would (so mutations reach the checks after the CRC); 1, set the batch
length to the payload's; 2-3, ``max.message.bytes`` (1 MiB, 1000, 200 or 70); 4, append to the
LogAppendTime topic instead of the CreateTime one.

Properties:

* ``validate_produced`` returns a header or an ``Invalid`` with an error code, never raises; a
  header it passes is one whole magic-v2 batch with a matching CRC and a consistent count.
* ``scan`` / ``scan_until_invalid`` never raise and stay within the buffer.
* ``PartitionLog.append_produced`` on a real log (temporary directory, small segments): a
  refused batch changes nothing (end offset, segment sizes; every ``CHECK_EVERY`` inputs, and
  after the last, every stored byte is compared with a shadow copy of what was accepted); an
  accepted one reads back as written, and the reads that decode records (ListOffsets by
  timestamp, the max-timestamp lookup) answer without raising.

    python -m tests.fuzz.atheris.batches -runs=250000 -seed=1
"""

from __future__ import annotations

import shutil
import struct
import sys

from tests.fuzz.atheris.common import fuzz, instrument, scratch_dir

with instrument():
    from crc32c import crc32c

    from onceflow.config import BrokerConfig, TopicConfig
    from onceflow.log.partition_log import PartitionLog
    from onceflow.protocol.errors import ErrorCode
    from onceflow.records.batch import (
        CONTROL_FLAG,
        HEADER_SIZE,
        BatchHeader,
        Invalid,
        read_header,
        scan,
        scan_until_invalid,
        validate_produced,
    )

from tests.fuzz.corpus import TIMESTAMP, quiet_onceflow_logs, sample_batches, with_crc

NOW_MS = TIMESTAMP + 60_000
CHECK_EVERY = 2000
#: Logs are started afresh past this many bytes, to keep the run's disk use bounded.
MAX_LOG_BYTES = 64 << 20
MAX_MESSAGE_BYTES = (1 << 20, 1000, 200, 70)


class Logs:
    """Two partition logs (CreateTime, LogAppendTime) and a shadow copy of what each accepted."""

    def __init__(self) -> None:
        self.root = scratch_dir("onceflow-fuzz-batches-")
        self.generation = 0
        self.logs: list[PartitionLog] = []
        self.shadow: list[list[bytes]] = []
        self.open()

    def open(self) -> None:
        self.generation += 1
        self.logs, self.shadow = [], []
        for i, kind in enumerate(("CreateTime", "LogAppendTime")):
            config = TopicConfig({"message.timestamp.type": kind, "segment.bytes": 64 << 10, "index.interval.bytes": 512},
                                 BrokerConfig())
            path = self.root / f"g{self.generation}" / f"t-{i}"
            self.logs.append(PartitionLog("t", i, path, config, NOW_MS))
            self.shadow.append([])

    def reopen_if_large(self) -> None:
        if any(log.size_bytes > MAX_LOG_BYTES for log in self.logs):
            self.close()
            self.open()

    def close(self) -> None:
        for log in self.logs:
            log.close()
        shutil.rmtree(self.root / f"g{self.generation}", ignore_errors=True)

    def check(self) -> None:
        """Every stored byte is what the accepted batches put there."""
        for log, shadow in zip(self.logs, self.shadow, strict=True):
            stored = b"".join(s.read(0, s.size) for s in log.segments)
            assert stored == b"".join(shadow), "the log's bytes differ from the accepted batches"

    def finish(self) -> None:
        self.close()
        shutil.rmtree(self.root, ignore_errors=True)


def check_header(batch: bytes, header: BatchHeader, max_bytes: int) -> None:
    """What a batch ``validate_produced`` accepted must be, checked from the raw bytes."""
    assert len(batch) >= HEADER_SIZE
    (length,) = struct.unpack_from(">i", batch, 8)
    assert length + 12 == len(batch) == header.size <= max_bytes
    assert batch[16] == 2
    assert struct.unpack_from(">I", batch, 17)[0] == crc32c(batch[21:])
    assert header.record_count == header.last_offset_delta + 1 > 0
    assert not header.attributes & CONTROL_FLAG


def check_scan(batch: bytes) -> None:
    for verify in (False, True):
        batches, stop = scan_until_invalid(batch, 0, verify_crc=verify)
        position = 0
        for pos, header in batches:
            assert pos == position and pos + header.size <= len(batch)
            position = pos + header.size
        assert stop.position == position <= len(batch)
        assert [p for p, _ in scan(batch, 0, verify)] == [p for p, _ in batches]


_LOGS: Logs | None = None


def one_input(data: bytes) -> None:
    assert _LOGS is not None
    if not data:
        return
    flags, batch = data[0], data[1:]
    if flags & 2 and len(batch) >= 12:
        batch = batch[:8] + struct.pack(">i", len(batch) - 12) + batch[12:]
    if flags & 1:
        batch = with_crc(batch)
    max_bytes = MAX_MESSAGE_BYTES[(flags >> 2) & 3]
    verdict = validate_produced(batch, max_bytes)
    if isinstance(verdict, Invalid):
        assert isinstance(verdict.error, ErrorCode) and verdict.error != ErrorCode.none and verdict.reason
    else:
        check_header(batch, verdict, max_bytes)
    check_scan(batch)
    if max_bytes != 1 << 20:
        return  # the logs' max.message.bytes is the default
    which = (flags >> 4) & 1
    log, shadow = _LOGS.logs[which], _LOGS.shadow[which]
    before = (log.log_end_offset, [(s.base_offset, s.size) for s in log.segments])
    result = log.append_produced(batch, NOW_MS)
    if isinstance(result, Invalid):
        assert (log.log_end_offset, [(s.base_offset, s.size) for s in log.segments]) == before, "a refused batch changed the log"
        return
    assert not isinstance(verdict, Invalid), f"the log accepted a batch validate_produced refused: {verdict}"
    if log.log_end_offset == before[0]:  # a retried idempotent batch: answered with its offsets, not written again
        assert [(s.base_offset, s.size) for s in log.segments] == before[1] and result.last_offset < before[0]
        return
    segment = log.segments[-1]
    position = segment.size - len(batch)
    stored = segment.read(position, len(batch))
    header = read_header(stored)
    assert header.base_offset == result.base_offset and result.last_offset == result.base_offset + header.last_offset_delta
    if which == 0:
        assert stored[16:] == batch[16:], "the stored batch is not the produced one"
    shadow.append(stored)
    point = log.flush_point()  # the high watermark moves (no fsync: the bytes are in the page cache)
    if point is not None:
        log.on_flushed(point)
    log.offset_for_timestamp(header.base_timestamp)
    log.offset_for_timestamp(header.max_timestamp)
    log.max_timestamp_offset()
    _LOGS.reopen_if_large()


def seeds() -> list[bytes]:
    out = []
    for batch in sample_batches():
        out += [b"\x00" + batch, b"\x01" + batch, b"\x10" + batch]
    return out


def main() -> None:
    global _LOGS
    errors = quiet_onceflow_logs()
    _LOGS = Logs()

    def one(data: bytes) -> None:
        one_input(data)
        assert not errors.records, "\n".join(errors.records)

    fuzz(one, seeds(), max_len=4096, check=_LOGS.check, check_every=CHECK_EVERY, finish=_LOGS.finish)


if __name__ == "__main__":
    sys.exit(main())
