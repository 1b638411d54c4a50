"""COMMIT and ABORT markers: the control batches that end a transaction in a partition.

A marker is an ordinary batch in the log with the *control* and
*transactional* attribute bits set, carrying the producer id and epoch of
the transaction it ends and exactly one record (KIP-98, "Control
Messages")::

    key   = int16 version (0) | int16 type (0 = ABORT, 1 = COMMIT)
    value = int16 version (0) | int32 coordinator epoch        (EndTransactionMarker)

The broker writes markers itself (the transaction coordinator's marker
writer); clients may not produce them.  Readers skip control batches: a
read_committed consumer uses them, with the aborted-transaction list of the
Fetch response, to know where each transaction ended.
"""

from __future__ import annotations

import functools
import struct
from typing import NamedTuple

from .batch import HEADER_SIZE, BatchHeader
from .builder import build_batch
from .records import iter_records

ABORT = 0
COMMIT = 1
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0

_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    timestamp: int


@functools.lru_cache(maxsize=256)
def build_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int, timestamp_ms: int) -> bytes:
    """A marker batch (base offset 0).  Cached: a transaction's markers, one per partition,
    are the same bytes, written in the same millisecond."""
    key = _KEY.pack(CONTROL_KEY_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    return build_batch(
        [(key, value)],
        timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transactional=True,
        control=True,
    )


def read_marker(batch: bytes | memoryview, header: BatchHeader) -> Marker | None:
    """The marker a control batch carries, or None for an empty or unknown control batch."""
    if not header.is_control or len(batch) < HEADER_SIZE:
        return None
    for record in iter_records(batch, header):
        if record.key is None or len(record.key) < _KEY.size:
            return None
        _, kind = _KEY.unpack_from(record.key)
        if kind not in (ABORT, COMMIT):
            return None  # other control types (KRaft's) are not transaction markers
        coordinator_epoch = -1
        if record.value is not None and len(record.value) >= _VALUE.size:
            _, coordinator_epoch = _VALUE.unpack_from(record.value)
        return Marker(header.producer_id, header.producer_epoch, kind == COMMIT, coordinator_epoch, record.timestamp)
    return None
