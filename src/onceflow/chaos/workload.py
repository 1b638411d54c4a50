"""The chaos workload: clients that write, read and copy unique values, recording a history.

Theory of operation: every client is a thread of this process with its own confluent-kafka
client, and records what it does with ``history.Recorder`` (one operation at a time per
process name, Jepsen's invoke / ok / fail / info):

* **producers** (``producer-N``) run transactions of 1 to ``max_writes`` unique values
  (``"<producer>-<txn>-<k>"``) over every topic and partition; one in ``abort_every`` is aborted on
  purpose.  A transaction's completion says what the client knows: ok (commit_transaction
  returned), fail (aborted, or never asked to commit), info (the commit's outcome is unknown: a
  timeout, a fencing, a fatal error).  After anything but ok or fail the client is replaced by a
  new one with the same ``transactional.id``, whose ``init_transactions`` fences the old one and
  finishes its transaction, as an application would restart;
* **readers** (``reader-rc-N``, ``reader-ru-N``) read every partition of every topic from the
  start, read_committed or read_uncommitted, recording each poll's records;
* **a consume-transform-produce stage** (``ctp-0``) copies the first topic to ``<first>-out``,
  value ``ctp_output(v)``, one transaction per poll with ``send_offsets_to_transaction``
  (group ``chaos-ctp``, generation-less as Kafka's TransactionalMessageCopier in its default
  mode).  After a failed or unknown transaction it rewinds to the group's committed offsets
  (read_committed, so KIP-447's require_stable waits out a pending commit).
  With ``ctp_group_protocol`` (``classic`` or ``consumer``, KIP-848) the stage is instead
  ``ctp_members`` copiers (``ctp-0``, ``ctp-1``, ...) *subscribed* as members of the group:
  the group hands out the partitions, rebalances move them between copiers as they are
  replaced, and their offsets carry the member's generation or epoch, so a copier that lost a
  partition is fenced (KIP-447).  The group has one copier per partition at a time, so the
  checker's rule "one stage per input partition" holds.

``finish`` is called once the faults are over and the broker is up: it stops the clients, waits
until no partition has an open transaction (the LSO meets the high watermark), and records the
``final-read`` of every partition with both isolation levels and the group's
``committed-offsets``, which ``checker.check`` judges the history by.

Every wait is bounded; the workload talks to the broker only through confluent-kafka and
standard Kafka APIs, so it runs against any Kafka-protocol broker (``--bootstrap-servers``).
"""

from __future__ import annotations

import functools
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from ..clientconfig import NO_SETTINGS, ClientSettings
from .history import Recorder, ctp_output

log = logging.getLogger(__name__)

#: How long one client call may block (commit, abort, init, send offsets).
CALL_TIMEOUT_S = 20.0
#: How long ``finish`` may wait for open transactions to end, and for a complete read.
FINISH_TIMEOUT_S = 180.0
#: librdkafka settings every client shares: silent about the connections the faults break (the
#: history records what matters; what else the clients log is counted, not printed:
#: ``longcommand.Session``), quick to reconnect to a restarted broker, and never creating a topic
#: (one deleted at the end, under a client still stopping, stays deleted).
COMMON: dict[str, Any] = {"log.connection.close": False, "reconnect.backoff.max.ms": 500,
                          "metadata.recovery.strategy": "none", "allow.auto.create.topics": False}


@dataclass(frozen=True)
class Plan:
    """The shape of a workload."""

    topics: tuple[str, ...] = ("chaos-a", "chaos-b")
    partitions: int = 3
    producers: int = 3
    max_writes: int = 6
    #: One transaction in this many is aborted on purpose (0: never).
    abort_every: int = 5
    rc_readers: int = 1
    ru_readers: int = 1
    ctp: bool = True
    #: None: the ctp copier assigns itself every partition; "classic" or "consumer": the
    #: copiers subscribe as members of the group, with that group.protocol.
    ctp_group_protocol: str | None = None
    #: How many subscribed copiers (with ``ctp_group_protocol``).
    ctp_members: int = 2
    #: The producers' transaction.timeout.ms: a transaction left open by a killed client is
    #: aborted by the coordinator after this long.
    transaction_timeout_ms: int = 10_000
    #: Pause between two transactions of one producer (s), to keep the history a readable size.
    think_s: float = 0.005

    @property
    def ctp_output_topic(self) -> str:
        return f"{self.topics[0]}-out"

    @property
    def all_topics(self) -> tuple[str, ...]:
        return (*self.topics, self.ctp_output_topic) if self.ctp else self.topics


class Workload:
    """The clients of one run; ``start``, let faults happen, then ``finish``."""

    def __init__(self, bootstrap: str, plan: Plan, recorder: Recorder, seed: int,
                 client: ClientSettings = NO_SETTINGS) -> None:
        self.bootstrap = bootstrap
        #: What every client starts from: the user's settings (``-X``, ``--command-config``: a secured
        #: cluster's) and the bootstrap servers; each client's own settings go over them.
        self.base = client.librdkafka(bootstrap)
        self.plan = plan
        self.recorder = recorder
        self.seed = seed
        self.run_id = uuid.UUID(int=random.Random(seed).getrandbits(128)).hex[:8]
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.ctp_group = f"chaos-ctp-{self.run_id}"
        #: Transactions the producers committed so far (progress).
        self.committed = 0

    # -- set-up and lifetime -------------------------------------------------

    def create_topics(self) -> list[str]:
        """Create the plan's topics; those it created (not those that were there already)."""
        from ..clienterrors import kafka_error_text

        admin = AdminClient({**self.base, **_admin_settings()})
        wanted = [NewTopic(t, self.plan.partitions, -1) for t in self.plan.all_topics]
        created = []
        for topic, future in admin.create_topics(wanted).items():
            try:
                future.result(CALL_TIMEOUT_S * 3)
                created.append(topic)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise RuntimeError(f"cannot create topic {topic}: {kafka_error_text(exc.args[0])}") from None
        return created

    def start(self) -> None:
        starts: list[tuple[str, Callable[[], None]]] = []
        for n in range(self.plan.producers):
            starts.append((f"producer-{n}", functools.partial(self._producer, n)))
        for n in range(self.plan.rc_readers):
            starts.append((f"reader-rc-{n}", functools.partial(self._reader, f"reader-rc-{n}", "read_committed")))
        for n in range(self.plan.ru_readers):
            starts.append((f"reader-ru-{n}", functools.partial(self._reader, f"reader-ru-{n}", "read_uncommitted")))
        if self.plan.ctp and self.plan.ctp_group_protocol is None:
            starts.append(("ctp-0", self._ctp))
        elif self.plan.ctp:
            for n in range(self.plan.ctp_members):
                starts.append((f"ctp-{n}", functools.partial(self._ctp_member, f"ctp-{n}")))
        for name, target in starts:
            thread = threading.Thread(target=self._guarded, args=(name, target), name=f"chaos-{name}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _guarded(self, name: str, target: Callable[[], None]) -> None:
        try:
            target()
        except Exception as exc:  # a workload bug, not a broker outcome: reported, never hidden
            log.exception("chaos client %s failed", name)
            self.errors.append(f"{name}: {type(exc).__name__}: {exc}")

    def stop(self, within: float = CALL_TIMEOUT_S * 4) -> None:
        """Stop the clients; each that is still running after ``within`` seconds is named in ``errors``.
        Once: a second call returns at once."""
        if self._stop.is_set():
            return
        self._stop.set()
        deadline = time.monotonic() + within
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in self._threads if t.is_alive()]
        if stuck:
            self.errors.append(f"clients still running after stop: {stuck}")

    # -- producers -----------------------------------------------------------

    def _producer(self, index: int) -> None:
        name = f"producer-{index}"
        rng = random.Random(f"{self.seed}-{name}")
        transactional_id = f"chaos-{self.run_id}-{index}"
        producer: Producer | None = None
        n = 0
        while not self._stop.is_set():
            if producer is None:
                producer = self._new_transactional_producer(transactional_id)
                continue
            n += 1
            writes = [[rng.choice(self.plan.topics), rng.randrange(self.plan.partitions), f"{name}-{n}-{k}"]
                      for k in range(rng.randint(1, self.plan.max_writes))]
            abort = self.plan.abort_every > 0 and rng.randrange(self.plan.abort_every) == 0
            txn_id = f"{name}/{n}"
            self.recorder.invoke(name, "txn", {"id": txn_id, "transactional_id": transactional_id, "writes": writes})
            ending = _run_transaction(producer, writes, abort)
            self.recorder.complete(name, ending.outcome, "txn",
                                   {"id": txn_id, "commit_time": ending.commit_time, "offsets": ending.offsets})
            self.committed += ending.outcome == "ok"
            if not ending.usable:
                producer = None  # as an application would: a new client, whose init fences this one
            elif self.plan.think_s:
                self._stop.wait(self.plan.think_s)

    def _new_transactional_producer(self, transactional_id: str) -> Producer | None:
        producer = Producer({**self.base, "transactional.id": transactional_id,
                             "transaction.timeout.ms": self.plan.transaction_timeout_ms, "linger.ms": 2,
                             "message.timeout.ms": self.plan.transaction_timeout_ms, **COMMON})
        try:
            producer.init_transactions(CALL_TIMEOUT_S)
        except KafkaException:
            self._stop.wait(0.5)  # the broker is down or paused: try again, until stopped
            return None
        return producer

    # -- readers -------------------------------------------------------------

    def _reader(self, name: str, isolation: str) -> None:
        consumer = Consumer({**self.base, "group.id": f"chaos-{name}-{self.run_id}",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "auto.offset.reset": "error", **COMMON})
        positions = [TopicPartition(t, p, OFFSET_BEGINNING) for t in self.plan.all_topics
                     for p in range(self.plan.partitions)]
        consumer.assign(positions)
        self.recorder.record(name, "ok", "assign", {"positions": [[t.topic, t.partition, 0] for t in positions]})
        try:
            while not self._stop.is_set():
                records = []
                for msg in consumer.consume(500, 0.2):
                    error = msg.error()
                    if error is None:
                        records.append([msg.topic(), msg.partition(), msg.offset(), _text(msg.value())])
                    elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                        # The position fell outside the log: never expected (nothing is deleted).
                        self.recorder.record(name, "info", "reader-error", {"error": error.str(), "topic": msg.topic(),
                                                                            "partition": msg.partition()})
                if records:
                    self.recorder.record(name, "ok", "poll", {"isolation": isolation, "records": records})
        finally:
            consumer.close()

    # -- consume-transform-produce -------------------------------------------

    def _ctp(self) -> None:
        name = "ctp-0"
        source = self.plan.topics[0]
        consumer = Consumer({**self.base, "group.id": self.ctp_group,
                             "isolation.level": "read_committed", "enable.auto.commit": False,
                             "auto.offset.reset": "earliest", **COMMON})
        producer: Producer | None = None
        n = 0
        rewind = True
        try:
            while not self._stop.is_set():
                if producer is None:
                    producer = self._new_transactional_producer(f"chaos-{self.run_id}-ctp")
                    rewind = True
                    continue
                if rewind:
                    rewind = not self._rewind(name, consumer, source)
                    continue
                inputs = [m for m in consumer.consume(200, 0.2) if m.error() is None]
                if not inputs:
                    continue
                n += 1
                ending = self._copy(name, n, consumer, producer, inputs)
                if not ending.usable:
                    producer = None  # and rewind, once a new client has fenced this one
                elif ending.outcome != "ok":
                    rewind = True
        finally:
            consumer.close()

    def _copy(self, name: str, n: int, consumer: Consumer, producer: Producer, inputs: list[Any]) -> _Ending:
        """One ctp transaction: the outputs of ``inputs`` and the offsets past them, recorded."""
        source = self.plan.topics[0]
        ends: dict[int, int] = {}
        for m in inputs:
            _, partition, offset = _where(m)
            ends[partition] = max(ends.get(partition, 0), offset + 1)
        value: dict[str, Any] = {
            "id": f"{name}/{n}", "group": self.ctp_group,
            "inputs": [[source, m.partition(), m.offset(), _text(m.value())] for m in inputs],
            "writes": [[self.plan.ctp_output_topic, m.partition(), ctp_output(_text(m.value()))] for m in inputs],
            "offsets": {f"{source}/{p}": end for p, end in ends.items()},
        }
        self.recorder.invoke(name, "ctp", value)
        offsets = [TopicPartition(source, p, end) for p, end in ends.items()]
        ending = _run_transaction(producer, value["writes"], False, functools.partial(_send_offsets, consumer, offsets))
        self.recorder.complete(name, ending.outcome, "ctp", {"id": value["id"], "commit_time": ending.commit_time})
        return ending

    def _ctp_member(self, name: str) -> None:
        """A copier subscribed as a member of the group (``ctp_group_protocol``)."""
        source = self.plan.topics[0]
        producer: Producer | None = None
        n = 0

        def assigned(consumer: Consumer, partitions: list[TopicPartition]) -> None:
            self.recorder.record(name, "ok", "assign", {"positions": [[source, tp.partition, max(tp.offset, 0)]
                                                                      for tp in partitions]})

        consumer = self._member_consumer(assigned)
        try:
            while not self._stop.is_set():
                if producer is None:
                    producer = self._new_transactional_producer(f"chaos-{self.run_id}-{name}")
                    continue
                inputs = [m for m in consumer.consume(200, 0.2) if m.error() is None]
                if not inputs:
                    continue
                n += 1
                ending = self._copy(name, n, consumer, producer, inputs)
                if ending.outcome != "ok":
                    if not ending.usable:
                        producer = None
                    # Start again from the group's committed offsets: leave and rejoin, as an
                    # application that restarts its consumer (the group then hands out the
                    # partitions again, positioned at what is committed).
                    consumer.close()
                    consumer = self._member_consumer(assigned)
        finally:
            consumer.close()

    def _member_consumer(self, assigned: Callable[[Consumer, list[TopicPartition]], None]) -> Consumer:
        consumer = Consumer({**self.base, "group.id": self.ctp_group,
                             "group.protocol": self.plan.ctp_group_protocol, "isolation.level": "read_committed",
                             "enable.auto.commit": False, "auto.offset.reset": "earliest", **COMMON})
        consumer.subscribe([self.plan.topics[0]], on_assign=assigned)
        return consumer

    def _rewind(self, name: str, consumer: Consumer, source: str) -> bool:
        """Position the copier at its group's committed offsets; False if they cannot be read now."""
        partitions = [TopicPartition(source, p) for p in range(self.plan.partitions)]
        try:
            committed = consumer.committed(partitions, timeout=CALL_TIMEOUT_S)
        except KafkaException:
            self._stop.wait(0.5)
            return False
        positions = [TopicPartition(source, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
                     for tp in committed]
        consumer.assign(positions)
        self.recorder.record(name, "ok", "assign", {"positions": [[source, tp.partition, max(tp.offset, 0)]
                                                                  for tp in committed]})
        return True

    # -- the end -------------------------------------------------------------

    def finish(self) -> None:
        """Stop the clients, wait for every transaction to end, record the final reads."""
        self.stop()
        ends = self._wait_for_stable_ends()
        for isolation in ("read_committed", "read_uncommitted"):
            self.recorder.record("final", "ok", "final-read",
                                 {"isolation": isolation, "partitions": self._read_everything(isolation, ends)})
        if self.plan.ctp:
            probe = Consumer({**self.base, "group.id": self.ctp_group,
                              "isolation.level": "read_committed", **COMMON})
            try:
                committed = probe.committed([TopicPartition(self.plan.topics[0], p) for p in range(self.plan.partitions)],
                                            timeout=CALL_TIMEOUT_S * 3)
            finally:
                probe.close()
            self.recorder.record("final", "ok", "committed-offsets", {
                "group": self.ctp_group,
                "offsets": {f"{tp.topic}/{tp.partition}": tp.offset for tp in committed if tp.offset >= 0}})

    def _wait_for_stable_ends(self) -> dict[tuple[str, int], int]:
        """Each partition's high watermark, once its last stable offset has caught up with it."""
        partitions = [(t, p) for t in self.plan.all_topics for p in range(self.plan.partitions)]
        rc = Consumer({**self.base, "group.id": "chaos-probe", "isolation.level": "read_committed",
                       **COMMON})
        ru = Consumer({**self.base, "group.id": "chaos-probe",
                       "isolation.level": "read_uncommitted", **COMMON})
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        try:
            while True:
                try:
                    high = {tp: ru.get_watermark_offsets(TopicPartition(*tp), timeout=CALL_TIMEOUT_S)[1] for tp in partitions}
                    stable = {tp: rc.get_watermark_offsets(TopicPartition(*tp), timeout=CALL_TIMEOUT_S)[1] for tp in partitions}
                except KafkaException:
                    high, stable = {}, {None: 0}  # type: ignore[dict-item]
                if high and high == stable:
                    return high
                if time.monotonic() > deadline:
                    open_ = {f"{t}/{p}": (stable.get((t, p)), high.get((t, p))) for t, p in partitions
                             if stable.get((t, p)) != high.get((t, p))}
                    raise RuntimeError(f"transactions still open after {FINISH_TIMEOUT_S:.0f} s (LSO, HW): {open_}")
                time.sleep(0.5)
        finally:
            rc.close()
            ru.close()

    def _read_everything(self, isolation: str, ends: dict[tuple[str, int], int]) -> dict[str, Any]:
        """Every record ``isolation`` delivers from each partition's start to its end."""
        consumer = Consumer({**self.base, "group.id": f"chaos-final-{uuid.uuid4()}",
                             "isolation.level": isolation, "enable.auto.commit": False,
                             "enable.partition.eof": True, **COMMON})
        consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in ends])
        found: dict[tuple[str, int], list[list[Any]]] = {tp: [] for tp in ends}
        done = {tp for tp, end in ends.items() if end == 0}
        deadline = time.monotonic() + FINISH_TIMEOUT_S
        try:
            while len(done) < len(ends):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the final {isolation} read did not reach the end of {sorted(set(ends) - done)}")
                for msg in consumer.consume(1000, 0.5):
                    topic, partition, offset = _where(msg)
                    error = msg.error()
                    if error is None:
                        found[(topic, partition)].append([offset, _text(msg.value())])
                    elif error.code() == KafkaError._PARTITION_EOF and offset >= ends[(topic, partition)]:
                        done.add((topic, partition))
        finally:
            consumer.close()
        return {f"{t}/{p}": {"end": ends[(t, p)], "records": found[(t, p)]} for t, p in ends}


@dataclass
class _Ending:
    """How a transaction ended, as the client knows it: ``ok`` committed, ``fail`` definitely not
    (aborted, or never asked to commit), ``info`` unknown; and whether the client can go on."""

    outcome: str
    commit_time: float | None
    offsets: dict[str, int]
    usable: bool = True


def _run_transaction(producer: Producer, writes: list[list[Any]], abort: bool,
                     before_commit: Callable[[Producer], None] | None = None) -> _Ending:
    offsets: dict[str, int] = {}

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            offsets[_text(msg.value())] = msg.offset()

    commit_time: float | None = None
    try:
        producer.begin_transaction()
        for topic, partition, value in writes:
            producer.produce(topic, value.encode(), partition=partition, on_delivery=delivered)
        if before_commit is not None:
            before_commit(producer)
        if abort:
            producer.abort_transaction(CALL_TIMEOUT_S)
            return _Ending("fail", None, offsets)
        commit_time = time.monotonic()
        _commit(producer)
        return _Ending("ok", commit_time, offsets)
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        # Never asked to commit: it cannot have committed, whatever happens next.
        undecided = "fail" if commit_time is None else "info"
        if error.fatal() or (commit_time is not None and not error.txn_requires_abort()):
            return _Ending(undecided, commit_time, offsets, usable=False)
        try:
            producer.abort_transaction(CALL_TIMEOUT_S)
        except KafkaException:
            return _Ending(undecided, commit_time, offsets, usable=False)
        return _Ending("fail", commit_time, offsets)


def _send_offsets(consumer: Consumer, offsets: list[TopicPartition], producer: Producer) -> None:
    producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), CALL_TIMEOUT_S)


def _commit(producer: Producer) -> None:
    """commit_transaction, retried on retriable errors as librdkafka documents (a few times)."""
    for attempt in range(3):
        try:
            producer.commit_transaction(CALL_TIMEOUT_S)
            return
        except KafkaException as exc:
            error: KafkaError = exc.args[0]
            if not error.retriable() or attempt == 2:
                raise


def _where(msg: Any) -> tuple[str, int, int]:
    """A message's topic, partition and offset (librdkafka leaves them unset only on errors
    that concern no partition)."""
    return msg.topic() or "", msg.partition() or 0, msg.offset() or 0


def _text(value: bytes | None) -> str:
    return (value or b"").decode("utf-8", "replace")


def _admin_settings() -> dict[str, Any]:
    return {key: value for key, value in COMMON.items() if key != "log.connection.close"}
