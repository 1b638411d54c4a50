"""``onceflow topics list|describe|create|delete|delete-records``, through confluent-kafka.

AdminClient (Metadata, DescribeConfigs, CreateTopics, DeleteTopics, DeleteRecords) and an
unsubscribed Consumer for the watermarks (ListOffsets): standard Kafka APIs
only, so the commands work the same against Apache Kafka.
"""

from __future__ import annotations

import argparse
import concurrent.futures
from typing import Any

from ..clientconfig import NO_SETTINGS, ClientSettings
from .common import (
    DEFAULT_TIMEOUT_S,
    ToolError,
    add_command,
    add_family,
    confluent_admin,
    error_line,
    key_value,
    wait,
    watermark_consumer,
)


def list_topics(bootstrap: str, *, include_internal: bool = False, timeout: float = DEFAULT_TIMEOUT_S,
                client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """One row per topic: name, partition count, internal?  Internal topics only with ``include_internal``."""
    from confluent_kafka import TopicCollection

    admin = confluent_admin(bootstrap, client)
    metadata = admin.list_topics(timeout=timeout)
    names = sorted(metadata.topics)
    internal: dict[str, bool] = {}
    if names:
        futures = admin.describe_topics(TopicCollection(names), request_timeout=timeout)
        for name, future in futures.items():
            internal[name] = bool(wait(future, timeout, f"topic {name!r}").is_internal)
    rows = []
    for name in names:
        is_internal = internal.get(name, name.startswith("__"))
        if is_internal and not include_internal:
            continue
        rows.append({"topic": name, "partitions": len(metadata.topics[name].partitions), "internal": is_internal})
    return rows


def describe_topic(bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """The topic's partitions (leader, replicas, ISR, watermarks and last stable offset)
    and the configs that differ from their defaults."""
    from confluent_kafka import TopicCollection, TopicPartition
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = confluent_admin(bootstrap, client)
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    description = wait(futures[topic], timeout, f"topic {topic!r}")

    uncommitted = watermark_consumer(bootstrap, "read_uncommitted", client)
    committed = watermark_consumer(bootstrap, "read_committed", client)
    partitions = []
    try:
        for info in sorted(description.partitions, key=lambda p: p.id):
            tp = TopicPartition(topic, info.id)
            low, high = uncommitted.get_watermark_offsets(tp, timeout=timeout, cached=False)
            _, stable = committed.get_watermark_offsets(tp, timeout=timeout, cached=False)
            partitions.append({
                "partition": info.id,
                "leader": info.leader.id if info.leader is not None else None,
                "replicas": [n.id for n in info.replicas],
                "isr": [n.id for n in info.isr],
                "low_watermark": low,
                "high_watermark": high,
                "last_stable_offset": stable,
            })
    finally:
        uncommitted.close()
        committed.close()

    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = wait(admin.describe_configs([resource], request_timeout=timeout)[resource], timeout, f"the configs of topic {topic!r}")
    configs = [
        {"name": name, "value": None if entry.is_sensitive else entry.value, "source": _source_name(entry.source)}
        for name, entry in sorted(entries.items())
        if not entry.is_default
    ]
    return {
        "topic": description.name,
        "topic_id": str(description.topic_id) if description.topic_id is not None else None,
        "internal": bool(description.is_internal),
        "partitions": partitions,
        "configs": configs,
    }


def create_topic(bootstrap: str, topic: str, *, partitions: int | None = None, replication_factor: int | None = None,
                 config: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Create the topic (partition count and replication factor default to the broker's)."""
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(bootstrap, client)
    new = NewTopic(topic, num_partitions=-1 if partitions is None else partitions,
                   replication_factor=-1 if replication_factor is None else replication_factor, config=dict(config or {}))
    futures = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)
    wait(futures[topic], timeout, f"topic {topic!r}")
    created = admin.list_topics(topic=topic, timeout=timeout).topics.get(topic)
    count = len(created.partitions) if created is not None and created.partitions else partitions
    factor = replication_factor
    if created is not None and created.partitions:
        factor = len(next(iter(created.partitions.values())).replicas)
    return [{"topic": topic, "partitions": count, "replication_factor": factor, "config": dict(config or {})}]


def delete_topic(bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    admin = confluent_admin(bootstrap, client)
    futures = admin.delete_topics([topic], operation_timeout=timeout, request_timeout=timeout)
    wait(futures[topic], timeout, f"topic {topic!r}")
    return [{"topic": topic, "deleted": True}]


def delete_records(bootstrap: str, topic: str, offsets: dict[int, int], *,
                   timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Move each partition's log start offset up to its offset (-1: the high watermark), as
    ``kafka-delete-records`` does; one row per partition with its new low watermark.  If any
    partition fails, a ToolError names every one that did (the others have moved)."""
    from confluent_kafka import KafkaException, TopicPartition

    admin = confluent_admin(bootstrap, client)
    futures = admin.delete_records([TopicPartition(topic, p, o) for p, o in sorted(offsets.items())],
                                   request_timeout=timeout, operation_timeout=timeout)
    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    for tp, future in sorted(futures.items(), key=lambda item: item[0].partition):
        try:
            deleted = future.result(timeout + 5)
        except KafkaException as exc:
            failed.append(f"{topic}-{tp.partition}: {error_line(exc)}")
        except concurrent.futures.TimeoutError:
            failed.append(f"{topic}-{tp.partition}: no answer after {timeout:g}s")
        else:
            rows.append({"topic": topic, "partition": tp.partition, "low_watermark": deleted.low_watermark})
    if failed:
        raise ToolError("; ".join(failed))
    return rows


def _partition_offset(text: str) -> tuple[int, int]:
    """argparse type for ``PARTITION=OFFSET``."""
    partition, sep, offset = text.partition("=")
    try:
        if not sep:
            raise ValueError(text)
        return int(partition), int(offset)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected PARTITION=OFFSET (integers), got {text!r}") from None


def _source_name(source: Any) -> str:
    from confluent_kafka.admin import ConfigSource

    try:
        return ConfigSource(source).name
    except ValueError:
        return str(source)


# -- command line --------------------------------------------------------------


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow topics``'s commands and options on its parser."""
    actions = add_family(parser)

    p = add_command(actions, "list", "topics with their partition counts", _list, empty="no topics")
    p.add_argument("--all", action="store_true", help="include internal topics (__consumer_offsets, __transaction_state)")

    p = add_command(actions, "describe", "partitions (leader, replicas, ISR, watermarks) and non-default configs", _describe)
    p.add_argument("topic", metavar="TOPIC")

    p = add_command(actions, "create", "create a topic", _create)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("--partitions", type=int, help="partition count (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=int, help="(default: the broker's default.replication.factor)")
    p.add_argument("--config", type=key_value, nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                   help="a topic config, repeatable")

    p = add_command(actions, "delete", "delete a topic", _delete)
    p.add_argument("topic", metavar="TOPIC")

    p = add_command(actions, "delete-records", "delete the records below an offset (the log start moves up)",
                    _delete_records)
    p.add_argument("topic", metavar="TOPIC")
    p.add_argument("offsets", type=_partition_offset, nargs="+", metavar="PARTITION=OFFSET",
                   help="delete what is below OFFSET in PARTITION (-1: everything up to the high watermark)")


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_topics(args.bootstrap_servers, include_internal=args.all, timeout=args.timeout, client=args.client)


def _describe(args: argparse.Namespace) -> dict[str, Any]:
    return describe_topic(args.bootstrap_servers, args.topic, timeout=args.timeout, client=args.client)


def _create(args: argparse.Namespace) -> list[dict[str, Any]]:
    if args.partitions is not None and args.partitions < 1:
        raise ToolError(f"--partitions must be at least 1, got {args.partitions}")
    return create_topic(args.bootstrap_servers, args.topic, partitions=args.partitions,
                        replication_factor=args.replication_factor, config=dict(args.config), timeout=args.timeout, client=args.client)


def _delete(args: argparse.Namespace) -> list[dict[str, Any]]:
    return delete_topic(args.bootstrap_servers, args.topic, timeout=args.timeout, client=args.client)


def _delete_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    return delete_records(args.bootstrap_servers, args.topic, dict(args.offsets), timeout=args.timeout, client=args.client)
