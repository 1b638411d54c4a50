"""Batches the broker writes itself (coordinator records, later markers), through kio.

The produce and fetch paths never come here: they move client batches as
bytes.  This module is for the broker's own small batches: offset commits,
group metadata, later transaction state and markers.
"""

from __future__ import annotations

import datetime
import io
from collections.abc import Sequence

from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_new_batch
from kio.static.primitive import TZAwareMicros, i8, i16, i32, i64

from .batch import CONTROL_FLAG, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, TRANSACTIONAL_FLAG


def _timestamp(ms: int) -> TZAwareMicros:
    return TZAwareMicros.parse(datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC))


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]],
    timestamp_ms: int,
    *,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    timestamps: Sequence[int] | None = None,
) -> bytes:
    """An uncompressed magic-v2 batch of (key, value) records, base offset 0.

    Every record carries ``timestamp_ms`` unless ``timestamps`` gives one per record.
    """
    if not records:
        raise ValueError("a batch needs at least one record")
    stamps = [_timestamp(t) for t in timestamps] if timestamps is not None else [_timestamp(timestamp_ms)] * len(records)
    attributes = (TRANSACTIONAL_FLAG if transactional else 0) | (CONTROL_FLAG if control else 0)
    batch = NewRecordBatch(
        producer_id=i64(producer_id),
        producer_epoch=i16(producer_epoch),
        base_sequence=i32(base_sequence),
        attributes=i16(attributes),
        records=tuple(
            Record(attributes=i8(0), timestamp=stamps[i], offset=i64(i), key=key, value=value, headers=())
            for i, (key, value) in enumerate(records)
        ),
    )
    buf = io.BytesIO()
    write_new_batch(buf, batch)
    return buf.getvalue()

