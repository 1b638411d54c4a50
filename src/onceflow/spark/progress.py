"""The sink's progress topic: where each slot's record lives (``protocol``), read and kept through Kafka.

Theory of operation
-------------------
One compacted topic per sink scope (``protocol.progress_topic``), one
partition per slot, one key per partition: partition P holds slot P's
records and compaction keeps its latest.  A record is produced inside the
slot's transaction (``sink``), so this module only

* makes sure the topic exists with enough partitions (``ensure``): the
  first task of a slot creates the topic or adds partitions, racing other
  tasks harmlessly (TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS are fine), and
  waits until the metadata shows a leader for its partition;
* refuses a topic whose ``cleanup.policy`` is not exactly ``compact``: with
  ``delete`` the records would expire, and with them the knowledge of what
  was written;
* reads the latest record of some slots (``read``): a read_committed
  consumer assigned a few offsets below each partition's last stable
  offset, widening the window until a record turns up (the tail may hold
  aborted attempts and markers).  Partition P's last stable offset is held
  only by slot P's own transaction, which a task fences before it reads its
  own record; another slot's open transaction hides only that slot's
  uncommitted attempt, which is right.

Clients are kept per process (Spark reuses its Python workers), so a task
does not pay for new ones.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import ConfigResource, NewPartitions, NewTopic, ResourceType

from .kafka import ATTEMPT_TIMEOUT_S, KafkaAdmin, client_config
from .protocol import SinkRefusal, SlotRecord

log = logging.getLogger(__name__)

#: The progress topic's settings: compacted (the latest record of a slot lasts as long as the
#: topic), with segments rolled hourly so that the cleaner can drop older records.
TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.ms": "3600000"}
#: How many offsets below the last stable offset a read starts; widened 8-fold while no record shows.
TAIL_WINDOW = 16
TIMEOUT_S = 60.0
POLL_S = 0.02  # consume() waits this long for more than it has; the loop is bounded by timeout_s

#: How many clusters' (or settings') clients a process keeps. An evicted client is only dropped, not
#: closed: a thread still using it keeps it alive, and librdkafka closes it when the last one lets go.
CLIENTS_KEPT = 4

_lock = threading.Lock()
_consumers: OrderedDict[tuple[str, frozenset[tuple[str, str]]], Consumer] = OrderedDict()
_admins: OrderedDict[tuple[str, frozenset[tuple[str, str]]], KafkaAdmin] = OrderedDict()
_compacted: set[tuple[str, str]] = set()


def _kept(cache: OrderedDict[Any, Any], key: Any, make: Callable[[], Any]) -> Any:
    """The client cached under ``key``, made on first use; the least recently used beyond
    CLIENTS_KEPT are dropped, so that clients of a cluster gone for good stop reconnecting."""
    with _lock:
        client = cache.get(key)
        if client is None:
            client = cache[key] = make()
            while len(cache) > CLIENTS_KEPT:
                cache.popitem(last=False)
        cache.move_to_end(key)
        return client


def reader_params(kafka_params: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` settings a consumer or admin client takes: producer-only ones dropped, and the
    records read read_committed whatever the sink was given (a record of an aborted attempt must not
    count, and the read ends at the last stable offset)."""
    producer_only = ("transaction", "acks", "linger", "enable.idempotence", "message.timeout", "max.in.flight",
                     "batch.", "compression", "queue.buffering", "delivery.timeout", "retries", "partitioner")
    params = {k: v for k, v in kafka_params.items() if not k.startswith(producer_only)}
    params["isolation.level"] = "read_committed"
    return params


def _consumer(bootstrap_servers: str, kafka_params: Mapping[str, str]) -> Consumer:
    def make() -> Consumer:
        config = client_config(bootstrap_servers, reader_params(kafka_params))
        config.update({"group.id": f"onceflow-progress-reader-{uuid.uuid4()}", "isolation.level": "read_committed",
                       "enable.auto.commit": False, "enable.auto.offset.store": False,
                       "enable.partition.eof": True, "auto.offset.reset": "earliest",
                       "fetch.wait.max.ms": 10})  # the end of a short read is an empty fetch: no long poll
        return Consumer(config)

    consumer: Consumer = _kept(_consumers, (bootstrap_servers, frozenset(reader_params(kafka_params).items())), make)
    return consumer


class ProgressStore:
    """One scope's progress topic."""

    def __init__(self, bootstrap_servers: str, kafka_params: Mapping[str, str], topic: str,
                 timeout_s: float | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.kafka_params = dict(kafka_params)
        self.topic = topic
        self.timeout_s = TIMEOUT_S if timeout_s is None else timeout_s
        self._admin: KafkaAdmin | None = None

    @property
    def admin(self) -> KafkaAdmin:
        if self._admin is None:
            self._admin = _kept(_admins, (self.bootstrap_servers, frozenset(reader_params(self.kafka_params).items())),
                                lambda: KafkaAdmin(self.bootstrap_servers, reader_params(self.kafka_params),
                                                   self.timeout_s))
        return self._admin

    # -- the topic ------------------------------------------------------------------------

    def _describe(self) -> Any:
        """The topic's description, or None if it does not exist.  (Not a Metadata request naming the
        topic: a cluster with auto.create.topics.enable would create it, with the wrong settings.)"""
        admin = self.admin

        def describe() -> Any:
            [future] = admin.client.describe_topics(TopicCollection([self.topic]),
                                                    request_timeout=ATTEMPT_TIMEOUT_S).values()
            try:
                return future.result(ATTEMPT_TIMEOUT_S + 10)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return None
                raise

        return admin.retrying(describe)

    def partition_count(self) -> int:
        """How many slots the topic has room for; 0 if it does not exist."""
        description = self._describe()
        return 0 if description is None else len(description.partitions)

    def ensure(self, slots: int, missing: str | None = None) -> bool:
        """The topic exists, is compacted, and has at least ``slots`` partitions, each with a leader;
        whether this call created it.

        With ``missing`` a missing topic is not created but refused with that message."""
        deadline = time.monotonic() + self.timeout_s
        admin = self.admin
        have = self.partition_count()
        if have == 0 and missing is not None:
            raise SinkRefusal(missing)
        created = False
        if have == 0:
            new = NewTopic(self.topic, slots, -1, config=dict(TOPIC_CONFIG))
            created = self._settle(admin.client.create_topics([new], request_timeout=ATTEMPT_TIMEOUT_S),
                                   KafkaError.TOPIC_ALREADY_EXISTS, "create the sink's progress topic")
            if created:
                log.info("created the sink's progress topic %s with %d partitions", self.topic, slots)
        elif have < slots:
            self._settle(admin.client.create_partitions([NewPartitions(self.topic, slots)],
                                                        request_timeout=ATTEMPT_TIMEOUT_S),
                         KafkaError.INVALID_PARTITIONS, "add partitions to the sink's progress topic")
        self._check_compacted()
        while True:
            description = self._describe()
            ready = description is not None and sum(
                1 for p in description.partitions if p.leader is not None and p.leader.id >= 0) >= slots
            if ready:
                return created
            if time.monotonic() > deadline:
                raise TimeoutError(f"the sink's progress topic {self.topic} did not show {slots} partitions with "
                                   f"leaders within {self.timeout_s:.0f} s")
            time.sleep(0.1)

    def _settle(self, futures: Mapping[Any, Any], fine: int, what: str) -> bool:
        """Wait for an admin call; ``False`` if it answered ``fine`` (another task got there first)."""
        done = True
        for future in futures.values():
            try:
                future.result(ATTEMPT_TIMEOUT_S + 10)
            except KafkaException as exc:
                error = exc.args[0]
                if error.code() == fine:
                    done = False
                    continue
                if error.code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                    raise SinkRefusal(f"the sink cannot {what} {self.topic}: {error.str()}. Grant the sink's principal "
                                      f"Create, Alter, Describe, DescribeConfigs, Read and Write on topics with the "
                                      f"prefix onceflow-progress-") from None
                raise
        return done

    def _check_compacted(self) -> None:
        key = (self.bootstrap_servers, self.topic)
        if key in _compacted:
            return
        admin = self.admin
        resource = ConfigResource(ResourceType.TOPIC, self.topic)

        def describe() -> str | None:
            [future] = admin.client.describe_configs([resource], request_timeout=ATTEMPT_TIMEOUT_S).values()
            entry = future.result(ATTEMPT_TIMEOUT_S + 10).get("cleanup.policy")
            return None if entry is None else str(entry.value)

        policy = admin.retrying(describe)
        if policy is not None and policy.replace(" ", "") != "compact":
            raise SinkRefusal(f"the sink's progress topic {self.topic} has cleanup.policy={policy}: its records, which "
                              f"say what the sink has written, would expire, and a replay after that would write "
                              f"twice. Set cleanup.policy=compact on it (kafka-configs --alter --add-config "
                              f"cleanup.policy=compact)")
        _compacted.add(key)

    def delete(self) -> None:
        """Delete the topic (a batch job's, once the job is over); failures are logged, not raised."""
        try:
            for future in self.admin.client.delete_topics([self.topic], request_timeout=ATTEMPT_TIMEOUT_S).values():
                future.result(ATTEMPT_TIMEOUT_S + 10)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                log.warning("could not delete the sink's progress topic %s: %s", self.topic, exc)

    # -- reading -----------------------------------------------------------------------------

    def read(self, slots: Iterable[int]) -> dict[int, SlotRecord]:
        """The latest committed record of each slot that has one."""
        wanted = [(self.topic, s) for s in sorted(set(slots))]
        if not wanted:
            return {}
        ends = {p: end for (_, p), end in self.admin.latest(wanted).items() if end > 0}  # the last stable offsets
        found: dict[int, SlotRecord] = {}
        window = TAIL_WINDOW
        while ends:
            # A start below the log start reads from the log start (auto.offset.reset=earliest).
            starts = {p: max(0, end - window) for p, end in ends.items()}
            last = self._read_tails(starts, ends)
            for p, value in last.items():
                found[p] = SlotRecord.decode(value, p)
            ends = {p: end for p, end in ends.items() if p not in found and starts[p] > 0}
            window *= 8
        return found

    def _read_tails(self, starts: Mapping[int, int], ends: Mapping[int, int]) -> dict[int, bytes | None]:
        """The last record's value in [start, end) of each partition, for those that have one."""
        consumer = _consumer(self.bootstrap_servers, self.kafka_params)
        consumer.assign([TopicPartition(self.topic, p, o) for p, o in starts.items()])
        last: dict[int, bytes | None] = {}
        open_ = set(starts)
        deadline = time.monotonic() + self.timeout_s
        try:
            while open_:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"reading the sink's progress topic {self.topic} (partitions {sorted(open_)}) "
                                       f"made no progress for {self.timeout_s:.0f} s")
                for message in consumer.consume(256, POLL_S):
                    p = message.partition() or 0
                    offset = message.offset() or 0
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            if offset >= ends[p]:
                                open_.discard(p)
                            continue
                        if error.fatal() or not error.retriable():
                            raise KafkaException(error)
                        continue
                    if p in open_ and offset < ends[p]:
                        last[p] = message.value()
                    if offset >= ends[p] - 1:
                        open_.discard(p)
        finally:
            consumer.unassign()
        return last
