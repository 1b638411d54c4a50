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

ACLs, as Kafka's KafkaApis (``handleProduceRequest``, ``handleDeleteRecordsRequest``),
checked before the Appender is called, and only when there is an authorizer (one test
per request otherwise): a Produce holding transactional batches needs WRITE on its
transactional id, else every partition answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED
and nothing is written; then each topic needs WRITE (DeleteRecords: DELETE), else its
partitions answer TOPIC_AUTHORIZATION_FAILED -- before whether the topic exists is
looked at, so a refused client learns nothing of it.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...records.batch import HEADER_SIZE, read_header
from ...security.authorizer import AclOperation, ResourceType
from ..appender import DeleteResult, DeleteResults, PartitionResult, TopicResults
from .authz import authorize, authorized_names
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
    denied: TopicResults = []
    if broker.authorizer is not None:
        if not _transactional_id_authorized(broker, conn, body):
            if acks == 0:
                log.info("acks=0 produce from %s refused (transactional id); closing the connection", conn.peer)
                conn.close()
                return None
            return _refused_whole(request, [(n, ids.get(n), t) for n, t in named] + [(None, t.topic_id, t) for t in unknown],
                                  ErrorCode.transactional_id_authorization_failed, "Transactional Id authorization failed.")
        allowed = authorized_names(broker, conn, AclOperation.WRITE, ResourceType.TOPIC, (n for n, _ in named))
        denied = [(n, [_refused(p.index, ErrorCode.topic_authorization_failed) for p in t.partition_data])
                  for n, t in named if n not in allowed]
        named = [(n, t) for n, t in named if n in allowed]

    def respond(results: TopicResults) -> Any:
        missing = [(t.topic_id, [_refused(p.index, ErrorCode.unknown_topic_id) for p in t.partition_data]) for t in unknown]
        if acks == 0:
            if missing or denied or any(o.error is not ErrorCode.none for _, outs in results for o in outs):
                log.info("acks=0 produce from %s had errors; closing the connection so the producer notices", conn.peer)
                conn.close()
            return None
        return _response(request, [(name, ids.get(name), outs) for name, outs in (results + denied if denied else results)] +
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


def _refused(index: int, error: ErrorCode) -> PartitionResult:
    result = PartitionResult(index)
    result.error = error
    return result


def _transactional_id_authorized(broker: BrokerContext, conn: Connection, body: Any) -> bool:
    """Kafka's check before anything else: a request holding transactional batches (the first
    batch of a partition's records says) needs a transactional id and WRITE on it."""
    transactional = False
    for t in body.topic_data:
        for p in t.partition_data:
            records = p.records
            if records is not None and len(records) >= HEADER_SIZE and read_header(records).is_transactional:
                transactional = True
                break
        if transactional:
            break
    if not transactional:
        return True
    transactional_id = getattr(body, "transactional_id", None)
    return transactional_id is not None and authorize(broker, conn, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID,
                                                      transactional_id)


def _refused_whole(request: Request, topics: list[tuple[str | None, uuid.UUID | None, Any]], error: ErrorCode,
                   message: str) -> Any:
    """Kafka's ProduceRequest.getErrorResponse: every partition of the request answers ``error``."""
    results = []
    for name, topic_id, t in topics:
        outs = []
        for p in t.partition_data:
            out = _refused(p.index, error)
            out.message = message
            outs.append(out)
        results.append((name, topic_id, outs))
    return _response(request, results)


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
    topics = list(request.body.topics)
    denied: DeleteResults = []
    if broker.authorizer is not None:
        allowed = authorized_names(broker, conn, AclOperation.DELETE, ResourceType.TOPIC, (t.name for t in topics))
        refused: dict[str, dict[int, DeleteResult]] = {}  # a partition named twice is answered once, as Kafka does
        for t in topics:
            if t.name not in allowed:
                for p in t.partitions:
                    refused.setdefault(t.name, {})[p.partition_index] = DeleteResult(
                        p.partition_index, ErrorCode.topic_authorization_failed, -1)
        denied = [(name, list(parts.values())) for name, parts in refused.items()]
        topics = [t for t in topics if t.name in allowed]
    results = broker.appender.delete_records(
        (t.name, ((p.partition_index, p.offset) for p in t.partitions)) for t in topics) if topics else []
    return _delete_records_response(request, results + denied)


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
