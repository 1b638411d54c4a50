"""The real broker as a child process (``onceflow.broker.process``, shared with the tools), the
settings tests start it with, and its data directory read directly."""

from __future__ import annotations

from pathlib import Path

import pytest

from onceflow.broker.process import FAST_GROUPS, BrokerProcess
from onceflow.log.compaction import read_checkpoint

__all__ = ["FAST_GROUPS", "SEGMENT_SHAPES", "SMALL_SEGMENTS", "BrokerProcess", "cleaned_through", "partition_dir"]

#: Every segment, the internal topics' too, rolls at 1 KiB: transactions then outlive several
#: rolls and coordinators reload across segments, the shapes where issue 7's bugs hid.
SMALL_SEGMENTS = {"log.segment.bytes": "1024", "offsets.topic.segment.bytes": "1024",
                  "transaction.state.log.segment.bytes": "1024"}

#: ``@pytest.mark.parametrize("broker_process", SEGMENT_SHAPES, indirect=True)`` runs a test
#: against a broker with Kafka's default segment sizes and one with 1 KiB segments.
SEGMENT_SHAPES = [pytest.param({}, id="default-segments"), pytest.param(SMALL_SEGMENTS, id="1KiB-segments")]


def partition_dir(broker: BrokerProcess, topic: str, partition: int = 0) -> Path:
    return broker.data_dir / f"{topic}-{partition}"


def segment_sizes(directory: Path) -> list[int]:
    """The sizes of a partition directory's segment files, oldest first; a segment that retention
    or the cleaner deletes while it is being listed is left out (no FileNotFoundError race)."""
    sizes = []
    for path in sorted(directory.glob("*.log")):
        try:
            sizes.append(path.stat().st_size)
        except FileNotFoundError:
            continue
    return sizes


def cleaned_through(directory: Path, offset: int) -> bool:
    """The cleaner's checkpoint has passed ``offset``."""
    checkpoint = read_checkpoint(directory)
    return checkpoint is not None and checkpoint > offset
