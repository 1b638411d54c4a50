"""``onceflow topics list|describe|create|delete|delete-records|alter-config|add-partitions|offsets``
(and ``produce|consume``, :mod:`onceflow.tools.records`), through confluent-kafka.

AdminClient (Metadata, DescribeTopics, DescribeConfigs, CreateTopics, DeleteTopics, DeleteRecords,
IncrementalAlterConfigs, CreatePartitions, ListOffsets) and an unsubscribed Consumer for the
watermarks (ListOffsets): standard Kafka APIs only, so the commands work the same against Apache
Kafka.  What they print follows Kafka's tools where those print a fact:

* a topic id reads as Kafka's ``Uuid.toString`` writes it (kafka-topics --describe): URL-safe
  base64 (``-_``) without padding, not confluent-kafka's standard alphabet (``+/``);
* ``alter-config`` is ``kafka-configs --alter --add-config/--delete-config`` (KIP-339's
  incremental AlterConfigs: the configs not named keep their values);
* ``add-partitions --partitions N`` takes the new total count, as ``kafka-topics --alter
  --partitions`` does (KIP-195's CreatePartitions); a count that is no increase is the
  broker's INVALID_PARTITIONS;
* ``offsets`` gives each partition's earliest and latest offset and, with ``--timestamp``, the
  first offset whose record's timestamp is at or after that time (KIP-79; ``-`` when there is
  none), as ``kafka-get-offsets --time`` does.
* ``alter-config --delete NAME`` refuses a name the topic's DescribeConfigs does not list (it
  lists every topic config, defaults too) before anything changes, in kafka-configs' words
  (``Invalid config(s): NAME``; ConfigCommand.alterConfig): the broker would take the deletion
  of a config that does not exist and do nothing.

A partition's count is ``partition_count`` in every command's JSON (kafka-topics' PartitionCount);
``partitions`` is only ``describe``'s list of partition rows.  ``create`` and ``add-partitions``
answer with the same object: what the topic now is.

Names are checked by the parser: a TOPIC as Kafka allows it (``cliargs.topic_name``), config names
and values as UTF-8 (librdkafka crashes on text that is not).  A topic that does not exist reads
the same from every command (``common.missing_topic``), found before any change is asked for; a
partition the topic does not have says how many it has (``records.check_partition``).
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
from typing import Any

from ..cliargs import name as config_name
from ..cliargs import non_negative_int, partition_count, text_value, timestamp_ms, topic_name, whole_number
from ..clientconfig import NO_SETTINGS, ClientSettings
from . import records
from .common import (
    DEFAULT_TIMEOUT_S,
    ToolError,
    UsageError,
    add_command,
    add_family,
    confluent_admin,
    error_line,
    key_value,
    missing_topic,
    wait,
    watermark_consumer,
)

#: The highest replication factor librdkafka's NewTopic takes.
MAX_REPLICATION_FACTOR = 10_000
#: The error codes that mean "no such topic" (by name, or by id: KIP-516).
_NO_SUCH_TOPIC = {"UNKNOWN_TOPIC_OR_PART", "UNKNOWN_TOPIC_OR_PARTITION", "UNKNOWN_TOPIC_ID"}


def topic_wait(future: Any, timeout: float, topic: str, what: str | None = None) -> Any:
    """``wait`` for an answer about ``topic``: its absence as ``missing_topic``, whichever API said so."""
    from confluent_kafka import KafkaException

    try:
        return wait(future, timeout, what or f"topic {topic!r}")
    except ToolError as exc:
        cause = exc.__cause__
        error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
        if error is not None and error.name() in _NO_SUCH_TOPIC:
            raise missing_topic(topic) from cause
        raise


def topic_id_text(topic_id: Any) -> str | None:
    """A topic id as Kafka writes it (``Uuid.toString``): URL-safe base64 of its 16 bytes, no padding."""
    if topic_id is None:
        return None
    raw = b"".join((bits & (2**64 - 1)).to_bytes(8, "big")
                   for bits in (topic_id.get_most_significant_bits(), topic_id.get_least_significant_bits()))
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def partitions_of(admin: Any, topic: str, timeout: float) -> list[int]:
    """The topic's partition ids, in order (DescribeTopics); ``missing_topic`` if it has none."""
    from confluent_kafka import TopicCollection

    description = topic_wait(admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic], timeout, topic)
    return sorted(p.id for p in description.partitions)


def non_default_configs(admin: Any, topic: str, timeout: float) -> list[dict[str, Any]]:
    """The topic's configs that differ from their defaults: name, value (None when sensitive), source."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = topic_wait(admin.describe_configs([resource], request_timeout=timeout)[resource], timeout, topic,
                         f"the configs of topic {topic!r}")
    return [
        {"name": name, "value": None if entry.is_sensitive else entry.value, "source": _source_name(entry.source)}
        for name, entry in sorted(entries.items())
        if not entry.is_default
    ]


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
        rows.append({"topic": name, "partition_count": len(metadata.topics[name].partitions), "internal": is_internal})
    return rows


def describe_topic(bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """The topic's partitions (leader, replicas, ISR, watermarks and last stable offset)
    and the configs that differ from their defaults."""
    from confluent_kafka import TopicCollection, TopicPartition

    admin = confluent_admin(bootstrap, client)
    futures = admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)
    description = topic_wait(futures[topic], timeout, topic)

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

    return {
        "topic": description.name,
        "topic_id": topic_id_text(description.topic_id),
        "internal": bool(description.is_internal),
        "partitions": partitions,
        "configs": non_default_configs(admin, topic, timeout),
    }


def create_topic(bootstrap: str, topic: str, *, partitions: int | None = None, replication_factor: int | None = None,
                 config: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """Create the topic (partition count and replication factor default to the broker's); what it
    then is (``_topic_summary``)."""
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(bootstrap, client)
    new = NewTopic(topic, num_partitions=-1 if partitions is None else partitions,
                   replication_factor=-1 if replication_factor is None else replication_factor, config=dict(config or {}))
    futures = admin.create_topics([new], operation_timeout=timeout, request_timeout=timeout)
    wait(futures[topic], timeout, f"topic {topic!r}")
    return _topic_summary(admin, topic, timeout)


def _topic_summary(admin: Any, topic: str, timeout: float) -> dict[str, Any]:
    """What ``create`` and ``add-partitions`` answer: the topic's id, partition count, replication
    factor and non-default configs (``describe``'s shape: name, value, source).  The configs are
    None when the principal may change the topic but not read its configs (no DescribeConfigs
    ACL): the change is made, and not reported as a failure."""
    from confluent_kafka import KafkaException, TopicCollection

    described = topic_wait(admin.describe_topics(TopicCollection([topic]), request_timeout=timeout)[topic], timeout, topic)
    try:
        configs: list[dict[str, Any]] | None = non_default_configs(admin, topic, timeout)
    except ToolError as exc:
        cause = exc.__cause__
        error = cause.args[0] if isinstance(cause, KafkaException) and cause.args else None
        if error is None or error.name() != "TOPIC_AUTHORIZATION_FAILED":
            raise
        configs = None
    return {
        "topic": topic,
        "topic_id": topic_id_text(described.topic_id),
        "partition_count": len(described.partitions),
        "replication_factor": len(described.partitions[0].replicas) if described.partitions else None,
        "configs": configs,
    }


def delete_topic(bootstrap: str, topic: str, *, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    admin = confluent_admin(bootstrap, client)
    futures = admin.delete_topics([topic], operation_timeout=timeout, request_timeout=timeout)
    topic_wait(futures[topic], timeout, topic)
    return [{"topic": topic, "deleted": True}]


def delete_records(bootstrap: str, topic: str, offsets: dict[int, int], *,
                   timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Move each partition's log start offset up to its offset (-1: the high watermark), as
    ``kafka-delete-records`` does; one row per partition with its new low watermark.  If any
    partition fails, a ToolError names every one that did (the others have moved).  A topic or
    partition that does not exist is found first, before any record is deleted (DeleteRecords
    would wait for a leader until the timeout: librdkafka's _NOENT "No leaders found")."""
    from confluent_kafka import KafkaException, TopicPartition

    admin = confluent_admin(bootstrap, client)
    ids = partitions_of(admin, topic, timeout)
    for partition in sorted(offsets):
        records.check_partition(topic, partition, ids)
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


def alter_config(bootstrap: str, topic: str, *, set_configs: dict[str, str] | None = None, delete: list[str] | None = None,
                 timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Set and delete (back to the default) topic configs in one incremental AlterConfigs (KIP-339):
    every change or none.  A name to delete that the topic does not have is refused first, as
    kafka-configs refuses it.  One row per change."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    set_configs, delete = dict(set_configs or {}), list(delete or [])
    if not set_configs and not delete:
        raise UsageError("nothing to change: give --set KEY=VALUE or --delete KEY")
    if both := sorted(set(set_configs) & set(delete)):
        raise UsageError(f"{', '.join(both)}: both set and deleted")
    entries = [ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in set_configs.items()]
    entries += [ConfigEntry(name, None, incremental_operation=AlterConfigOpType.DELETE) for name in delete]
    admin = confluent_admin(bootstrap, client)
    if delete:  # kafka-configs' check (ConfigCommand.alterConfig): only a config the topic has can be deleted
        described = ConfigResource(ResourceType.TOPIC, topic)
        known = topic_wait(admin.describe_configs([described], request_timeout=timeout)[described], timeout, topic,
                           f"the configs of topic {topic!r}")
        if unknown := [name for name in delete if name not in known]:
            raise ToolError(f"Invalid config(s): {','.join(unknown)}")
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)
    topic_wait(admin.incremental_alter_configs([resource], request_timeout=timeout)[resource], timeout, topic,
               f"the configs of topic {topic!r}")
    return ([{"topic": topic, "config": name, "operation": "set", "value": value} for name, value in set_configs.items()]
            + [{"topic": topic, "config": name, "operation": "delete", "value": None} for name in delete])


def add_partitions(bootstrap: str, topic: str, partitions: int, *, timeout: float = DEFAULT_TIMEOUT_S,
                   client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """Raise the topic's partition count to ``partitions`` (the new total, as kafka-topics --alter
    --partitions; CreatePartitions).  Existing records stay where they are: keyed records
    produced from now on may go to another partition than before (Kafka's caveat).  What the
    topic then is, as ``create`` answers (``_topic_summary``), after the count it had before."""
    from confluent_kafka.admin import NewPartitions

    admin = confluent_admin(bootstrap, client)
    before = len(partitions_of(admin, topic, timeout))
    futures = admin.create_partitions([NewPartitions(topic, partitions)], operation_timeout=timeout, request_timeout=timeout)
    topic_wait(futures[topic], timeout, topic)
    now = _topic_summary(admin, topic, timeout)
    return {"topic": topic, "topic_id": now["topic_id"], "partition_count_before": before, **now}


def offsets(bootstrap: str, topic: str, *, timestamp: int | None = None, timeout: float = DEFAULT_TIMEOUT_S,
            client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Each partition's earliest and latest offset (ListOffsets) and, with ``timestamp`` (epoch ms),
    the first offset whose timestamp is at or after it (None: no such record yet; KIP-79)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    spec: Any = OffsetSpec  # its constructors have no type annotations
    admin = confluent_admin(bootstrap, client)
    ids = partitions_of(admin, topic, timeout)
    specs = {"earliest": spec.earliest(), "latest": spec.latest()}
    if timestamp is not None:
        specs["offset_for_time"] = spec.for_timestamp(timestamp)
    rows = [{"topic": topic, "partition": p} for p in ids]
    for column, spec in specs.items():
        futures = admin.list_offsets({TopicPartition(topic, p): spec for p in ids}, request_timeout=timeout)
        for row, (_, future) in zip(rows, sorted(futures.items(), key=lambda item: item[0].partition), strict=True):
            offset = topic_wait(future, timeout, topic, f"the offsets of {topic}-{row['partition']}").offset
            row[column] = offset if offset >= 0 else None
    return rows


def _partition_offset(text: str) -> tuple[int, int]:
    """argparse type for ``PARTITION=OFFSET``: a partition id (0 or more) and an offset (0 or more, or -1)."""
    partition, sep, offset = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected PARTITION=OFFSET, got {text!r}")
    try:
        return non_negative_int(partition), -1 if offset.strip() == "-1" else non_negative_int(offset)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected PARTITION=OFFSET (a partition id, an offset or -1), got {text!r}") from None


def _config_setting(text: str) -> tuple[str, str]:
    """argparse type for a config ``NAME=VALUE``: a name and a value that are UTF-8 (librdkafka
    crashes on text that is not)."""
    key, value = key_value(text)
    try:
        return config_name(key), text_value(value)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE in UTF-8 text, got {text!r}") from None


#: A replication factor: 1 to 10,000 (librdkafka's NewTopic limit; a broker refuses more than it has).
_replication_factor = whole_number(1, MAX_REPLICATION_FACTOR, "a replication factor")


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
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic to describe")

    p = add_command(actions, "create", "create a topic", _create)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic to create")
    p.add_argument("--partitions", type=partition_count, metavar="N",
                   help="partition count, 1 to 100,000 (default: the broker's num.partitions)")
    p.add_argument("--replication-factor", type=_replication_factor, metavar="N",
                   help="(default: the broker's default.replication.factor)")
    p.add_argument("--config", type=_config_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="a topic config, one per --config, repeatable")

    p = add_command(actions, "delete", "delete a topic", _delete)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic to delete")

    p = add_command(actions, "delete-records", "delete the records below an offset (the log start moves up)",
                    _delete_records)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic whose records to delete")
    p.add_argument("offsets", type=_partition_offset, nargs="+", metavar="PARTITION=OFFSET",
                   help="delete what is below OFFSET in PARTITION (-1: everything up to the high watermark)")

    p = add_command(actions, "alter-config", "set or delete topic configs (incremental AlterConfigs, as kafka-configs --alter)",
                    _alter_config)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic whose configs to change")
    p.add_argument("--set", dest="set_configs", type=_config_setting, action="append", default=[], metavar="KEY=VALUE",
                   help="set a config (kafka-configs --add-config), repeatable")
    p.add_argument("--delete", type=config_name, action="append", default=[], metavar="KEY",
                   help="delete a config, back to the broker's default (kafka-configs --delete-config), repeatable")

    p = add_command(actions, "add-partitions", "raise a topic's partition count (CreatePartitions)", _add_partitions)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic to grow")
    p.add_argument("--partitions", type=partition_count, required=True, metavar="N",
                   help="the new total partition count, at most 100,000 (as kafka-topics --alter --partitions)")

    p = add_command(actions, "offsets", "each partition's earliest and latest offsets, and the offset for a time (ListOffsets)",
                    _offsets)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic whose offsets to list")
    p.add_argument("--timestamp", type=timestamp_ms, metavar="TIME",
                   help="also the first offset at or after TIME (ISO-8601, e.g. 2026-11-27T15:30:00Z, or epoch milliseconds)")

    records.add_commands(actions)


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_topics(args.bootstrap_servers, include_internal=args.all, timeout=args.timeout, client=args.client)


def _describe(args: argparse.Namespace) -> dict[str, Any]:
    return describe_topic(args.bootstrap_servers, args.topic, timeout=args.timeout, client=args.client)


def _create(args: argparse.Namespace) -> dict[str, Any]:
    return create_topic(args.bootstrap_servers, args.topic, partitions=args.partitions,
                        replication_factor=args.replication_factor, config=dict(args.config), timeout=args.timeout, client=args.client)


def _delete(args: argparse.Namespace) -> list[dict[str, Any]]:
    return delete_topic(args.bootstrap_servers, args.topic, timeout=args.timeout, client=args.client)


def _delete_records(args: argparse.Namespace) -> list[dict[str, Any]]:
    return delete_records(args.bootstrap_servers, args.topic, dict(args.offsets), timeout=args.timeout, client=args.client)


def _alter_config(args: argparse.Namespace) -> list[dict[str, Any]]:
    return alter_config(args.bootstrap_servers, args.topic, set_configs=dict(args.set_configs), delete=args.delete,
                        timeout=args.timeout, client=args.client)


def _add_partitions(args: argparse.Namespace) -> dict[str, Any]:
    return add_partitions(args.bootstrap_servers, args.topic, args.partitions, timeout=args.timeout, client=args.client)


def _offsets(args: argparse.Namespace) -> list[dict[str, Any]]:
    return offsets(args.bootstrap_servers, args.topic, timestamp=args.timestamp, timeout=args.timeout, client=args.client)
