"""Produce and DeleteRecords: the writes clients make to partition logs, each one call to the
``Appender`` (``append_records``, ``delete_records``) and its outcome to the answer.

Everything a write involves -- finding each partition (internal topics are
closed to clients), checking a transactional batch against its transaction
(KIP-890), appending, group commit, and for ``acks=-1`` waiting until every
batch is on disk or the request's ``timeout`` has passed -- is the
``Appender``'s (``broker/appender.py``), as in Kafka, where KafkaApis hands
Produce to ReplicaManager.appendRecords.  This handler only translates:
request in, one call, the per-partition outcomes out.  What is left here is
the wire's: the version from which a client knows TRANSACTION_ABORTABLE, and
``acks=0``, which is never answered: if a partition failed, the connection is
closed so the producer notices (Kafka does the same); and from v13 (KIP-516)
topic ids instead of names.

DeleteRecords (KIP-107) is answered at once: the Appender returns each
partition's new log start offset (its low watermark), durable already.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from ..appender import DeleteResults, PartitionResult, TopicResults
from .common import NO_THROTTLE, Request, build, ms, responses, timestamp, via_callback
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)

#: Produce v11 (KIP-890) is the first version whose clients handle TRANSACTION_ABORTABLE.
_GENERIC_TXN_ERRORS_FROM = 11
#: Produce v13 (KIP-516) names each topic by its id, not its name.
_TOPIC_IDS_FROM = 13


def handle_produce(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    body = request.body
    acks = body.acks
    # Produce v13+ (KIP-516) names topics by id: an id this broker does not know gets
    # UNKNOWN_TOPIC_ID for each of its partitions, and is not appended anywhere.
    by_id = request.api_version >= _TOPIC_IDS_FROM
    named: list[tuple[str, Any]] = []
    unknown: list[Any] = []
    ids: dict[str, uuid.UUID] = {}
    for t in body.topic_data:
        if not by_id:
            named.append((t.name, t))
            continue
        topic = broker.registry.by_id.get(t.topic_id) if t.topic_id is not None else None
        if topic is None:
            unknown.append(t)
        else:
            ids[topic.name] = topic.topic_id
            named.append((topic.name, t))

    def respond(results: TopicResults) -> Any:
        missing = [(t.topic_id, [_unknown_id(p.index) for p in t.partition_data]) for t in unknown]
        if acks == 0:
            if missing or any(o.error is not ErrorCode.none for _, outs in results for o in outs):
                log.info("acks=0 produce from %s had errors; closing the connection so the producer notices", conn.peer)
                conn.close()
            return None
        return _response(request, [(name, ids.get(name), outs) for name, outs in results] +
                         [(None, topic_id, outs) for topic_id, outs in missing])

    return via_callback(
        lambda done: broker.appender.append_records(
            ((name, ((p.index, p.records) for p in t.partition_data)) for name, t in named),
            acks,
            ms(body.timeout),
            done,
            transactional_id=getattr(body, "transactional_id", None),
            generic_txn_errors=request.api_version >= _GENERIC_TXN_ERRORS_FROM,
            adds_partitions=request.api_version >= apis.PRODUCE_V2,
            client=conn.peer,
        ),
        respond,
    )


def _unknown_id(index: int) -> PartitionResult:
    result = PartitionResult(index)
    result.error = ErrorCode.unknown_topic_id
    return result


def _response(request: Request, results: list[tuple[str | None, uuid.UUID | None, list[PartitionResult]]]) -> Any:
    m = responses(request)
    topics = tuple(
        build(
            m.TopicProduceResponse,
            name=name,
            topic_id=topic_id,
            partition_responses=tuple(
                build(
                    m.PartitionProduceResponse,
                    index=o.index,
                    error_code=o.error,
                    base_offset=o.base_offset if o.error is ErrorCode.none else -1,
                    log_append_time=timestamp(o.log_append_time),
                    log_start_offset=o.log_start_offset,
                    record_errors=(),
                    error_message=o.message if o.error is not ErrorCode.none else None,
                )
                for o in outs
            ),
        )
        for name, topic_id, outs in results
    )
    return build(m.ProduceResponse, responses=topics, throttle_time=NO_THROTTLE)


def handle_delete_records(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    results = broker.appender.delete_records(
        (t.name, ((p.partition_index, p.offset) for p in t.partitions)) for t in request.body.topics)
    return _delete_records_response(request, results)


def _delete_records_response(request: Request, results: DeleteResults) -> Any:
    m = responses(request)
    topics = tuple(
        build(
            m.DeleteRecordsTopicResult,
            name=name,
            partitions=tuple(
                build(m.DeleteRecordsPartitionResult, partition_index=o.index, low_watermark=o.low_watermark,
                      error_code=o.error)
                for o in outs
            ),
        )
        for name, outs in results
    )
    return build(m.DeleteRecordsResponse, throttle_time=NO_THROTTLE, topics=topics)


HANDLERS: dict[int, Handler] = {apis.PRODUCE: handle_produce, apis.DELETE_RECORDS: handle_delete_records}
