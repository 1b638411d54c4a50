"""Transactions on the wire: InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, WriteTxnMarkers, and the KIP-664 inspection APIs
(DescribeProducers, DescribeTransactions, ListTransactions).

Like the group handlers, these only translate between the request/response
versions and the (sans-I/O, callback-style) transaction and group
coordinators.  Version quirks kept from Kafka's KafkaApis:

* PRODUCER_FENCED is answered as INVALID_PRODUCER_EPOCH to clients too old to
  know it (InitProducerId < v4, AddPartitionsToTxn/AddOffsetsToTxn/EndTxn < v2);
* TxnOffsetCommit is verified with the transaction coordinator first (KIP-890
  part 1, ``transaction.partition.verification.enable``): the group's offsets
  partition must be in the producer's ongoing transaction, as Kafka's
  GroupCoordinator.handleTxnCommitOffsets checks;
* AddPartitionsToTxn: if any partition does not exist, the whole request fails:
  UNKNOWN_TOPIC_OR_PARTITION for those, OPERATION_NOT_ATTEMPTED for the rest.
  Only the client versions (0-3) are served: v4+ is Kafka's broker-to-broker
  verification, which a single node does in-process (see the produce handler).

ACLs, as Kafka's KafkaApis, checked before the coordinators are called, so a refused
request changes nothing (a refused InitProducerId fences no one): a transactional id
needs WRITE for InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, EndTxn and
TxnOffsetCommit (TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an InitProducerId without one
(an idempotent producer) needs IDEMPOTENT_WRITE on the cluster or WRITE on some topic
(KIP-679; CLUSTER_AUTHORIZATION_FAILED).  AddPartitionsToTxn needs WRITE on each topic
(a refused topic fails the whole request, the other partitions OPERATION_NOT_ATTEMPTED);
AddOffsetsToTxn and TxnOffsetCommit READ on the group, TxnOffsetCommit READ on each
topic.  WriteTxnMarkers needs ALTER on the cluster (KAFKA-16513: Admin.abortTransaction,
KIP-664) or CLUSTER_ACTION.  DescribeProducers needs READ on each topic;
DescribeTransactions DESCRIBE on each transactional id (and shows only the partitions
of topics the principal may describe); ListTransactions lists only the transactional
ids the principal may describe.
"""

from __future__ import annotations

import logging
from typing import Any

from ...config import TRANSACTION_PARTITION_VERIFICATION_ENABLE
from ...coordinator import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ...coordinator.group.types import OffsetAndMetadata, TopicPartition
from ...coordinator.transaction.metadata import TV_2
from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...security.authorizer import CLUSTER_NAME, AclOperation, ResourceType
from .authz import authorize, authorize_any, authorize_cluster, authorized_names, log_decision
from .common import NO_THROTTLE, Request, build, instant, ms, responses, verification_error, via_callback
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)

#: Kafka's ``Topic.isInternal``.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})


def _unfence(error: ErrorCode, request: Request, first_version_knowing_it: int) -> ErrorCode:
    if error is ErrorCode.producer_fenced and request.api_version < first_version_knowing_it:
        return ErrorCode.invalid_producer_epoch
    return error


def _may_write_transactional_id(broker: BrokerContext, conn: Connection, transactional_id: str) -> bool:
    return authorize(broker, conn, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)


def _may_produce_idempotently(broker: BrokerContext, conn: Connection) -> bool:
    """IDEMPOTENT_WRITE on the cluster, or WRITE on some topic (KIP-679).  Kafka logs neither
    refusal; the request's refusal is logged here, once, as the cluster's."""
    if broker.authorizer is None:
        return True
    if authorize_cluster(broker, conn, AclOperation.IDEMPOTENT_WRITE, log_denied=False):
        return True
    if authorize_any(broker, conn, AclOperation.WRITE, ResourceType.TOPIC):
        return True
    log_decision(conn, AclOperation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, allowed=False)
    return False


def handle_init_producer_id(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    if body.transactional_id is not None:
        refusal = None if _may_write_transactional_id(broker, conn, body.transactional_id) \
            else ErrorCode.transactional_id_authorization_failed
    else:
        refusal = None if _may_produce_idempotently(broker, conn) else ErrorCode.cluster_authorization_failed
    if refusal is not None:  # before the coordinator is asked: nothing is fenced, bumped or allocated
        return build(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=refusal, producer_id=-1,
                     producer_epoch=-1)

    def respond(result: tuple[ErrorCode, int, int]) -> Any:
        error, producer_id, epoch = result
        return build(m.InitProducerIdResponse, throttle_time=NO_THROTTLE, error_code=_unfence(error, request, 4),
                     producer_id=producer_id, producer_epoch=epoch)

    return via_callback(
        lambda cb: broker.txns.init_producer_id(
            body.transactional_id,
            ms(body.transaction_timeout),
            getattr(body, "producer_id", -1),
            getattr(body, "producer_epoch", -1),
            lambda error, pid, epoch: cb((error, pid, epoch)),
        ),
        respond,
    )


def handle_add_partitions_to_txn(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    """Versions 0-3 (the client versions; v4+ batch transactions for broker-to-broker verification)."""
    m = responses(request)
    body = request.body
    wanted = [(t.name, p) for t in body.v3_and_below_topics for p in t.partitions]

    def respond(errors: dict[TopicPartition, ErrorCode]) -> Any:
        by_topic: dict[str, list[Any]] = {}
        for (topic, partition), error in errors.items():
            by_topic.setdefault(topic, []).append(build(m.AddPartitionsToTxnPartitionResult, partition_index=partition,
                                                        partition_error_code=_unfence(error, request, 2)))
        return build(m.AddPartitionsToTxnResponse, throttle_time=NO_THROTTLE, results_by_topic_v3_and_below=tuple(
            build(m.AddPartitionsToTxnTopicResult, name=t, results_by_partition=tuple(r)) for t, r in by_topic.items()))

    if not _may_write_transactional_id(broker, conn, body.v3_and_below_transactional_id):
        return respond(dict.fromkeys(wanted, ErrorCode.transactional_id_authorization_failed))
    refused: set[TopicPartition] = set()
    if broker.authorizer is not None:
        # WRITE on each topic; internal topics are never asked about, so never allowed (Kafka's
        # handleAddPartitionsToTxnRequest leaves them out of the question).
        writable = authorized_names(broker, conn, AclOperation.WRITE, ResourceType.TOPIC,
                                    (t for t, _ in wanted if t not in INTERNAL_TOPICS))
        refused = {tp for tp in wanted if tp[0] not in writable}
    missing = {tp for tp in wanted if tp not in refused and broker.registry.get(*tp) is None}
    if missing or refused:  # the whole request fails, as in Kafka
        return respond({tp: ErrorCode.topic_authorization_failed if tp in refused
                        else ErrorCode.unknown_topic_or_partition if tp in missing else ErrorCode.operation_not_attempted
                        for tp in wanted})
    return via_callback(
        lambda cb: broker.txns.add_partitions(body.v3_and_below_transactional_id, body.v3_and_below_producer_id,
                                              body.v3_and_below_producer_epoch, wanted, cb),
        respond,
    )


def handle_add_offsets_to_txn(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    partition = broker.groups.partition_for(body.group_id)

    def respond(error: ErrorCode) -> Any:
        return build(m.AddOffsetsToTxnResponse, throttle_time=NO_THROTTLE, error_code=_unfence(error, request, 2))

    if not _may_write_transactional_id(broker, conn, body.transactional_id):
        return respond(ErrorCode.transactional_id_authorization_failed)
    if not authorize(broker, conn, AclOperation.READ, ResourceType.GROUP, body.group_id):
        return respond(ErrorCode.group_authorization_failed)

    try:
        broker.appender.internal_partition(OFFSETS_TOPIC, partition)  # the group's offsets partition must exist to join the transaction
    except OSError as exc:  # e.g. a full disk: nothing was created; the client retries
        log.error("cannot create %s: %s", OFFSETS_TOPIC, exc)
        return respond(ErrorCode.coordinator_not_available)

    return via_callback(
        lambda cb: broker.txns.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch, (OFFSETS_TOPIC, partition), cb),
        respond,
    )


def handle_end_txn(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body

    def respond(result: tuple[ErrorCode, int, int]) -> Any:
        error, producer_id, producer_epoch = result
        return build(m.EndTxnResponse, throttle_time=NO_THROTTLE, error_code=_unfence(error, request, 2),
                     producer_id=producer_id, producer_epoch=producer_epoch)

    if not _may_write_transactional_id(broker, conn, body.transactional_id):
        return respond((ErrorCode.transactional_id_authorization_failed, -1, -1))

    # EndTxn v5+ is a transactions-v2 client's (KIP-890 part 2): its end bumps the epoch.
    client_version = TV_2 if request.api_version >= apis.END_TXN_V2 else 0
    return via_callback(
        lambda cb: broker.txns.end_txn(body.transactional_id, body.producer_id, body.producer_epoch, bool(body.committed),
                                       lambda error, pid, epoch: cb((error, pid, epoch)), client_version),
        respond,
    )


def handle_txn_offset_commit(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    now = broker.clock.now_ms()
    order = [(t.name, [p.partition_index for p in t.partitions]) for t in body.topics]
    offsets: dict[TopicPartition, OffsetAndMetadata] = {}
    errors: dict[TopicPartition, ErrorCode] = {}
    # WRITE on the transactional id, READ on the group (each refusal: every partition), READ on each topic.
    whole = (ErrorCode.transactional_id_authorization_failed
             if not _may_write_transactional_id(broker, conn, body.transactional_id)
             else ErrorCode.group_authorization_failed
             if not authorize(broker, conn, AclOperation.READ, ResourceType.GROUP, body.group_id) else None)
    readable = set() if whole is not None else authorized_names(broker, conn, AclOperation.READ, ResourceType.TOPIC,
                                                               (t.name for t in body.topics))
    for t in body.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            if whole is not None:
                errors[tp] = whole
            elif t.name not in readable:
                errors[tp] = ErrorCode.topic_authorization_failed
            elif broker.registry.get(*tp) is None:
                errors[tp] = ErrorCode.unknown_topic_or_partition
            else:
                offsets[tp] = OffsetAndMetadata(offset=p.committed_offset, leader_epoch=getattr(p, "committed_leader_epoch", -1),
                                                metadata=p.committed_metadata, commit_timestamp_ms=now)

    def respond(results: dict[TopicPartition, ErrorCode]) -> Any:
        merged = {**results, **errors}
        return build(m.TxnOffsetCommitResponse, throttle_time=NO_THROTTLE, topics=tuple(
            build(m.TxnOffsetCommitResponseTopic, name=name, partitions=tuple(
                build(m.TxnOffsetCommitResponsePartition, partition_index=i,
                      error_code=_unfence(merged.get((name, i), ErrorCode.none), request, 3)) for i in parts))
            for name, parts in order))

    if not offsets:
        return respond({})
    verify = None
    if broker.config[TRANSACTION_PARTITION_VERIFICATION_ENABLE]:
        generic_errors = request.api_version >= 4  # KIP-890: v4 clients know TRANSACTION_ABORTABLE

        def verify(partition: int) -> ErrorCode:
            error = broker.txns.partition_in_transaction(body.transactional_id, body.producer_id, body.producer_epoch,
                                                         OFFSETS_TOPIC, partition)
            return verification_error(error, generic_errors)

    def commit(cb: Any) -> None:
        broker.groups.commit_transactional_offsets(
            body.group_id, body.producer_id, body.producer_epoch,
            getattr(body, "generation_id", -1), getattr(body, "member_id", ""), getattr(body, "group_instance_id", None),
            offsets, cb, verify,
        )

    if request.api_version < apis.TXN_OFFSET_COMMIT_V2:
        return via_callback(commit, respond)

    # Transactions v2 (KIP-890 part 2): the client sent no AddOffsetsToTxn; the group's offsets
    # partition joins the transaction here, then the offsets are committed (verified, as always).
    # An empty group id is refused first, as Kafka's GroupCoordinatorService does before its
    # verification adds anything to the transaction.
    if not body.group_id:
        return respond(dict.fromkeys(offsets, ErrorCode.invalid_group_id))
    partition = broker.groups.partition_for(body.group_id)
    try:
        broker.appender.internal_partition(OFFSETS_TOPIC, partition)
    except OSError as exc:  # e.g. a full disk: nothing was created; the client retries
        log.error("cannot create %s: %s", OFFSETS_TOPIC, exc)
        return respond(dict.fromkeys(offsets, ErrorCode.coordinator_not_available))

    def add_then_commit(cb: Any) -> None:
        def added(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                commit(cb)
            else:
                cb(dict.fromkeys(offsets, verification_error(error, True)))

        broker.txns.add_offsets(body.transactional_id, body.producer_id, body.producer_epoch, (OFFSETS_TOPIC, partition),
                                added, client_transaction_version=TV_2)

    return via_callback(add_then_commit, respond)


def handle_write_txn_markers(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    """Write markers on request (Kafka's inter-broker API; Admin.abortTransaction uses it, KIP-664)."""
    m = responses(request)
    markers = list(request.body.markers)
    results: list[dict[TopicPartition, ErrorCode]] = [{} for _ in markers]
    refused = not (authorize_cluster(broker, conn, AclOperation.ALTER, log_denied=False)
                   or authorize_cluster(broker, conn, AclOperation.CLUSTER_ACTION))
    if refused:
        for marker, slot in zip(markers, results, strict=True):  # WriteTxnMarkersRequest.getErrorResponse
            slot.update(((t.name, p), ErrorCode.cluster_authorization_failed) for t in marker.topics for p in t.partition_indexes)

    def respond(_: object) -> Any:
        out = []
        for marker, errors in zip(markers, results, strict=True):
            by_topic: dict[str, list[Any]] = {}
            for (topic, partition), error in errors.items():
                by_topic.setdefault(topic, []).append(build(m.WritableTxnMarkerPartitionResult, partition_index=partition, error_code=error))
            out.append(build(m.WritableTxnMarkerResult, producer_id=marker.producer_id, topics=tuple(
                build(m.WritableTxnMarkerTopicResult, name=t, partitions=tuple(r)) for t, r in by_topic.items())))
        return build(m.WriteTxnMarkersResponse, markers=tuple(out))

    if refused:
        return respond(None)

    def start(cb: Any) -> None:
        remaining = [len(markers)]
        if not markers:
            cb(None)
            return
        for marker, slot in zip(markers, results, strict=True):
            partitions = frozenset((t.name, p) for t in marker.topics for p in t.partition_indexes)

            def done(errors: dict[TopicPartition, ErrorCode], slot: dict[TopicPartition, ErrorCode] = slot) -> None:
                slot.update(errors)
                remaining[0] -= 1
                if remaining[0] == 0:
                    cb(None)

            broker.marker_writer.write_markers(marker.producer_id, marker.producer_epoch, marker.coordinator_epoch,
                                               bool(marker.transaction_result), partitions, done)

    return via_callback(start, respond)


def handle_describe_producers(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    topics = []
    readable = authorized_names(broker, conn, AclOperation.READ, ResourceType.TOPIC, (t.name for t in request.body.topics))
    for t in request.body.topics:
        parts = []
        for index in t.partition_indexes:
            if t.name not in readable:
                parts.append(build(m.PartitionResponse, partition_index=index, error_code=ErrorCode.topic_authorization_failed,
                                   error_message="Topic authorization failed.", active_producers=()))
                continue
            partition = broker.registry.get(t.name, index)
            if partition is None:
                parts.append(build(m.PartitionResponse, partition_index=index, error_code=ErrorCode.unknown_topic_or_partition,
                                   error_message=None, active_producers=()))
                continue
            active = tuple(
                build(m.ProducerState, producer_id=pid, producer_epoch=entry.producer_epoch, last_sequence=entry.last_seq,
                      last_timestamp=entry.last_timestamp, coordinator_epoch=entry.coordinator_epoch,
                      current_txn_start_offset=-1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset)
                for pid, entry in sorted(partition.producer_state.producers().items())
            )
            parts.append(build(m.PartitionResponse, partition_index=index, error_code=ErrorCode.none, error_message=None,
                               active_producers=active))
        topics.append(build(m.TopicResponse, name=t.name, partitions=tuple(parts)))
    return build(m.DescribeProducersResponse, throttle_time=NO_THROTTLE, topics=tuple(topics))


def handle_describe_transactions(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    states = []
    wanted = list(request.body.transactional_ids)
    allowed = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, wanted)
    described = iter(broker.txns.describe_transactions([t for t in wanted if t in allowed]))
    for transactional_id in wanted:
        if transactional_id not in allowed:
            states.append(build(
                m.TransactionState, error_code=ErrorCode.transactional_id_authorization_failed, transactional_id=transactional_id,
                transaction_state="", transaction_timeout=_timedelta(0), transaction_start_time=instant(-1), producer_id=-1,
                producer_epoch=-1, topics=()))
            continue
        d = next(described)
        by_topic: dict[str, list[int]] = {}
        # Only the partitions of topics the principal may describe (KafkaApis.handleDescribeTransactionsRequest).
        describable = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, (t for t, _ in d.partitions))
        for topic, partition in sorted(d.partitions):
            if topic in describable:
                by_topic.setdefault(topic, []).append(partition)
        states.append(build(
            m.TransactionState, error_code=d.error, transactional_id=d.transactional_id, transaction_state=d.state,
            transaction_timeout=_timedelta(d.timeout_ms), transaction_start_time=instant(d.start_timestamp_ms), producer_id=d.producer_id,
            producer_epoch=d.producer_epoch,
            topics=tuple(build(m.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
        ))
    return build(m.DescribeTransactionsResponse, throttle_time=NO_THROTTLE, transaction_states=tuple(states))


def handle_list_transactions(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    known = {"Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead", "PrepareEpochFence"}
    wanted = set(body.state_filters or ())
    unknown = tuple(sorted(wanted - known))
    states = wanted & known
    listed: list[Any]
    if wanted and not states:
        listed = []  # only unknown states asked for: nothing matches (they are reported back)
    else:
        listed = broker.txns.list_transactions(states or None, set(body.producer_id_filters or ()) or None,
                                               getattr(body, "duration_filter", -1))
        if broker.authorizer is not None:  # only the transactional ids the principal may describe
            listed = [x for x in listed
                      if authorize(broker, conn, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, x.transactional_id)]
    return build(m.ListTransactionsResponse, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, unknown_state_filters=unknown,
                 transaction_states=tuple(build(m.TransactionState, transactional_id=x.transactional_id, producer_id=x.producer_id,
                                                transaction_state=x.state) for x in listed))


def _timedelta(milliseconds: int) -> Any:
    import datetime

    return datetime.timedelta(milliseconds=milliseconds)


HANDLERS: dict[int, Handler] = {
    apis.INIT_PRODUCER_ID: handle_init_producer_id,
    apis.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    apis.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    apis.END_TXN: handle_end_txn,
    apis.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    apis.WRITE_TXN_MARKERS: handle_write_txn_markers,
    apis.DESCRIBE_PRODUCERS: handle_describe_producers,
    apis.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    apis.LIST_TRANSACTIONS: handle_list_transactions,
}
