"""The broker: one object that owns every component and runs them on one event loop.

Theory of operation: ``Broker.start`` opens the data directory (recovering
logs if the last stop was not clean), starts the I/O thread and the
group-commit flusher, replays ``__consumer_offsets`` into the group
coordinator and ``__transaction_state`` into the transaction coordinator
(which rolls forward any transaction it finds half-committed, writing the
missing markers), starts the timer task, and only then listens.  Every request is dispatched by API key to a function in
``broker.handlers``; handlers reach the components through this object.
Every write to a log, a client's, a coordinator's or a marker, goes through
its ``Appender`` (``broker/appender.py``), the one owner of durable writes.
``Broker.stop`` stops listening, answers what is pending, fsyncs everything,
and leaves the clean-shutdown marker so the next start skips recovery.

Everything runs on the event loop thread except writing log data to files
and fsync, which the I/O thread does (``log.writer``); components need
no locks.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import faults
from ..clock import Clock, SystemClock
from ..config import (
    CONNECTIONS_MAX_IDLE_MS,
    CONNECTIONS_MAX_REAUTH_MS,
    CONSOLE_ALLOW_ABORT,
    LOG_CLEANER_BACKOFF_MS,
    LOG_CLEANER_ENABLE,
    LOG_RETENTION_CHECK_INTERVAL_MS,
    METRICS_PORT,
    NODE_ID,
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    QUEUED_MAX_REQUESTS,
    SASL_ENABLED_MECHANISMS,
    SASL_SERVER_MAX_RECEIVE_SIZE,
    SOCKET_REQUEST_MAX_BYTES,
    SSL_PRINCIPAL_MAPPING_RULES,
    BrokerConfig,
)
from ..coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..coordinator.group.coordinator import GroupCoordinator
from ..coordinator.group.types import StoredMarker, StoredRecord, TopicImage
from ..coordinator.transaction.coordinator import TransactionCoordinator
from ..coordinator.transaction.metadata import TV_2
from ..coordinator.transaction.types import MarkerWriter
from ..log import compaction
from ..log.partition_log import PartitionLog
from ..log.writer import IoThread
from ..protocol import apis
from ..protocol.framing import Request, UnknownApiVersions
from ..records.batch import scan
from ..records.control import read_marker
from ..records.records import iter_records
from ..security import listeners, mechanisms, tls
from ..security.acls import StandardAuthorizer
from ..security.authenticator import Authenticator
from ..security.authorizer import Authorizer
from ..security.credentials import ScramCredentialStore
from .appender import Appender
from .group_commit import GroupCommit
from .handlers import HANDLERS
from .handlers.metadata import unknown_api_versions_response
from .partitions import PartitionRegistry, Topic
from .producer_ids import ProducerIdBlocks
from .server import KafkaProtocol, ListenerSecurity, ServerState, TlsAcceptor
from .stores import LocalMarkerWriter, OffsetsTopicStore, TransactionLogStore

if TYPE_CHECKING:
    from ..metrics.http import MetricsServer

log = logging.getLogger(__name__)

#: The timer task sleeps until the next deadline, but never longer than this.
MAX_TIMER_SLEEP_MS = 1000


class TopicImages(Mapping[str, TopicImage]):
    """The registry's topics as the group coordinator sees them (a live view, nothing copied)."""

    def __init__(self, registry: PartitionRegistry) -> None:
        self._topics = registry.topics

    def __getitem__(self, name: str) -> TopicImage:
        topic = self._topics[name]
        return TopicImage(topic.topic_id, len(topic.partitions))

    def __iter__(self) -> Iterator[str]:
        return iter(self._topics)

    def __len__(self) -> int:
        return len(self._topics)


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
        #: Where clients are told to connect (``advertised.listeners``, else the listen address).
        self.advertised_host, self.advertised_port = host, port
        self.clock: Clock = clock or SystemClock()
        self.node_id: int = config[NODE_ID]
        self.io = IoThread()
        self.registry = PartitionRegistry(self.data_dir, config, self.io)
        self.group_commit = GroupCommit(self.io)
        #: Every durable write goes through it (Kafka's ReplicaManager.appendRecords).
        self.appender = Appender(self.registry, config, self.clock, self.group_commit,
                                 lambda *txn_partition: self.txns.partition_in_transaction(*txn_partition),
                                 lambda tid, pid, epoch, partitions, done: self.txns.add_partitions(
                                     tid, pid, epoch, partitions, done, client_transaction_version=TV_2))
        #: The timer task's wake-up: set when a coordinator sets a deadline earlier than its sleep.
        self._timer_wake: asyncio.Event | None = None
        self._sleeping_until = 0
        self.groups = GroupCoordinator(config, self.clock, OffsetsTopicStore(self.appender), on_timer_set=self._on_timer_set,
                                       topics=lambda: TopicImages(self.registry))
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.producer_ids = ProducerIdBlocks(self.data_dir)
        #: SCRAM credentials (KIP-554), loaded from the data directory now.
        self.scram_credentials = ScramCredentialStore(self.data_dir)
        # With ONCEFLOW_FAULT set, the crash points wrap the marker writer and the transaction log.
        self.marker_writer: MarkerWriter = faults.decorate_marker_writer(
            LocalMarkerWriter(self.appender, self.groups.complete_transaction))
        self.txns = TransactionCoordinator(config, self.clock, faults.decorate_txn_log_store(TransactionLogStore(self.appender)),
                                           self.producer_ids, self.marker_writer, on_timer_set=self._on_timer_set)
        self.state = ServerState(self.clock.now_ms)
        #: ACLs (``authorizer.class.name``; ``security/acls.py``), loaded from the data directory
        #: (a file it cannot read stops the broker here); None: every request is allowed.
        self.authorizer: Authorizer | None = StandardAuthorizer.from_config(config, self.data_dir)
        #: One server per listener (``listeners``), resolved at start.
        self._servers: list[asyncio.AbstractServer] = []
        self.listeners: list[listeners.Listener] = []
        #: The metrics port (``metrics.port``; ``onceflow.metrics.http``), None when off.
        self.metrics: MetricsServer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._missing = [key for key in apis.SUPPORTED if key not in HANDLERS]
        if self._missing:
            raise RuntimeError(f"APIs in the SUPPORTED table without a handler: {self._missing}")

    # -- lifetime -------------------------------------------------------------

    async def start(self) -> None:
        # Settings that cannot be used fail here, before anything is opened or bound.
        self.listeners = listeners.resolve(self.config, self.host, self.port)
        securities = [self._listener_security(listener) for listener in self.listeners]
        self.registry.open(self.clock.now_ms())
        self.group_commit.start()
        self._load_groups()
        self._load_transactions()
        loop = asyncio.get_running_loop()
        max_frame = self.config[SOCKET_REQUEST_MAX_BYTES]
        max_in_flight = self.config[QUEUED_MAX_REQUESTS]
        try:
            for listener, (security, context) in zip(self.listeners, securities, strict=True):
                def protocol(security: ListenerSecurity = security) -> KafkaProtocol:
                    return KafkaProtocol(self.dispatch, self._unknown_api_versions, self.state, max_frame, max_in_flight,
                                         security)

                def accept(protocol: Callable[[], KafkaProtocol] = protocol, context: ssl.SSLContext | None = context,
                           name: str = listener.name) -> asyncio.BaseProtocol:
                    return protocol() if context is None else TlsAcceptor(protocol, context, name)

                server = await loop.create_server(accept, listener.host or None, listener.port, reuse_address=True)
                self._servers.append(server)
                listener.port = server.sockets[0].getsockname()[1]
        except OSError:  # a port taken: nothing of this start is left running
            await self.stop()
            raise
        first = self.listeners[0]
        self.host, self.port = first.host or "0.0.0.0", first.port
        self.advertised_host, self.advertised_port = first.advertised_address()
        self._tasks.append(loop.create_task(self._timers(), name="onceflow-timers"))
        if (metrics_port := self.config[METRICS_PORT]) is not None:
            from ..metrics.http import MetricsServer

            self.metrics = MetricsServer(self, self.host, metrics_port, self.config[CONSOLE_ALLOW_ABORT])
            try:
                await self.metrics.start()
            except OSError:  # its port taken: nothing of this start is left running
                self.metrics = None
                await self.stop()
                raise
        log.info(
            "broker %d serving %s:%d (data in %s, cluster %s)",
            self.node_id, self.host, self.port, self.data_dir, self.registry.cluster_id,
        )
        secured = [listener.name for listener in self.listeners if listener.protocol != listeners.PLAINTEXT]
        if self.metrics is not None and secured and not listeners.is_loopback(self.metrics.host):
            log.warning("the metrics and console port %s:%d has no authentication, and shows the transactional ids, "
                        "groups and topics that ACLs hide from clients of %s: bind the first listener to loopback, "
                        "or keep the port behind a proxy that authenticates (docs/security.md)",
                        self.metrics.host, self.metrics.port, ", ".join(secured))
        for listener in self.listeners:
            log.info("listener %s (%s) on %s:%d, advertised as %s:%d", listener.name, listener.protocol,
                     listener.host or "*", listener.port, *listener.advertised_address())
            if listener.protocol == listeners.PLAINTEXT and not listeners.is_loopback(listener.host):
                log.warning("listener %s is PLAINTEXT on %s, reachable beyond this machine: anyone who can reach "
                            "it can read, write and fence transactions; use SASL_SSL or SSL (docs/security.md)",
                            listener.name, listener.host or "every address")

    def _listener_security(self, listener: listeners.Listener) -> tuple[ListenerSecurity, ssl.SSLContext | None]:
        """How ``listener``'s connections are authenticated, and its TLS context (None: plaintext)."""
        name = listener.name
        context = tls.server_context(self.config, name) if listener.uses_tls else None
        mapper = None
        if listener.protocol == listeners.SSL:
            mapper = tls.PrincipalMapper(self.config.for_listener(name, SSL_PRINCIPAL_MAPPING_RULES))
        new_authenticator = None
        if listener.uses_sasl:
            mechanisms.check_mechanisms(name, self.config)
            enabled: list[str] = self.config.for_listener(name, SASL_ENABLED_MECHANISMS)
            reauth_ms: int = self.config.for_listener(name, CONNECTIONS_MAX_REAUTH_MS)

            def new_server(mechanism: str) -> mechanisms.SaslServer:
                return mechanisms.create_server(mechanism, name, self.config, self.scram_credentials)

            def new_authenticator(peer: str) -> Authenticator:
                return Authenticator(name, enabled, new_server, reauth_ms, self.clock.now_ms, peer)

        security = ListenerSecurity(name, new_authenticator, mapper, self.config.for_listener(name, SASL_SERVER_MAX_RECEIVE_SIZE))
        return security, context

    async def stop(self) -> None:
        if self.metrics is not None:
            await self.metrics.stop()
        for server in self._servers:
            server.close()
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
        self.txns.shutdown()
        self.groups.shutdown()
        await self.group_commit.stop()
        self.registry.close(clean=True)
        self.io.shutdown()
        for server in self._servers:
            await server.wait_closed()
        self._servers.clear()
        log.info("broker %d stopped cleanly", self.node_id)

    def _on_timer_set(self, deadline_ms: int) -> None:
        """A coordinator set a deadline: wake the timer task if it sleeps past it."""
        if self._timer_wake is not None and deadline_ms < self._sleeping_until:
            self._timer_wake.set()

    async def _sleep_until(self, deadline_ms: int) -> None:
        """Sleep until ``deadline_ms`` (at most MAX_TIMER_SLEEP_MS), or until woken for an earlier one."""
        assert self._timer_wake is not None
        wait_ms = min(deadline_ms - self.clock.now_ms(), MAX_TIMER_SLEEP_MS)
        if wait_ms <= 0:
            await asyncio.sleep(0)  # let the loop serve requests between two due timers
            return
        self._sleeping_until = deadline_ms
        self._timer_wake.clear()
        try:
            await asyncio.wait_for(self._timer_wake.wait(), wait_ms / 1000)
        except TimeoutError:
            pass
        finally:
            self._sleeping_until = 0

    async def _timers(self) -> None:
        """Coordinators' timers, retention, producer-id expiry and the log cleaner, each run when
        due: the task sleeps until the earliest deadline (a coordinator setting an earlier one
        wakes it), not on a fixed tick."""
        retention_every = self.config[LOG_RETENTION_CHECK_INTERVAL_MS]
        expiry_every = self.config[PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS]
        cleaner_every = self.config[LOG_CLEANER_BACKOFF_MS]
        next_retention = self.clock.now_ms() + retention_every
        idle_ms = self.config[CONNECTIONS_MAX_IDLE_MS]
        idle_every = min(max(idle_ms // 10, 100), 30_000) if idle_ms > 0 else 30_000
        next_idle = self.clock.now_ms() + idle_every
        next_expiry = self.clock.now_ms() + expiry_every
        next_clean = self.clock.now_ms() + cleaner_every
        self._timer_wake = asyncio.Event()
        # The log cleaner runs as its own task (its heavy part in a worker thread),
        # so that a long pass never delays the coordinators' ticks.
        cleaner: asyncio.Task[int] | None = None
        try:
            while True:
                deadlines = [next_retention, next_expiry, next_idle]
                if self.config[LOG_CLEANER_ENABLE] and (cleaner is None or cleaner.done()):
                    deadlines.append(next_clean)
                deadlines += [d for d in (self.groups.next_deadline_ms(), self.txns.next_deadline_ms()) if d is not None]
                await self._sleep_until(min(deadlines))
                try:
                    self.groups.tick()
                    self.txns.tick()
                    now = self.clock.now_ms()
                    if now >= next_idle:
                        next_idle = now + idle_every
                        if idle_ms > 0:
                            self.close_idle_connections(idle_ms)
                    if now >= next_retention:
                        next_retention = now + retention_every
                        self.enforce_retention()
                    if now >= next_expiry:
                        next_expiry = now + expiry_every
                        self.expire_producer_ids()
                    if self.config[LOG_CLEANER_ENABLE] and now >= next_clean and (cleaner is None or cleaner.done()):
                        if cleaner is not None and not cleaner.cancelled() and cleaner.exception() is not None:
                            log.error("log cleaner pass failed", exc_info=cleaner.exception())
                        cleaner = asyncio.get_running_loop().create_task(self.run_log_cleaner(), name="onceflow-cleaner")
                        cleaner.add_done_callback(lambda _: self._timer_wake.set() if self._timer_wake else None)
                        next_clean = now + cleaner_every
                except Exception:
                    log.exception("timer task failed; continuing")
        finally:
            if cleaner is not None and not cleaner.done():
                cleaner.cancel()
                await asyncio.gather(cleaner, return_exceptions=True)

    async def run_log_cleaner(self) -> int:
        """One pass of the log cleaner over every compacted partition that needs it,
        one partition at a time; returns how many were cleaned.

        Planning and installing run here on the event loop; building the cleaned
        segments runs in a worker thread (``log.compaction``).  If this task is
        cancelled (the broker stops), the worker is told to give up and awaited,
        so that no cleaner thread still writes once the logs are closed.
        """
        loop = asyncio.get_running_loop()
        abort = threading.Event()
        cleaned = 0
        for partition in list(self.registry.all_partitions()):
            plan = compaction.plan_cleaning(partition, self.clock.now_ms())
            if plan is None:
                continue
            work = loop.run_in_executor(None, compaction.build_cleaned, plan, abort)
            try:
                result = await asyncio.shield(work)
            except asyncio.CancelledError:
                abort.set()
                await asyncio.gather(work, return_exceptions=True)
                raise
            except compaction.CleanerError as exc:
                partition.uncleanable = str(exc)
                log.error("%s: cannot be cleaned, leaving it alone until restart: %s", partition.name, exc)
                continue
            except OSError as exc:  # its files went away (retention, topic deletion): try again next time
                log.info("%s: cleaning abandoned: %s", partition.name, exc)
                continue
            except Exception as exc:
                partition.uncleanable = repr(exc)
                log.exception("%s: cannot be cleaned, leaving it alone until restart", partition.name)
                continue
            if compaction.install_cleaned(partition, result, self.clock.now_ms()):
                cleaned += 1
        return cleaned

    def close_idle_connections(self, idle_ms: int) -> int:
        """Close the connections idle longer than ``connections.max.idle.ms``; how many."""
        now = self.clock.now_ms()
        idle = [conn for conn in self.state.connections if conn.idle_ms(now) > idle_ms]
        for conn in idle:
            log.info("closing connection from %s (%s): idle for more than connections.max.idle.ms=%d",
                     conn.peer, conn.principal, idle_ms)
            conn.close()
        return len(idle)

    def enforce_retention(self) -> int:
        now = self.clock.now_ms()
        return sum(p.enforce_retention(now) for p in self.registry.all_partitions())

    def expire_producer_ids(self) -> int:
        """Drop producer state idle longer than producer.id.expiration.ms from every partition."""
        now = self.clock.now_ms()
        return sum(len(p.producer_state.remove_expired(now)) for p in self.registry.all_partitions())

    def advertised_address(self, listener_name: str) -> tuple[str, int]:
        for listener in self.listeners:
            if listener.name == listener_name:
                return listener.advertised_address()
        return self.advertised_host, self.advertised_port

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
        """Raises OSError (a full disk) with the topic still there."""
        for partition in self.registry.delete_topic(name):
            self.group_commit.forget(partition)
        self.groups.on_topic_deleted(name)

    def _load_groups(self) -> None:
        topic = self.registry.topics.get(OFFSETS_TOPIC)
        if topic is None:
            return
        for partition in topic.partitions:
            self.groups.load_partition(partition.partition, _read_entries(partition))

    def _load_transactions(self) -> None:
        topic = self.registry.topics.get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return
        for partition in topic.partitions:
            records = ((e.key, e.value) for e in _read_entries(partition) if isinstance(e, StoredRecord))
            self.txns.load_partition(partition.partition, records)


def _read_entries(partition: PartitionLog) -> Iterator[StoredRecord | StoredMarker]:
    """A coordinator partition's records and transaction markers, oldest first (for replay at start-up)."""
    for segment in partition.segments:
        data = segment.read(0, segment.size)
        for pos, header in scan(data):
            batch = memoryview(data)[pos : pos + header.size]
            if header.is_control:
                marker = read_marker(batch, header)
                if marker is not None:
                    yield StoredMarker(marker.producer_id, marker.commit)
                continue
            for record in iter_records(batch, header):
                if record.key is not None:
                    yield StoredRecord(record.key, record.value, header.producer_id, header.is_transactional)


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


def tune_process_gc() -> None:
    """Keep the garbage collector's full passes short (``onceflow broker`` only).

    CPython's collector now and then runs a full (generation 2) pass over
    every tracked object.  In the broker most of them -- about 62,000: the
    modules, kio's schema classes, the loaded state -- are created at
    start-up and never freed, and a full pass over them took 29-43 ms on the
    development VM: a pause every client of the broker would see.  After
    start-up they are moved out of the collector's sight (``gc.freeze``); a
    later full pass visits only what was created since (about 5,000 objects
    after a 10 s ``bench txn-rate``).  As with the allocator, the embedded
    broker leaves its host process alone.
    """
    import gc

    gc.collect()
    gc.freeze()
