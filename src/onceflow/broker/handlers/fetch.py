"""Fetch (with long polling) and ListOffsets.

Fetch reads each requested partition's stored bytes from the batch holding
the fetch offset, bounded by the partition's ``partition_max_bytes``, what is
left of the request's ``max_bytes``, and the high watermark.  With
``isolation_level=1`` (read_committed) the bound is the last stable offset,
and the answer lists the aborted transactions (producer id, first offset)
that overlap the returned batches, which the client uses to drop their
records (KIP-98).  The first partition that returns data
returns at least one whole batch even if it exceeds the limits (KIP-74), so a
consumer can never be stuck behind a large batch.  Record bytes are passed
through untouched: no record is decoded here.

If fewer than ``min_bytes`` are available and no partition has an error, the
request waits (up to ``max_wait_ms``) for any of its partitions' high
watermark to move, then reads again: the long poll consumers rely on.

Fetch sessions (KIP-227) are not kept: every answer is sessionless
(session id 0), which clients treat as "send full requests".  A request
naming a session id we never issued gets FETCH_SESSION_ID_NOT_FOUND.

ACLs, as Kafka's KafkaApis: a consumer's Fetch needs READ on each topic (a topic id
this broker does not know is UNKNOWN_TOPIC_ID first), a follower's (replica id >= 0)
CLUSTER_ACTION on the cluster, else TOPIC_AUTHORIZATION_FAILED for every partition;
ListOffsets needs DESCRIBE on each topic.  Refused topics are decided once per request
and never read.  With no authorizer the plain ``_FetchPlan`` runs: not one test per
partition is added to the path every fetch takes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...security.authorizer import AclOperation, ResourceType
from .authz import authorize_cluster, authorized_names
from .common import NO_THROTTLE, Request, build, ms, responses
from .context import BrokerContext, Connection, Handler

READ_UNCOMMITTED = 0
READ_COMMITTED = 1

LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL_TIMESTAMP = -4
LEADER_EPOCH = 0


def _epoch_error(requested: int) -> ErrorCode | None:
    """KIP-320 leader-epoch fencing: the only leader epoch here is 0."""
    if requested < 0 or requested == LEADER_EPOCH:
        return None
    return ErrorCode.unknown_leader_epoch if requested > LEADER_EPOCH else ErrorCode.fenced_leader_epoch


class _FetchPlan:
    """One Fetch request's partitions, re-resolved on every read (topics may vanish meanwhile)."""

    def __init__(self, broker: BrokerContext, request: Request) -> None:
        self.broker = broker
        self.request = request
        self.m = responses(request)
        self.by_id = request.api_version >= 13
        body = request.body
        self.committed = getattr(body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
        self.max_bytes = body.max_bytes

    def _topic(self, fetch_topic: Any) -> Any:
        registry = self.broker.registry
        if self.by_id:
            return registry.by_id.get(fetch_topic.topic_id)
        return registry.topics.get(fetch_topic.topic)

    def _missing(self, fetch_topic: Any) -> ErrorCode:
        """The error of a topic ``_topic`` did not give (asked only then)."""
        return ErrorCode.unknown_topic_id if self.by_id else ErrorCode.unknown_topic_or_partition

    def logs(self) -> list[Any]:
        out = []
        for fetch_topic in self.request.body.topics:
            topic = self._topic(fetch_topic)
            if topic is None:
                continue
            for p in fetch_topic.partitions:
                if 0 <= p.partition < len(topic.partitions):
                    out.append(topic.partitions[p.partition])
        return out

    def read(self) -> tuple[Any, int, bool]:
        """(response, bytes of records, whether any partition has an error)."""
        m = self.m
        remaining = self.max_bytes
        min_one = True
        total = 0
        any_error = False
        topics = []
        for fetch_topic in self.request.body.topics:
            topic = self._topic(fetch_topic)
            parts = []
            for p in fetch_topic.partitions:
                partition = None
                if topic is None:
                    error = self._missing(fetch_topic)
                elif not 0 <= p.partition < len(topic.partitions):
                    error = ErrorCode.unknown_topic_or_partition
                else:
                    partition = topic.partitions[p.partition]
                    error = _epoch_error(getattr(p, "current_leader_epoch", -1)) or ErrorCode.none
                records = b""
                hw = lso = start = -1
                aborted: tuple[Any, ...] | None = () if self.committed else None
                if partition is not None and error is ErrorCode.none:
                    limit = max(0, min(p.partition_max_bytes, remaining))
                    result = partition.read(p.fetch_offset, limit, min_one=min_one and limit > 0, committed=self.committed)
                    if isinstance(result, ErrorCode):
                        # OFFSET_OUT_OF_RANGE (below the log start or past the end): Kafka answers
                        # no offsets with it, -1 for each (ReplicaManager.readFromLocalLog).
                        error = result
                    else:
                        hw, lso, start = partition.high_watermark, partition.last_stable_offset, partition.log_start_offset
                        records = result.records
                        if result.aborted:
                            aborted = tuple(build(m.AbortedTransaction, producer_id=a.producer_id, first_offset=a.first_offset)
                                            for a in result.aborted)
                        if records:
                            min_one = False
                            remaining -= len(records)
                            total += len(records)
                if error is not ErrorCode.none:
                    any_error = True
                parts.append(
                    build(
                        m.PartitionData,
                        partition_index=p.partition,
                        error_code=error,
                        high_watermark=hw,
                        last_stable_offset=lso,
                        log_start_offset=start,
                        aborted_transactions=aborted,
                        preferred_read_replica=-1,
                        records=records,
                    )
                )
            if self.by_id:
                topics.append(build(m.FetchableTopicResponse, topic_id=fetch_topic.topic_id, partitions=tuple(parts)))
            else:
                topics.append(build(m.FetchableTopicResponse, topic=fetch_topic.topic, partitions=tuple(parts)))
        response = build(
            m.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, session_id=0, responses=tuple(topics)
        )
        return response, total, any_error


class _AuthorizedFetchPlan(_FetchPlan):
    """A Fetch with an authorizer: the topics it may not read are as if absent, with
    TOPIC_AUTHORIZATION_FAILED as their error (decided here, once)."""

    def __init__(self, broker: BrokerContext, request: Request, conn: Connection) -> None:
        super().__init__(broker, request)
        body = request.body
        replica_state = getattr(body, "replica_state", None)
        replica_id = replica_state.replica_id if replica_state is not None else getattr(body, "replica_id", -1)
        #: A follower's fetch needs CLUSTER_ACTION and no READ; without it every partition is refused.
        self.follower = replica_id >= 0
        self.refuse_all = self.follower and not authorize_cluster(broker, conn, AclOperation.CLUSTER_ACTION)
        names = []
        if not self.follower:
            for fetch_topic in body.topics:
                topic = super()._topic(fetch_topic)
                if self.by_id:
                    if topic is not None:
                        names.append(topic.name)
                else:
                    names.append(fetch_topic.topic)
        self.readable = authorized_names(broker, conn, AclOperation.READ, ResourceType.TOPIC, names)

    def _refused(self, fetch_topic: Any, topic: Any) -> bool:
        if self.follower:
            return self.refuse_all
        name = (topic.name if topic is not None else None) if self.by_id else fetch_topic.topic
        return name is not None and name not in self.readable

    def _topic(self, fetch_topic: Any) -> Any:
        topic = super()._topic(fetch_topic)
        return None if self._refused(fetch_topic, topic) else topic

    def _missing(self, fetch_topic: Any) -> ErrorCode:
        if self._refused(fetch_topic, super()._topic(fetch_topic)):
            return ErrorCode.topic_authorization_failed
        return super()._missing(fetch_topic)


def handle_fetch(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    body = request.body
    if getattr(body, "session_id", 0) != 0:
        m = responses(request)
        return build(
            m.FetchResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.fetch_session_id_not_found, session_id=0, responses=()
        )
    plan = _FetchPlan(broker, request) if broker.authorizer is None else _AuthorizedFetchPlan(broker, request, conn)
    response, total, any_error = plan.read()
    max_wait = ms(body.max_wait)
    if total >= body.min_bytes or any_error or max_wait <= 0 or not body.topics:
        return response
    return _long_poll(plan, max_wait, body.min_bytes)


async def _long_poll(plan: _FetchPlan, max_wait_ms: int, min_bytes: int) -> Any:
    loop = asyncio.get_running_loop()
    registry = plan.broker.registry
    deadline = loop.time() + max_wait_ms / 1000
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0:
            return plan.read()[0]
        logs = plan.logs()
        fut = registry.watch(logs)
        try:
            await asyncio.wait_for(fut, remaining)
        except TimeoutError:
            pass
        finally:
            registry.unwatch(logs, fut)
        response, total, any_error = plan.read()
        if total >= min_bytes or any_error:
            return response


def handle_list_offsets(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    committed = getattr(body, "isolation_level", READ_UNCOMMITTED) == READ_COMMITTED
    describable = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, (t.name for t in body.topics))
    topics = []
    for t in body.topics:
        topic = broker.registry.topics.get(t.name)
        refused = t.name not in describable
        parts = []
        for p in t.partitions:
            error = ErrorCode.none
            offset = ts = -1
            if refused:
                error = ErrorCode.topic_authorization_failed
            elif topic is None or not 0 <= p.partition_index < len(topic.partitions):
                error = ErrorCode.unknown_topic_or_partition
            else:
                error = _epoch_error(getattr(p, "current_leader_epoch", -1)) or ErrorCode.none
            if error is ErrorCode.none and topic is not None:
                partition = topic.partitions[p.partition_index]
                offset, ts = _lookup(partition, p.timestamp, committed)
            parts.append(
                build(
                    m.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=error,
                    timestamp=ts,
                    offset=offset,
                    # No record matches the timestamp: Kafka answers offset, timestamp and
                    # leader epoch -1 (KafkaApis leaves the response's defaults).
                    leader_epoch=LEADER_EPOCH if error is ErrorCode.none and offset != -1 else -1,
                )
            )
        topics.append(build(m.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return build(m.ListOffsetsResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def _lookup(partition: Any, target: int, committed: bool) -> tuple[int, int]:
    if target == LATEST_TIMESTAMP:
        return (partition.last_stable_offset if committed else partition.high_watermark), -1
    if target in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        return partition.log_start_offset, -1
    if target == MAX_TIMESTAMP:
        found = partition.max_timestamp_offset()
    elif target >= 0:
        found = partition.offset_for_timestamp(target)
    else:
        return -1, -1
    if found is None:
        return -1, -1
    offset, ts = found
    if committed and offset >= partition.last_stable_offset:
        return -1, -1
    return offset, ts


HANDLERS: dict[int, Handler] = {apis.FETCH: handle_fetch, apis.LIST_OFFSETS: handle_list_offsets}
