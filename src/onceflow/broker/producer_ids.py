"""Producer ids that are never handed out twice, across restarts too.

Theory of operation: ids are reserved in blocks of 1000, as Kafka's
controller reserves them (KIP-730, AllocateProducerIds).  Before the first
id of a block is used, the start of the *next* block is written to
``<data dir>/producer_ids`` (atomically, fsynced).  After a crash the broker
resumes at that next block: the ids left unused in the old block are
skipped, never reused, so a restarted broker can never give a new producer
the id of one whose batches are still in some log.
"""

from __future__ import annotations

import logging
from pathlib import Path

from ..fileio import atomic_write

log = logging.getLogger(__name__)

BLOCK_SIZE = 1000
FILE_NAME = "producer_ids"


class ProducerIdBlocks:
    def __init__(self, data_dir: Path, block_size: int = BLOCK_SIZE) -> None:
        self.path = data_dir / FILE_NAME
        self.block_size = block_size
        self._next = 0
        self._block_end = 0  # ids below this are reserved on disk
        if self.path.exists():
            text = self.path.read_text().strip()
            try:
                self._next = self._block_end = int(text.partition("=")[2])
            except ValueError:
                raise RuntimeError(f"{self.path} is damaged ({text!r}); refusing to risk reusing producer ids") from None

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._reserve(self._next + self.block_size)
        producer_id = self._next
        self._next += 1
        return producer_id

    def _reserve(self, block_end: int) -> None:
        atomic_write(self.path, f"next.block.start={block_end}\n")
        self._block_end = block_end
        log.debug("reserved producer ids [%d, %d)", self._next, block_end)
