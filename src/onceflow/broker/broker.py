"""The broker: one object that owns every component and runs them on one event loop.

Theory of operation: ``Broker.start`` opens the data directory (recovering
logs if the last stop was not clean), replays ``__consumer_offsets`` into the
group coordinator, starts the group-commit flusher and the timer task, and
only then listens.  Every request is dispatched by API key to a function in
``broker.handlers``; handlers reach the components through this object.
``Broker.stop`` stops listening, answers what is pending, fsyncs everything,
and leaves the clean-shutdown marker so the next start skips recovery.

Everything runs on the event loop thread except writing log data to files
and fsync, which the I/O thread does (``log.durability``); components need
no locks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..clock import Clock, SystemClock
from ..config import BrokerConfig
from ..coordinator.group.coordinator import GroupCoordinator
from ..log.durability import GroupCommit, IoThread
from ..log.partition_log import PartitionLog
from ..protocol import apis
from ..protocol.errors import ErrorCode
from ..protocol.framing import Request, UnknownApiVersions
from ..records.batch import scan
from ..records.builder import build_batch
from ..records.records import iter_records
from .handlers import HANDLERS
from .handlers.metadata import unknown_api_versions_response
from .partitions import PartitionRegistry, Topic
from .server import KafkaProtocol, ServerState

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
TICK_SECONDS = 0.01


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        data_dir: str | Path,
        host: str = "127.0.0.1",
        port: int = 9092,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.data_dir = Path(data_dir)
        self.host = host
        self.port = port
        self.clock: Clock = clock or SystemClock()
        self.node_id: int = config["node.id"]
        self.io = IoThread()
        self.registry = PartitionRegistry(self.data_dir, config, self.io)
        self.group_commit: GroupCommit | None = None
        self.groups = GroupCoordinator(config, self.clock, OffsetsTopicStore(self))
        self.state = ServerState()
        self._server: asyncio.AbstractServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._missing = [key for key in apis.SUPPORTED if key not in HANDLERS]
        if self._missing:
            raise RuntimeError(f"APIs in the SUPPORTED table without a handler: {self._missing}")

    # -- lifetime -------------------------------------------------------------

    async def start(self) -> None:
        self.registry.open(self.clock.now_ms())
        self.group_commit = GroupCommit(self.io)
        self.group_commit.start()
        self._load_groups()
        loop = asyncio.get_running_loop()
        max_frame = self.config["socket.request.max.bytes"]
        max_in_flight = self.config["queued.max.requests"]
        self._server = await loop.create_server(
            lambda: KafkaProtocol(self.dispatch, self._unknown_api_versions, self.state, max_frame, max_in_flight),
            self.host,
            self.port,
            reuse_address=True,
        )
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        self._tasks.append(loop.create_task(self._timers(), name="onceflow-timers"))
        log.info(
            "broker %d serving %s:%d (data in %s, cluster %s)",
            self.node_id, self.host, self.port, self.data_dir, self.registry.cluster_id,
        )

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.state.connections):
            conn.close()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            try:
                await task
            except asyncio.CancelledError:
                pass
        self._tasks.clear()
        self.groups.shutdown()
        if self.group_commit is not None:
            await self.group_commit.stop()
        self.registry.close(clean=True)
        self.io.shutdown()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        log.info("broker %d stopped cleanly", self.node_id)

    async def _timers(self) -> None:
        retention_every = self.config["log.retention.check.interval.ms"]
        next_retention = self.clock.now_ms() + retention_every
        while True:
            await asyncio.sleep(TICK_SECONDS)
            try:
                self.groups.tick()
                now = self.clock.now_ms()
                if now >= next_retention:
                    next_retention = now + retention_every
                    self.enforce_retention()
            except Exception:
                log.exception("timer task failed; continuing")

    def enforce_retention(self) -> int:
        now = self.clock.now_ms()
        return sum(p.enforce_retention(now) for p in self.registry.all_partitions())

    # -- requests -------------------------------------------------------------

    def dispatch(self, request: Request, conn: KafkaProtocol) -> Any:
        return HANDLERS[request.api_key](self, request, conn)

    def _unknown_api_versions(self, request: UnknownApiVersions) -> Any:
        log.info("ApiVersions v%d is newer than this broker's; answering with v0 (KIP-511)", request.api_version)
        return unknown_api_versions_response()

    # -- topics ---------------------------------------------------------------

    def create_topic(self, name: str, num_partitions: int, overrides: dict[str, Any], internal: bool = False) -> Topic:
        return self.registry.create_topic(name, num_partitions, overrides, self.clock.now_ms(), internal)

    def delete_topic(self, name: str) -> None:
        assert self.group_commit is not None
        for partition in self.registry.topics[name].partitions:
            self.group_commit.forget(partition)
        self.registry.delete_topic(name)
        self.groups.on_topic_deleted(name)

    def offsets_partition(self, partition: int) -> PartitionLog:
        """A partition of ``__consumer_offsets``, creating the topic on first use (as Kafka does)."""
        topic = self.registry.topics.get(OFFSETS_TOPIC)
        if topic is None:
            overrides = {
                "cleanup.policy": ["compact"],
                "segment.bytes": self.config["offsets.topic.segment.bytes"],
            }
            topic = self.create_topic(OFFSETS_TOPIC, self.config["offsets.topic.num.partitions"], overrides, internal=True)
        return topic.partitions[partition]

    def _load_groups(self) -> None:
        topic = self.registry.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for partition in topic.partitions:
            self.groups.load_partition(partition.partition, _read_records(partition))

    def after_append(self, partition: PartitionLog) -> None:
        assert self.group_commit is not None
        self.group_commit.mark_dirty(partition)

    def wait_durable(self, partition: PartitionLog, offset: int) -> asyncio.Future[None]:
        assert self.group_commit is not None
        return self.group_commit.wait_durable(partition, offset)


def _read_records(partition: PartitionLog):
    """Every (key, value) record of a partition, oldest first (for coordinator replay)."""
    for segment in partition.segments:
        data = segment.read(0, segment.size)
        for pos, header in scan(data):
            if header.is_control:
                continue
            for record in iter_records(memoryview(data)[pos : pos + header.size], header):
                if record.key is not None:
                    yield record.key, record.value


def tune_process_allocator() -> None:
    """Keep request-sized buffers on glibc's heap instead of fresh mmap regions.

    By default glibc serves blocks of 128 KiB and more with mmap and gives
    them back with munmap on free.  For a broker that allocates about one
    1 MiB buffer per produce request, every request then pays for fresh
    zeroed pages, page faults and TLB shootdowns, and the kernel copies out
    of those cold pages slowly.  Profiled on the development VM, that was
    about half the broker's CPU at 250 MB/s (docs/performance.md).  Raising
    the mmap and trim thresholds lets freed buffers be reused.  This is only
    called by the ``onceflow broker`` process, never inside someone else's
    (the embedded broker leaves the host process alone).
    """
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        m_trim_threshold, m_mmap_threshold = -1, -3
        libc.mallopt(m_mmap_threshold, 64 << 20)
        libc.mallopt(m_trim_threshold, 256 << 20)
    except (OSError, AttributeError):  # not glibc: nothing to tune
        pass


class OffsetsTopicStore:
    """The group coordinator's ``GroupStore``: ``__consumer_offsets``, made durable by group commit."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    @property
    def num_partitions(self) -> int:
        return int(self._broker.config["offsets.topic.num.partitions"])

    def append(
        self, partition: int, records: list[tuple[bytes, bytes | None]], done: Callable[[ErrorCode], None]
    ) -> None:
        broker = self._broker
        loop = asyncio.get_running_loop()
        try:
            log_ = broker.offsets_partition(partition)
            log_.append_batch(build_batch(records, broker.clock.now_ms()), broker.clock.now_ms())
        except OSError as exc:
            log.error("cannot write to %s-%d: %s", OFFSETS_TOPIC, partition, exc)
            loop.call_soon(done, ErrorCode.kafka_storage_error)
            return
        broker.after_append(log_)
        fut = broker.wait_durable(log_, log_.log_end_offset)

        def finished(f: asyncio.Future[None]) -> None:
            if f.cancelled() or f.exception() is not None:
                done(ErrorCode.kafka_storage_error)
            else:
                done(ErrorCode.none)

        fut.add_done_callback(finished)
