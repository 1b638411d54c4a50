"""Produce: append each partition's batch, then answer by acks.

Per partition: find the log (UNKNOWN_TOPIC_OR_PARTITION if none; internal
topics are closed to clients), let ``PartitionLog.append_produced`` validate
and append the one batch, and mark the partition dirty for group commit.
Then, by ``acks``:

* ``-1`` (all): answer once every appended partition's high watermark covers
  the batch, i.e. once it is fsynced; ``timeout`` bounds the wait
  (REQUEST_TIMED_OUT, as Kafka answers when replication is too slow).
* ``1``: answer at once; the data is in the page cache and becomes visible to
  consumers when the next group commit makes it durable.
* ``0``: no answer at all; if a partition failed, the connection is closed so
  the producer notices (Kafka does the same).

Idempotent and transactional batches are checked against the partition's
producer state inside ``PartitionLog.append_produced`` (sequence, epoch,
duplicates).  A transactional batch must also come with the request's
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka
answers) and, with ``transaction.partition.verification.enable`` (KIP-890
part 1), its partition must already be in that producer's ongoing
transaction according to the transaction coordinator: otherwise
INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce v11 on), so a late
write of an aborted transaction cannot open a transaction nobody will ever
finish.  Coordinator errors a client would not retry on a produce are
answered NOT_ENOUGH_REPLICAS, as Kafka does.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any

from ...config import TRANSACTION_PARTITION_VERIFICATION_ENABLE
from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...records.batch import HEADER_SIZE, Invalid, read_header
from ..group_commit import Waiter
from .common import NO_THROTTLE, Request, build, ms, responses, timestamp, verification_error
from .context import BrokerContext, Connection, Handler

log = logging.getLogger(__name__)


class _PartitionOutcome:
    __slots__ = ("base_offset", "durable_at", "error", "index", "log", "log_append_time", "log_start_offset", "message")

    def __init__(self, index: int) -> None:
        self.index = index
        self.error = ErrorCode.none
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.message: str | None = None
        self.durable_at = -1
        self.log: Any = None


def handle_produce(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    body = request.body
    acks = body.acks
    now = broker.clock.now_ms()
    outcomes: list[tuple[str, list[_PartitionOutcome]]] = []
    failed = False
    transactional_id = getattr(body, "transactional_id", None)
    verify = broker.config[TRANSACTION_PARTITION_VERIFICATION_ENABLE]
    for topic_data in body.topic_data:
        name = topic_data.name
        topic = broker.registry.topics.get(name)
        results = []
        for pdata in topic_data.partition_data:
            out = _PartitionOutcome(pdata.index)
            results.append(out)
            if acks not in (-1, 0, 1):
                out.error = ErrorCode.invalid_required_acks
            elif topic is None or not 0 <= pdata.index < len(topic.partitions):
                out.error = ErrorCode.unknown_topic_or_partition
            elif topic.internal:
                out.error = ErrorCode.invalid_topic_exception
                out.message = f"Cannot append to internal topic {name}"
            elif not pdata.records:
                out.error = ErrorCode.corrupt_message
                out.message = "empty record set"
            else:
                error = _transaction_check(broker, transactional_id, name, pdata.index, pdata.records, verify,
                                           request.api_version >= _GENERIC_TXN_ERRORS_FROM)
                if error is not None:
                    out.error = error
                else:
                    _append(broker, topic.partitions[pdata.index], pdata.records, now, out, conn)
            if out.error is not ErrorCode.none:
                failed = True
        outcomes.append((name, results))
    if acks == 0:
        if failed:
            log.info("acks=0 produce from %s had errors; closing the connection so the producer notices", conn.peer)
            conn.close()
        return None
    if acks == -1:
        waiting = [o for _, rs in outcomes for o in rs if o.log is not None]
        if waiting:
            return _respond_when_durable(request, outcomes, waiting, broker.on_durable, ms(body.timeout))
    return _response(request, outcomes)


#: Produce v11 (KIP-890) is the first version whose clients handle TRANSACTION_ABORTABLE.
_GENERIC_TXN_ERRORS_FROM = 11

_RETRIABLE_VERIFICATION = {
    ErrorCode.concurrent_transactions,
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
}


def _transaction_check(broker: BrokerContext, transactional_id: str | None, topic: str, partition: int, records: bytes,
                       verify: bool, generic_errors: bool) -> ErrorCode | None:
    if len(records) < HEADER_SIZE:
        return None  # the log refuses it with the right error
    header = read_header(records)
    if not header.is_transactional:
        return None
    if transactional_id is None:
        return ErrorCode.transactional_id_authorization_failed
    if not verify:
        return None
    error = broker.txns.partition_in_transaction(transactional_id, header.producer_id, header.producer_epoch, topic, partition)
    if error is ErrorCode.none:
        return None
    if error in _RETRIABLE_VERIFICATION:
        return ErrorCode.not_enough_replicas
    return verification_error(error, generic_errors)


def _append(broker: BrokerContext, partition: Any, records: bytes, now: int, out: _PartitionOutcome, conn: Connection) -> None:
    result = partition.append_produced(records, now)
    if isinstance(result, Invalid):
        out.error = result.error
        out.message = result.reason
        log.info("produce to %s from %s refused: %s (%s)", partition.name, conn.peer, result.error.name, result.reason)
        return
    out.base_offset = result.base_offset
    out.log_append_time = result.log_append_time
    out.log_start_offset = result.log_start_offset
    out.durable_at = result.last_offset + 1
    out.log = partition
    broker.after_append(partition)


def _respond_when_durable(request: Request, outcomes: list[tuple[str, list[_PartitionOutcome]]],
                          waiting: list[_PartitionOutcome], on_durable: Callable[[Any, int, Waiter], None],
                          timeout_ms: int) -> asyncio.Future[Any]:
    """The answer, once every partition written is durable (or failed), or at the timeout:
    REQUEST_TIMED_OUT for a write still waiting, KAFKA_STORAGE_ERROR for one that failed.

    Plain callbacks into one future (no task, gather or wait_for): the answer leaves one loop
    pass after the last fsync reports, which is most of what an acks=all produce costs."""
    loop = asyncio.get_running_loop()
    answer: asyncio.Future[Any] = loop.create_future()
    pending = set(range(len(waiting)))

    def finish() -> None:
        timer.cancel()
        for i in pending:
            waiting[i].error = ErrorCode.request_timed_out
        answer.set_result(_response(request, outcomes))

    def durable(i: int, error: OSError | None) -> None:
        if answer.done() or i not in pending:
            return  # answered already (the timeout)
        pending.discard(i)
        if error is not None:
            waiting[i].error = ErrorCode.kafka_storage_error
            waiting[i].message = "the write could not be made durable"
        if not pending:
            finish()

    def timed_out() -> None:
        if not answer.done():
            finish()

    timer = loop.call_later(max(timeout_ms, 0) / 1000, timed_out)
    for i, out in enumerate(waiting):
        on_durable(out.log, out.durable_at, functools.partial(durable, i))
    return answer


def _response(request: Request, outcomes: list[tuple[str, list[_PartitionOutcome]]]) -> Any:
    m = responses(request)
    topics = tuple(
        build(
            m.TopicProduceResponse,
            name=name,
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
                for o in results
            ),
        )
        for name, results in outcomes
    )
    return build(m.ProduceResponse, responses=topics, throttle_time=NO_THROTTLE)


HANDLERS: dict[int, Handler] = {apis.PRODUCE: handle_produce}
