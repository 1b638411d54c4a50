"""``onceflow txn list|describe|producers|find-hanging|abort``: KIP-664 transaction tooling.

confluent-kafka has no KIP-664 APIs, so these use kafka-python's
``KafkaAdminClient`` (standard Kafka APIs only, the same calls the Java
``kafka-transactions.sh`` makes):

* ``list_transactions``      -> ListTransactions (v1 for ``--min-duration-ms``), sent to every broker;
* ``describe_transactions``  -> DescribeTransactions, sent to the transactional id's coordinator;
* ``describe_producers``     -> DescribeProducers, sent to the partition leader;
* ``abort_transaction``      -> WriteTxnMarkers (an ABORT marker) to the partition leader.

kafka-python is imported only when a command runs (it is not needed by the
rest of ``onceflow``).

``find-hanging`` implements KIP-664's algorithm on top of them (kafka-python's
``find_hanging_transactions`` only consults the coordinators, so it cannot see
a transaction that no coordinator knows, which is what a hanging transaction
usually is): every open transaction the partition leaders report
(DescribeProducers) is hanging if it has been open longer than the maximum
transaction timeout, or if the coordinator of its producer does not cover it:
no coordinator knows the producer id (ListTransactions), the transactional id
now belongs to another producer id, or the coordinator's transaction does not
include that partition (DescribeTransactions).  Transactions flagged only from
the coordinators' view are confirmed by asking the leaders again: a
transaction whose markers were being written while we looked is then gone.

``describe``'s transaction duration is the time the transaction has been open:
now minus its start, while it is open (Ongoing, or Prepare* while its markers
are written).  A completed transaction has none to show: the coordinator
keeps its start time but not its end, so now minus start would be the time
since it began, growing after it finished (KAFKA-15546).  KIP-994 proposed
DescribeTransactions v1's TransactionLastUpdateTimeMs for the end, which
Kafka has not implemented; without it the duration of a completed
transaction cannot be known (KIP-994's tool prints -1): here it is none.

A missing topic is named as every tool names it (``common.missing_topic``);
a partition the topic does not have says how many it has.  The parser checks
topics against Kafka's legal names (``cliargs.topic_name``) and a
transactional id as non-empty UTF-8 (``cliargs.name``), before kafka-python
is asked to send them.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Iterable
from typing import Any

from ..cliargs import name as transactional_id_name
from ..cliargs import non_negative_int, positive_int, topic_name
from ..clientconfig import NO_SETTINGS, ClientSettings
from ..clienterrors import kafka_error_text
from .common import DEFAULT_TIMEOUT_S, ToolError, add_command, add_family, error_line, iso_ms, kafka_python_admin, missing_topic

#: Kafka's default transaction.max.timeout.ms.
DEFAULT_MAX_TRANSACTION_TIMEOUT_MS = 900_000
#: Partitions per DescribeProducers request in find-hanging (the Java tool's batch size).
_BATCH = 500

#: Kafka's transaction states (ListTransactions state filters).
STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
          "PrepareEpochFence")
#: The states of an open transaction: its duration is still growing.
OPEN_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


def list_transactions(bootstrap: str, *, states: Iterable[str] | None = None, producer_ids: Iterable[int] | None = None,
                      min_duration_ms: int | None = None, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """The transactional ids the coordinators know, filtered by state, producer id and (ListTransactions v1)
    minimum running time."""
    wanted_states = [_state_name(s) for s in states or ()]
    with kafka_python_admin(bootstrap, timeout, client) as admin:
        by_broker = _call("ListTransactions", admin.list_transactions, state_filters=wanted_states or None,
                          producer_id_filters=list(producer_ids or ()) or None, duration_filter_ms=min_duration_ms)
    rows = [{"transactional_id": listing.transactional_id, "producer_id": listing.producer_id,
             "state": _value(listing.state), "coordinator": broker_id}
            for broker_id, listings in by_broker.items() for listing in listings]
    return sorted(rows, key=lambda r: r["transactional_id"])


def describe_transaction(bootstrap: str, transactional_id: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """The coordinator's state of one transactional id (DescribeTransactions)."""
    with kafka_python_admin(bootstrap, timeout, client) as admin:
        from kafka.errors import TransactionalIdNotFoundError

        try:
            description = _call("DescribeTransactions", admin.describe_transactions, [transactional_id])[transactional_id]
        except TransactionalIdNotFoundError:
            raise ToolError(f"transactional id {transactional_id!r} is not known to its coordinator") from None
    start = description.transaction_start_time_ms
    state = _value(description.state)
    return {
        "transactional_id": transactional_id,
        "coordinator": description.coordinator_id,
        "state": state,
        "producer_id": description.producer_id,
        "producer_epoch": description.producer_epoch,
        "transaction_timeout_ms": description.transaction_timeout_ms,
        "transaction_start_time_ms": start if start >= 0 else None,
        "transaction_start_time": iso_ms(start),
        "transaction_duration_ms": _open_for(state, start),
        "partitions": [{"topic": tp.topic, "partition": tp.partition} for tp in sorted(description.topic_partitions)],
    }


def describe_producers(bootstrap: str, topic: str, partition: int, *, timeout: float = DEFAULT_TIMEOUT_S,
                       client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """The partition leader's active producers (DescribeProducers); an open transaction shows as
    ``current_transaction_start_offset``."""
    with kafka_python_admin(bootstrap, timeout, client) as admin:
        from kafka.structs import TopicPartition

        state = _producers_of(admin, TopicPartition(topic, partition))
    return [_producer_row(p) for p in sorted(state.active_producers, key=lambda p: p.producer_id)]


def find_hanging(bootstrap: str, *, topics: Iterable[str] | None = None,
                 max_transaction_timeout_ms: int = DEFAULT_MAX_TRANSACTION_TIMEOUT_MS,
                 timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS, now_ms: int | None = None) -> list[dict[str, Any]]:
    """Open transactions on the partitions of ``topics`` (default: every topic, internal ones included)
    that no coordinator will ever complete (see the module docstring)."""
    with kafka_python_admin(bootstrap, timeout, client) as admin:
        from kafka.structs import TopicPartition

        partitions = _partitions(admin, list(topics) if topics else None)
        open_txns = _open_transactions(admin, partitions)
        if not open_txns:
            return []
        now = int(time.time() * 1000) if now_ms is None else now_ms
        producer_ids = sorted({p.producer_id for _, p in open_txns})
        listings = _call("ListTransactions", admin.list_transactions, producer_id_filters=producer_ids)
        transactional_ids = {listing.producer_id: listing.transactional_id
                             for found in listings.values() for listing in found if listing.producer_id in producer_ids}
        descriptions = _describe_each(admin, set(transactional_ids.values()))

        by_age: list[dict[str, Any]] = []
        suspects: list[dict[str, Any]] = []
        for tp, producer in open_txns:
            duration = now - producer.last_timestamp
            transactional_id = transactional_ids.get(producer.producer_id)
            description = descriptions.get(transactional_id) if transactional_id is not None else None
            reason = None
            if transactional_id is None:
                reason = "no coordinator knows this producer id"
            elif description is None:
                reason = "the coordinator does not know the transactional id"
            elif description.producer_id != producer.producer_id:
                reason = f"the transactional id now has producer id {description.producer_id}"
            elif tp not in description.topic_partitions:
                reason = f"the coordinator's transaction ({_value(description.state)}) does not include this partition"
            row = {
                "topic": tp.topic,
                "partition": tp.partition,
                "producer_id": producer.producer_id,
                "producer_epoch": producer.producer_epoch,
                "coordinator_epoch": producer.coordinator_epoch if producer.coordinator_epoch >= 0 else None,
                "start_offset": producer.current_transaction_start_offset,
                "last_timestamp_ms": producer.last_timestamp,
                "duration_ms": duration,
                "transactional_id": transactional_id,
                "coordinator_state": _value(description.state) if description is not None else None,
                "reason": reason,
            }
            if duration > max_transaction_timeout_ms:
                row["reason"] = "open longer than the max transaction timeout" + (f"; {reason}" if reason else "")
                by_age.append(row)
            elif reason is not None:
                suspects.append(row)

        if suspects:  # confirm: still open at the same offset now that the coordinators have answered
            again = {(tp.topic, tp.partition, p.producer_id): p.current_transaction_start_offset
                     for tp, p in _open_transactions(admin, sorted({TopicPartition(r["topic"], r["partition"]) for r in suspects}))}
            suspects = [r for r in suspects if again.get((r["topic"], r["partition"], r["producer_id"])) == r["start_offset"]]
    return sorted(by_age + suspects, key=lambda r: (r["topic"], r["partition"], r["producer_id"]))


def abort_transaction(bootstrap: str, topic: str, partition: int, producer_id: int, *,
                      timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """KIP-664's abort: the producer's epoch and coordinator epoch from DescribeProducers, then an ABORT
    marker written by the partition leader (WriteTxnMarkers)."""
    with kafka_python_admin(bootstrap, timeout, client) as admin:
        from kafka.admin import AbortTransactionSpec
        from kafka.structs import TopicPartition

        tp = TopicPartition(topic, partition)
        state = _producers_of(admin, tp)
        producer = next((p for p in state.active_producers if p.producer_id == producer_id), None)
        if producer is None:
            raise ToolError(f"producer {producer_id} is not active on {topic}-{partition}: no transaction to abort")
        if producer.current_transaction_start_offset < 0:
            raise ToolError(f"producer {producer_id} has no open transaction on {topic}-{partition}: nothing to abort")
        # A producer that never completed a transaction has no coordinator epoch (-1): use 0, as
        # kafka-transactions.sh does (no coordinator epoch is lower, so the leader accepts it).
        spec = AbortTransactionSpec(tp, producer.producer_id, producer.producer_epoch, max(producer.coordinator_epoch, 0))
        _call("WriteTxnMarkers (abort)", admin.abort_transaction, spec)
    return [{"topic": topic, "partition": partition, "producer_id": producer.producer_id,
             "producer_epoch": producer.producer_epoch, "coordinator_epoch": spec.coordinator_epoch,
             "start_offset": producer.current_transaction_start_offset, "aborted": True}]


# -- helpers -------------------------------------------------------------------


def _call(request: str, method: Any, *args: Any, **kwargs: Any) -> Any:
    """A kafka-python admin call; a failure names the Kafka request that failed."""
    from kafka.errors import TransactionalIdNotFoundError

    try:
        return method(*args, **kwargs)
    except (ToolError, TransactionalIdNotFoundError):
        raise
    except Exception as exc:
        raise ToolError(f"{request} failed: {error_line(exc)}") from exc


def _open_for(state: str, start_ms: int) -> int | None:
    """How long the transaction has been open, while it is (see the module docstring: KAFKA-15546)."""
    if start_ms < 0 or state not in OPEN_STATES:
        return None
    return max(0, int(time.time() * 1000) - start_ms)


def _producers_of(admin: Any, tp: Any) -> Any:
    """DescribeProducers of one partition; a topic or partition that does not exist said so."""
    from kafka.errors import UnknownTopicOrPartitionError

    try:
        return _call("DescribeProducers", admin.describe_producers, [tp])[tp]
    except ToolError as exc:
        if not isinstance(exc.__cause__, UnknownTopicOrPartitionError):
            raise
        count = len(_partitions(admin, [tp.topic]))  # raises missing_topic when the topic is gone
        raise ToolError(f"topic {tp.topic!r} has no partition {tp.partition} (it has {count}: 0 to {count - 1})") from exc


def _value(state: Any) -> str:
    return str(getattr(state, "value", state))


def _state_name(text: str) -> str:
    """argparse type for ``--state``: one of Kafka's transaction states, any case, ``-``/``_`` ignored."""
    for name in STATES:
        if name.lower() == text.replace("-", "").replace("_", "").lower():
            return name
    raise argparse.ArgumentTypeError(f"unknown transaction state {text!r} (one of {', '.join(STATES)})")


def _producer_row(p: Any) -> dict[str, Any]:
    return {
        "producer_id": p.producer_id,
        "producer_epoch": p.producer_epoch,
        "last_sequence": p.last_sequence,
        "last_timestamp_ms": p.last_timestamp,
        "last_timestamp": iso_ms(p.last_timestamp),
        "coordinator_epoch": p.coordinator_epoch if p.coordinator_epoch >= 0 else None,
        "current_transaction_start_offset": p.current_transaction_start_offset if p.current_transaction_start_offset >= 0 else None,
    }


def _partitions(admin: Any, topics: list[str] | None) -> list[Any]:
    from kafka.structs import TopicPartition

    out = []
    from kafka.errors import UnknownTopicOrPartitionError, for_code

    for topic in _call("Metadata", admin.describe_topics, topics):
        error = for_code(topic["error_code"]) if topic["error_code"] else None
        if error is UnknownTopicOrPartitionError:
            raise missing_topic(topic["name"])
        if error is not None:
            raise ToolError(f"topic {topic['name']!r}: {kafka_error_text(error())}")
        out += [TopicPartition(topic["name"], p["partition_index"]) for p in topic["partitions"]]
    return sorted(out)


def _open_transactions(admin: Any, partitions: list[Any]) -> list[tuple[Any, Any]]:
    found = []
    for start in range(0, len(partitions), _BATCH):
        for tp, state in _call("DescribeProducers", admin.describe_producers, partitions[start:start + _BATCH]).items():
            found += [(tp, p) for p in state.active_producers if p.current_transaction_start_offset >= 0]
    return sorted(found, key=lambda x: (x[0], x[1].producer_id))


def _describe_each(admin: Any, transactional_ids: set[str]) -> dict[str, Any]:
    """DescribeTransactions; None for an id its coordinator does not know (kafka-python raises for the
    whole request then, so fall back to one id at a time)."""
    from kafka.errors import TransactionalIdNotFoundError

    if not transactional_ids:
        return {}
    try:
        return dict(_call("DescribeTransactions", admin.describe_transactions, sorted(transactional_ids)))
    except TransactionalIdNotFoundError:
        pass
    out: dict[str, Any] = {}
    for transactional_id in sorted(transactional_ids):
        try:
            out.update(_call("DescribeTransactions", admin.describe_transactions, [transactional_id]))
        except TransactionalIdNotFoundError:
            out[transactional_id] = None
    return out


# -- command line --------------------------------------------------------------


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow txn``'s commands and options on its parser."""
    parser.set_defaults(kafka_python=True)  # -X settings are checked in kafka-python's words too
    actions = add_family(parser)

    p = add_command(actions, "list", "transactions known to the coordinators (ListTransactions)", _list, empty="no transactions")
    p.add_argument("--state", type=_state_name, nargs="+", action="extend", default=[], metavar="S",
                   help=f"only these states, repeatable ({', '.join(STATES)})")
    p.add_argument("--producer-id", type=non_negative_int, nargs="+", action="extend", default=[], metavar="P",
                   help="only these producer ids, repeatable")
    p.add_argument("--min-duration-ms", type=non_negative_int, metavar="MS",
                   help="only transactions running longer than this (ListTransactions v1)")

    p = add_command(actions, "describe", "a transactional id's state at its coordinator (DescribeTransactions)", _describe)
    p.add_argument("transactional_id", type=transactional_id_name, metavar="TRANSACTIONAL_ID", help="the producer's transactional.id")

    p = add_command(actions, "producers", "active producers on a partition (DescribeProducers)", _producers,
                    empty="no active producers")
    _partition_arguments(p)

    p = add_command(actions, "find-hanging", "open transactions no coordinator will complete (KIP-664)", _find_hanging,
                    empty="no hanging transactions")
    p.add_argument("--topic", type=topic_name, nargs="+", action="extend", default=[], metavar="T",
                   help="only these topics, repeatable (default: every topic, internal ones included)")
    p.add_argument("--max-transaction-timeout-ms", type=positive_int, default=DEFAULT_MAX_TRANSACTION_TIMEOUT_MS, metavar="MS",
                   help=f"the cluster's transaction.max.timeout.ms (default {DEFAULT_MAX_TRANSACTION_TIMEOUT_MS})")

    p = add_command(actions, "abort", "abort a hanging transaction on one partition (WriteTxnMarkers)", _abort)
    _partition_arguments(p)
    p.add_argument("producer_id", type=non_negative_int, metavar="PRODUCER_ID",
                   help="the producer whose open transaction to abort (txn find-hanging shows it)")


def _partition_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic")
    p.add_argument("partition", type=non_negative_int, metavar="PARTITION", help="the partition number")


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_transactions(args.bootstrap_servers, states=args.state, producer_ids=args.producer_id,
                             min_duration_ms=args.min_duration_ms, timeout=args.timeout, client=args.client)


def _describe(args: argparse.Namespace) -> dict[str, Any]:
    return describe_transaction(args.bootstrap_servers, args.transactional_id, timeout=args.timeout, client=args.client)


def _producers(args: argparse.Namespace) -> list[dict[str, Any]]:
    return describe_producers(args.bootstrap_servers, args.topic, args.partition, timeout=args.timeout, client=args.client)


def _find_hanging(args: argparse.Namespace) -> list[dict[str, Any]]:
    return find_hanging(args.bootstrap_servers, topics=args.topic, max_transaction_timeout_ms=args.max_transaction_timeout_ms,
                        timeout=args.timeout, client=args.client)


def _abort(args: argparse.Namespace) -> list[dict[str, Any]]:
    return abort_transaction(args.bootstrap_servers, args.topic, args.partition, args.producer_id, timeout=args.timeout, client=args.client)


__all__ = ["STATES", "abort_transaction", "describe_producers", "describe_transaction", "find_hanging", "list_transactions"]
