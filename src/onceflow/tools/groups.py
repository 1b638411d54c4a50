"""``onceflow groups list|describe|reset-offsets|delete``, through confluent-kafka.

AdminClient (ListGroups, DescribeGroups, OffsetFetch, ListOffsets, OffsetCommit, DeleteGroups)
and an unsubscribed Consumer for the high watermarks the lag is computed from (ListOffsets).

``reset-offsets`` is kafka-consumer-groups --reset-offsets (KIP-122), in its words and by its rules:

* the group must be inactive (Empty, or Dead: no such group yet, whose offsets are then made):
  otherwise "Assignments can only be reset if the group 'G' is inactive, but the current state is
  S.", its members would overwrite the new offsets with their next commit;
* ``--topic T`` resets every partition of T, ``--topic T:0,2`` those partitions,
  ``--all-topics`` every partition the group has an offset for;
* ``--to-offset`` and ``--shift-by`` are kept within each partition's earliest and latest offsets
  (Kafka's checkOffsetsRange), with its warning on stderr for each offset moved ("New offset (N) is
  higher than latest offset for topic partition T-P. Value will be set to M", or lower than
  earliest); ``--to-datetime`` is the first offset at or after the time
  (ListOffsets by time, KIP-79), the latest where there is none; ``--shift-by`` needs a committed
  offset to shift;
* a partition named twice (``--topic T --topic T:0``) is reset once;
* it is a dry run, printing the plan (committed and new offset per partition, ``committed_offset``
  as in ``describe``), unless ``--execute`` is given; then the new offsets are committed at once
  (OffsetCommit).

``delete`` deletes groups (DeleteGroups): only a group with no members can be, and its committed
offsets go with it.  A group named twice is deleted once (the broker refuses a request that
names one twice: "Duplicate groups not allowed").

GROUP arguments are non-empty UTF-8 (``cliargs.name``) and topics Kafka's legal names
(``cliargs.topic_name``), checked by the parser: librdkafka crashes on text that is not UTF-8.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..cliargs import integer, non_negative_int, timestamp_ms, topic_name
from ..cliargs import name as group_name
from ..clientconfig import NO_SETTINGS, ClientSettings
from .common import (
    DEFAULT_TIMEOUT_S,
    ToolError,
    add_command,
    add_family,
    confluent_admin,
    error_line,
    wait,
    watermark_consumer,
)
from .records import check_partition
from .topics import partitions_of, topic_wait

#: Kafka's own spelling of the group states.
_STATE_NAMES = {
    "PREPARING_REBALANCING": "PreparingRebalance",
    "COMPLETING_REBALANCING": "CompletingRebalance",
    "STABLE": "Stable",
    "DEAD": "Dead",
    "EMPTY": "Empty",
    "UNKNOWN": "Unknown",
}


def _state(state: Any) -> str:
    name = getattr(state, "name", str(state))
    return _STATE_NAMES.get(name, name)


def _type(group_type: Any) -> str:
    """Kafka's group type (KIP-848): "consumer" or "classic"."""
    return str(getattr(group_type, "name", group_type)).lower()


def list_groups(bootstrap: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """One row per consumer group: id, type (classic, or consumer: KIP-848), state, and whether it is
    a "simple" group (offsets only, no membership).  librdkafka names KIP-848's Assigning and
    Reconciling states "Unknown"."""
    admin = confluent_admin(bootstrap, client)
    result = wait(admin.list_consumer_groups(request_timeout=timeout), timeout, "the group list")
    if not result.valid and result.errors:
        raise ToolError(f"the group list: {error_line(result.errors[0])}")
    return [{"group": g.group_id, "type": _type(g.type), "state": _state(g.state),
             "simple": bool(g.is_simple_consumer_group)}
            for g in sorted(result.valid, key=lambda g: g.group_id)]


def describe_group(bootstrap: str, group: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """State, protocol (assignor), members with their assignments, and committed offsets per
    partition with lag = high watermark - committed offset."""
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaException, TopicPartition

    admin = confluent_admin(bootstrap, client)
    description = wait(admin.describe_consumer_groups([group], request_timeout=timeout)[group], timeout, f"group {group!r}")
    listed = wait(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group],
                  timeout, f"the offsets of group {group!r}")
    committed = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or () if tp.offset >= 0}
    if description.state == ConsumerGroupState.DEAD and not committed and not description.members:
        raise ToolError(f"consumer group {group!r} does not exist")

    members = []
    owner: dict[tuple[str, int], str] = {}
    for member in sorted(description.members, key=lambda m: m.member_id):
        assigned = sorted((tp.topic, tp.partition) for tp in (member.assignment.topic_partitions if member.assignment else ()))
        for tp in assigned:
            owner[tp] = member.member_id
        members.append({
            "member_id": member.member_id,
            "client_id": member.client_id,
            "host": member.host,
            "group_instance_id": member.group_instance_id,
            "assignment": [f"{t}-{p}" for t, p in assigned],
        })

    offsets = []
    partitions = sorted(set(committed) | set(owner))
    if partitions:
        consumer = watermark_consumer(bootstrap, client=client)
        try:
            for topic, partition in partitions:
                try:
                    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout, cached=False)
                except KafkaException:
                    high = None  # e.g. the topic was deleted since the commit
                offset = committed.get((topic, partition))
                offsets.append({
                    "topic": topic,
                    "partition": partition,
                    "committed_offset": offset,
                    "high_watermark": high,
                    "lag": None if offset is None or high is None else high - offset,
                    "member_id": owner.get((topic, partition)),
                })
        finally:
            consumer.close()
    coordinator = description.coordinator
    return {
        "group": description.group_id,
        "type": _type(description.type),
        "state": _state(description.state),
        "protocol": description.partition_assignor or None,
        "simple": bool(description.is_simple_consumer_group),
        "coordinator": coordinator.id if coordinator is not None else None,
        "members": members,
        "offsets": offsets,
    }


@dataclass(frozen=True)
class ResetTo:
    """Where ``reset-offsets`` moves a group's offsets: ``earliest``, ``latest``, ``offset`` N,
    ``datetime`` (epoch ms N) or ``shift`` by N."""

    how: str
    value: int = 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def reset_offsets(bootstrap: str, group: str, to: ResetTo, *, topics: list[tuple[str, list[int] | None]] | None = None,
                  execute: bool = False, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS,
                  warn: Callable[[str], None] = _stderr) -> dict[str, Any]:
    """The plan of a reset (and, with ``execute``, its commit): per partition the committed offset
    and the new one.  ``topics``: (topic, partitions or None for all of them); None: every
    partition the group has an offset for (--all-topics).  An offset moved into the partition's
    range is told to ``warn`` in kafka-consumer-groups' words (default: a line on stderr)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    admin = confluent_admin(bootstrap, client)
    description = wait(admin.describe_consumer_groups([group], request_timeout=timeout)[group], timeout, f"group {group!r}")
    state = _state(description.state)
    if state not in {"Empty", "Dead"}:  # Kafka's words (ConsumerGroupCommand.resetOffsets)
        raise ToolError(f"Assignments can only be reset if the group '{group}' is inactive, but the current state is {state}.")
    listed = wait(admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=timeout)[group],
                  timeout, f"the offsets of group {group!r}")
    current = {(tp.topic, tp.partition): tp.offset for tp in listed.topic_partitions or () if tp.offset >= 0}
    if topics is None:
        chosen = sorted(current)
    else:
        chosen = []
        for topic, wanted in topics:
            ids = partitions_of(admin, topic, timeout)
            for p in wanted or ():
                check_partition(topic, p, ids)
            chosen += [(topic, p) for p in (sorted(set(wanted)) if wanted else ids)]
        chosen = list(dict.fromkeys(chosen))  # --topic T --topic T:0 names T-0 twice
    if to.how == "shift":
        for topic, p in chosen:
            if (topic, p) not in current:
                raise ToolError(f"cannot shift the offset of {topic}-{p}: group {group!r} has no committed offset there")
    earliest = _list_offsets(admin, chosen, "earliest", timeout)
    latest = _list_offsets(admin, chosen, "latest", timeout)
    found = _list_offsets(admin, chosen, to.value, timeout) if to.how == "datetime" else {}
    rows = []
    for tp in chosen:
        low, high = earliest[tp], latest[tp]
        if to.how == "earliest":
            new = low
        elif to.how == "latest":
            new = high
        elif to.how == "datetime":
            new = found[tp] if found[tp] >= 0 else high
        else:
            new = _in_range(tp, current[tp] + to.value if to.how == "shift" else to.value, low, high, warn)
        rows.append({"topic": tp[0], "partition": tp[1], "committed_offset": current.get(tp), "new_offset": new})
    if execute and rows:
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(r["topic"], r["partition"], r["new_offset"]) for r in rows])
        done = wait(admin.alter_consumer_group_offsets([request], request_timeout=timeout)[group], timeout,
                    f"the offsets of group {group!r}")
        failed = [f"{tp.topic}-{tp.partition}: {error_line(tp.error)}" for tp in done.topic_partitions or () if tp.error]
        if failed:
            raise ToolError("; ".join(failed))
    return {"group": group, "executed": execute, "offsets": rows}


def _in_range(tp: tuple[str, int], offset: int, low: int, high: int, warn: Callable[[str], None]) -> int:
    """``offset`` kept within ``low`` and ``high``, as kafka-consumer-groups' checkOffsetsRange keeps it,
    with its warning when it moves."""
    if offset > high:
        warn(f"New offset ({offset}) is higher than latest offset for topic partition {tp[0]}-{tp[1]}. Value will be set to {high}")
        return high
    if offset < low:
        warn(f"New offset ({offset}) is lower than earliest offset for topic partition {tp[0]}-{tp[1]}. Value will be set to {low}")
        return low
    return offset


def _list_offsets(admin: Any, partitions: list[tuple[str, int]], spec_of: str | int, timeout: float) -> dict[tuple[str, int], int]:
    """ListOffsets for each partition: "earliest", "latest", or a time (epoch ms; -1 where no record is that late)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    spec: Any = OffsetSpec  # its constructors have no type annotations
    if not partitions:
        return {}
    wanted = spec.earliest() if spec_of == "earliest" else spec.latest() if spec_of == "latest" else spec.for_timestamp(spec_of)
    futures = admin.list_offsets({TopicPartition(t, p): wanted for t, p in partitions}, request_timeout=timeout)
    return {(tp.topic, tp.partition): topic_wait(future, timeout, tp.topic, f"the offsets of {tp.topic}-{tp.partition}").offset
            for tp, future in futures.items()}


def delete_groups(bootstrap: str, groups: list[str], *, timeout: float = DEFAULT_TIMEOUT_S,
                  client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Delete the groups (DeleteGroups), with their committed offsets.  If any cannot be (it has
    members, or does not exist), a ToolError names each, and those deleted.  A group named twice is
    deleted once."""
    from confluent_kafka import KafkaException

    groups = list(dict.fromkeys(groups))  # the broker refuses the whole request otherwise ("Duplicate groups not allowed")
    admin = confluent_admin(bootstrap, client)
    futures = admin.delete_consumer_groups(groups, request_timeout=timeout)
    deleted, failed = [], []
    for group in groups:
        try:
            futures[group].result(timeout + 5)
        except KafkaException as exc:
            failed.append(f"group {group!r}: {error_line(exc)}")
        except concurrent.futures.TimeoutError:
            failed.append(f"group {group!r}: no answer after {timeout:g}s")
        else:
            deleted.append(group)
    if failed:
        also = f" (deleted: {', '.join(repr(g) for g in deleted)})" if deleted else ""
        raise ToolError("; ".join(failed) + also)
    return [{"group": group, "deleted": True} for group in deleted]


def topic_partitions(text: str) -> tuple[str, list[int] | None]:
    """argparse type of ``--topic``: ``T`` (every partition) or ``T:0,2`` (those), as kafka-consumer-groups takes it."""
    topic, sep, partitions = text.rpartition(":") if ":" in text else (text, "", "")
    topic = topic_name(topic.strip())
    if not sep:
        return topic, None
    try:
        return topic, [non_negative_int(p) for p in partitions.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected TOPIC:PARTITION,PARTITION... (partition ids), got {text!r}") from None


# -- command line --------------------------------------------------------------


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow groups``'s commands and options on its parser."""
    actions = add_family(parser)
    add_command(actions, "list", "consumer groups and their states", _list, empty="no consumer groups")
    p = add_command(actions, "describe", "a group's members, assignments, committed offsets and lag", _describe)
    p.add_argument("group", type=group_name, metavar="GROUP", help="the consumer group to describe")

    p = add_command(actions, "reset-offsets", "plan (default) or --execute a reset of an inactive group's offsets "
                    "(kafka-consumer-groups --reset-offsets)", _reset_offsets)
    p.add_argument("group", type=group_name, metavar="GROUP", help="the consumer group whose offsets to reset")
    scope = p.add_mutually_exclusive_group(required=True)
    scope.add_argument("--topic", dest="topics", type=topic_partitions, action="append", metavar="TOPIC[:P,P...]",
                       help="a topic (all its partitions) or some of its partitions, repeatable")
    scope.add_argument("--all-topics", action="store_true", help="every partition the group has an offset for")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_const", dest="to", const=ResetTo("earliest"), help="each partition's earliest offset")
    to.add_argument("--to-latest", action="store_const", dest="to", const=ResetTo("latest"), help="each partition's latest offset")
    to.add_argument("--to-offset", type=_to_offset, dest="to", metavar="N",
                    help="offset N (within each partition's earliest and latest)")
    to.add_argument("--to-datetime", type=_to_datetime, dest="to", metavar="TIME",
                    help="the first offset at or after TIME (ISO-8601, e.g. 2026-11-27T15:30:00Z, or epoch ms; the latest if none)")
    to.add_argument("--shift-by", type=_shift_by, dest="to", metavar="N",
                    help="the committed offset plus N (negative: back), within the earliest and latest")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--execute", action="store_true", help="commit the new offsets (default: only print the plan)")
    run.add_argument("--dry-run", action="store_true", help="only print the plan (the default)")

    p = add_command(actions, "delete", "delete consumer groups that have no members, with their offsets (DeleteGroups)", _delete)
    p.add_argument("groups", type=group_name, nargs="+", metavar="GROUP", help="the consumer groups to delete (they must have no members)")


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_groups(args.bootstrap_servers, timeout=args.timeout, client=args.client)


def _describe(args: argparse.Namespace) -> dict[str, Any]:
    return describe_group(args.bootstrap_servers, args.group, timeout=args.timeout, client=args.client)


def _to_offset(text: str) -> ResetTo:
    return ResetTo("offset", non_negative_int(text))


def _to_datetime(text: str) -> ResetTo:
    return ResetTo("datetime", timestamp_ms(text))


def _shift_by(text: str) -> ResetTo:
    return ResetTo("shift", integer(text))


def _reset_offsets(args: argparse.Namespace) -> dict[str, Any]:
    return reset_offsets(args.bootstrap_servers, args.group, args.to, topics=None if args.all_topics else args.topics,
                         execute=args.execute, timeout=args.timeout, client=args.client)


def _delete(args: argparse.Namespace) -> list[dict[str, Any]]:
    return delete_groups(args.bootstrap_servers, args.groups, timeout=args.timeout, client=args.client)
