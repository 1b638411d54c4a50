"""A small hand-written ``BrokerContext`` for driving request handlers without a broker.

It implements the Protocol (``broker.handlers.context``) with the real
``Appender`` over real partition logs (in a temporary directory, written
directly: no I/O thread), and in-memory stand-ins for what surrounds them:
durability that the test makes happen (``HandDurability.flush``), and a
transaction coordinator whose answers the test sets.  No socket, no event loop
of the broker's, no patching: a handler gets this object as its ``broker``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from onceflow.broker.appender import Appender
from onceflow.broker.partitions import PartitionRegistry, Topic
from onceflow.clock import FakeClock
from onceflow.config import BrokerConfig
from onceflow.log.partition_log import PartitionLog
from onceflow.protocol.errors import ErrorCode
from onceflow.protocol.framing import Request, parse_request
from onceflow.security.principal import ANONYMOUS
from tests.support.wire import encode_request

T0 = 1_700_000_000_000


class HandDurability:
    """Stands in for group commit: written data reaches the disk when the test says so."""

    def __init__(self) -> None:
        self.dirty: dict[PartitionLog, None] = {}
        self.waiters: list[tuple[PartitionLog, int, Callable[[OSError | None], None]]] = []

    def mark_dirty(self, partition: PartitionLog) -> None:
        self.dirty[partition] = None

    def mark_lazy(self, partition: PartitionLog) -> None:
        self.dirty[partition] = None

    def on_durable(self, partition: PartitionLog, offset: int, waiter: Callable[[OSError | None], None]) -> None:
        self.waiters.append((partition, offset, waiter))

    def flush(self, error: OSError | None = None) -> None:
        """fsync every dirty partition (or fail them all with ``error``), then tell the waiters."""
        for partition in self.dirty:
            point = partition.flush_point()
            if point is not None and error is None:
                point.segment.flush()
                partition.on_flushed(point)
        self.dirty.clear()
        waiting, self.waiters = self.waiters, []
        for partition, offset, waiter in waiting:
            if error is not None:
                waiter(error)
            elif partition.high_watermark >= offset:
                waiter(None)
            else:
                self.waiters.append((partition, offset, waiter))


class Transactions:
    """Stands in for the transaction coordinator: its answers are the test's to set."""

    def __init__(self) -> None:
        #: What ``partition_in_transaction`` answers (KIP-890 verification).
        self.verdict = ErrorCode.none
        #: What ``end_txn`` answers, and whether at once or only when ``answer`` is called.
        self.end_outcome = ErrorCode.none
        self.end_later = False
        self.ended: list[tuple[str, int, int, bool]] = []
        self._pending: list[Callable[[ErrorCode, int, int], None]] = []

    def partition_in_transaction(self, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
                                 partition: int) -> ErrorCode:
        return self.verdict

    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool,
                done: Callable[[ErrorCode, int, int], None], client_transaction_version: int = 0) -> None:
        self.ended.append((transactional_id, producer_id, producer_epoch, commit))
        if self.end_later:
            self._pending.append(done)
        else:
            done(self.end_outcome, producer_id, producer_epoch)

    def answer(self) -> None:
        pending, self._pending = self._pending, []
        for done in pending:
            done(self.end_outcome, -1, -1)


class Markers:
    """A ``MarkerWriter`` that only records what it was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, bool, frozenset[tuple[str, int]]]] = []

    def write_markers(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool,
                      partitions: frozenset[tuple[str, int]], done: Callable[[dict[tuple[str, int], ErrorCode]], None]) -> None:
        self.asked.append((producer_id, commit, partitions))
        done(dict.fromkeys(partitions, ErrorCode.none))


class InMemoryContext:
    """A ``BrokerContext``: what handlers may use, and nothing else."""

    def __init__(self, data_dir: Path) -> None:
        self.config = BrokerConfig()
        self.clock = FakeClock(T0)
        self.registry = PartitionRegistry(data_dir, self.config)
        self.registry.open(T0)
        self.durability = HandDurability()
        self.txns: Any = Transactions()
        self.groups: Any = None  # no handler under test reaches the group coordinator
        self.appender = Appender(self.registry, self.config, self.clock, self.durability, self.txns.partition_in_transaction)
        self.marker_writer = Markers()
        self.node_id = 1
        self.advertised_host = "127.0.0.1"
        self.advertised_port = 9092
        #: No ``authorizer.class.name``: every request allowed (a test may set a StandardAuthorizer).
        self.authorizer: Any = None

    def create_topic(self, name: str, num_partitions: int, overrides: dict[str, Any], internal: bool = False) -> Topic:
        return self.registry.create_topic(name, num_partitions, overrides, self.clock.now_ms(), internal)

    def delete_topic(self, name: str) -> None:
        self.registry.delete_topic(name)

    def close(self) -> None:
        self.registry.close(clean=True)


class Conn:
    """A ``Connection``: remembers whether the handler closed it."""

    peer = "test-client:1"
    client_host = "127.0.0.1"
    listener_name = "PLAINTEXT"
    principal = ANONYMOUS

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def request(body: Any) -> Request:
    """A kio request entity as the server hands it to a handler: encoded, then parsed."""
    frame = encode_request(body, 7)
    parsed = parse_request(memoryview(frame)[4:])
    assert isinstance(parsed, Request)
    return parsed


async def settle(turns: int = 20) -> None:
    """Let every task already scheduled run as far as it can: a bounded number of event-loop turns,
    no wall-clock wait (a handler parks on a future within a few turns)."""
    for _ in range(turns):
        await asyncio.sleep(0)
