"""``onceflow groups list|describe``, through confluent-kafka.

AdminClient (ListGroups, DescribeGroups, OffsetFetch) and an unsubscribed
Consumer for the high watermarks the lag is computed from (ListOffsets).
"""

from __future__ import annotations

import argparse
from typing import Any

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


# -- command line --------------------------------------------------------------


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow groups``'s commands and options on its parser."""
    actions = add_family(parser)
    add_command(actions, "list", "consumer groups and their states", _list, empty="no consumer groups")
    p = add_command(actions, "describe", "a group's members, assignments, committed offsets and lag", _describe)
    p.add_argument("group", metavar="GROUP")


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_groups(args.bootstrap_servers, timeout=args.timeout, client=args.client)


def _describe(args: argparse.Namespace) -> dict[str, Any]:
    return describe_group(args.bootstrap_servers, args.group, timeout=args.timeout, client=args.client)
