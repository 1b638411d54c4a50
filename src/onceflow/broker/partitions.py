"""The registry of topics and their partition logs.

Theory of operation: topics live in the data directory as
``<topic>-<partition>/`` log directories plus one metadata file,
``topics.json`` (name, topic id, partition count, config overrides, internal
flag), rewritten atomically (temp file, fsync, rename, fsync the directory)
whenever a topic is created, deleted, grown or reconfigured.  On start-up
the registry reads that file and opens every partition log; whether logs are
recovered (crash) or simply loaded (clean shutdown) depends on the
``.onceflow_cleanshutdown`` marker that a clean stop leaves behind and a
start removes (Kafka's ``.kafka_cleanshutdown``).

The registry also carries the broker's identity (``meta.properties``: cluster
id and node id, as in KRaft) and lets fetch requests wait for a partition's
high watermark to move (``watch``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import shutil
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..config import NODE_ID, BrokerConfig, ConfigError, TopicConfig, validate_topic_configs
from ..fileio import atomic_write, fsync_dir
from ..log.partition_log import PartitionLog, partition_dir_name
from ..log.writer import DIRECT, SegmentWriter
from ..protocol.errors import ErrorCode

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".onceflow_cleanshutdown"
TOPICS_FILE = "topics.json"
META_FILE = "meta.properties"
MAX_TOPIC_NAME = 249
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_PARTITIONS = 10_000


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal topic name (Kafka's ``Topic.validate``), or None."""
    if not name:
        return "Topic name is illegal, it can't be empty"
    if name in (".", ".."):
        return "Topic name cannot be \".\" or \"..\""
    if len(name) > MAX_TOPIC_NAME:
        return f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME} characters"
    if not _LEGAL_TOPIC.match(name):
        return f"Topic name {name!r} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"
    return None


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


@dataclass(eq=False)
class Topic:
    name: str
    topic_id: uuid.UUID
    config: TopicConfig
    internal: bool = False
    partitions: list[PartitionLog] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "topic_id": str(self.topic_id),
            "partitions": len(self.partitions),
            "configs": dict(self.config.overrides),
            "internal": self.internal,
        }


class PartitionRegistry:
    def __init__(self, data_dir: Path, config: BrokerConfig, writer: SegmentWriter = DIRECT) -> None:
        self.data_dir = data_dir
        self.writer = writer
        self.config = config
        self.topics: dict[str, Topic] = {}
        self.by_id: dict[uuid.UUID, Topic] = {}
        self._watchers: dict[PartitionLog, list[asyncio.Future[None]]] = {}
        self.cluster_id = ""
        self.clean_start = True

    # -- start-up and shutdown ------------------------------------------------

    def open(self, now_ms: int) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._load_meta()
        marker = self.data_dir / CLEAN_SHUTDOWN_MARKER
        self.clean_start = marker.exists()
        path = self.data_dir / TOPICS_FILE
        entries = json.loads(path.read_text()) if path.exists() else []
        if not self.clean_start and entries:
            log.warning("no clean-shutdown marker in %s: recovering active segments", self.data_dir)
        for entry in entries:
            overrides = validate_topic_configs(entry.get("configs", {}))
            topic = Topic(
                entry["name"], uuid.UUID(entry["topic_id"]), TopicConfig(overrides, self.config), bool(entry.get("internal"))
            )
            for p in range(int(entry["partitions"])):
                topic.partitions.append(self._open_partition(topic, p, now_ms))
            self._add(topic)
        self._remove_orphans()
        if marker.exists():
            marker.unlink()
            fsync_dir(self.data_dir)

    def _load_meta(self) -> None:
        path = self.data_dir / META_FILE
        node_id = self.config[NODE_ID]
        if path.exists():
            props = dict(
                line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#")
            )
            if not props.get("cluster.id") or not props.get("node.id", "0").strip().lstrip("-").isdigit():
                raise ConfigError(f"{path} is damaged (no cluster.id, or a node.id that is not a number): "
                                  "restore it, or move the data directory aside to start a new cluster")
            self.cluster_id = props["cluster.id"]
            stored = int(props.get("node.id", node_id))
            if stored != node_id:
                raise ConfigError(f"{path} belongs to node.id={stored}, but this broker is node.id={node_id}")
            return
        raw = uuid.uuid4().bytes
        import base64

        self.cluster_id = base64.urlsafe_b64encode(raw).decode().rstrip("=")
        atomic_write(path, f"version=1\ncluster.id={self.cluster_id}\nnode.id={node_id}\n")

    def _remove_orphans(self) -> None:
        """Partition directories of topics that are no longer registered (a crash mid-delete)."""
        known = {partition_dir_name(t.name, p.partition) for t in self.topics.values() for p in t.partitions}
        for child in self.data_dir.iterdir():
            if child.is_dir() and re.match(r".+-\d+$", child.name) and child.name not in known:
                log.info("removing %s: it belongs to no topic", child)
                shutil.rmtree(child, ignore_errors=True)

    def close(self, clean: bool = True) -> None:
        """Close every partition; with ``clean``, flush them and leave the clean-shutdown marker,
        unless some partition could not be flushed (then the next start recovers)."""
        for topic in self.topics.values():
            for partition in topic.partitions:
                if clean and not partition.flush_all():
                    clean = False
                partition.close()
        if not clean:
            return
        try:
            atomic_write(self.data_dir / CLEAN_SHUTDOWN_MARKER, "")
        except OSError as exc:
            log.error("cannot write the clean-shutdown marker (the next start recovers the logs): %s", exc)

    def _open_partition(self, topic: Topic, partition: int, now_ms: int) -> PartitionLog:
        directory = self.data_dir / partition_dir_name(topic.name, partition)
        return PartitionLog(
            topic.name, partition, directory, topic.config, now_ms, clean_shutdown=self.clean_start, writer=self.writer
        )

    def _add(self, topic: Topic) -> None:
        self.topics[topic.name] = topic
        self.by_id[topic.topic_id] = topic
        for partition in topic.partitions:
            partition.on_high_watermark = self._notify

    def _persist(self, topics: Iterable[Topic]) -> None:
        """Write ``topics.json`` as ``topics`` describe it.  Every change is persisted first and
        applied in memory only once that succeeded: an OSError (a full disk) leaves both as
        they were."""
        entries = [t.to_json() for t in sorted(topics, key=lambda t: t.name)]
        atomic_write(self.data_dir / TOPICS_FILE, json.dumps(entries, indent=1))

    def _others(self, name: str) -> list[Topic]:
        return [t for t in self.topics.values() if t.name != name]

    def _open_partitions(self, topic: Topic, indexes: range, now_ms: int) -> list[PartitionLog]:
        """Open (create) the logs of new partitions; on OSError none of them is left behind."""
        opened: list[PartitionLog] = []
        try:
            for p in indexes:
                opened.append(self._open_partition(topic, p, now_ms))
        except OSError:
            self._discard(topic, opened, indexes)
            raise
        return opened

    def _discard(self, topic: Topic, opened: list[PartitionLog], indexes: range) -> None:
        for partition in opened:
            partition.delete()
        for p in indexes:
            shutil.rmtree(self.data_dir / partition_dir_name(topic.name, p), ignore_errors=True)

    # -- lookups --------------------------------------------------------------

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= partition < len(t.partitions):
            return None
        return t.partitions[partition]

    def all_partitions(self) -> Iterable[PartitionLog]:
        for topic in list(self.topics.values()):
            yield from topic.partitions

    # -- changes --------------------------------------------------------------

    def check_new_topic(self, name: str, num_partitions: int, configs: dict[str, Any]) -> tuple[ErrorCode, str | None, dict[str, Any]]:
        """Validate a CreateTopics entry without changing anything."""
        reason = topic_name_error(name)
        if reason:
            return ErrorCode.invalid_topic_exception, reason, {}
        if name in self.topics:
            return ErrorCode.topic_already_exists, f"Topic '{name}' already exists.", {}
        key = _collision_key(name)
        for other in self.topics:
            if _collision_key(other) == key:
                return ErrorCode.invalid_topic_exception, f"Topic '{name}' collides with existing topic: {other}", {}
        if num_partitions <= 0 or num_partitions > MAX_PARTITIONS:
            return ErrorCode.invalid_partitions, f"Number of partitions must be between 1 and {MAX_PARTITIONS}.", {}
        try:
            parsed = validate_topic_configs(configs)
        except ConfigError as exc:
            return ErrorCode.invalid_config, str(exc), {}
        return ErrorCode.none, None, parsed

    def create_topic(self, name: str, num_partitions: int, overrides: dict[str, Any], now_ms: int, internal: bool = False) -> Topic:
        """Create a topic; raises OSError (a full disk) with nothing created."""
        topic = Topic(name, uuid.uuid4(), TopicConfig(overrides, self.config), internal)
        indexes = range(num_partitions)
        topic.partitions = self._open_partitions(topic, indexes, now_ms)
        try:
            self._persist([*self.topics.values(), topic])
        except OSError:
            self._discard(topic, topic.partitions, indexes)
            raise
        self._add(topic)
        log.info("created topic %s with %d partition(s)%s", name, num_partitions, f" {overrides}" if overrides else "")
        return topic

    def delete_topic(self, name: str) -> list[PartitionLog]:
        """Delete a topic; raises OSError (a full disk) with the topic still there."""
        self._persist(self._others(name))
        topic = self.topics.pop(name)
        del self.by_id[topic.topic_id]
        for partition in topic.partitions:
            self._notify(partition)
            partition.delete()
        log.info("deleted topic %s", name)
        return topic.partitions

    def add_partitions(self, name: str, count: int, now_ms: int) -> None:
        """Grow a topic to ``count`` partitions; raises OSError (a full disk) with nothing added."""
        topic = self.topics[name]
        indexes = range(len(topic.partitions), count)
        new = self._open_partitions(topic, indexes, now_ms)
        try:
            self._persist([*self._others(name), replace(topic, partitions=topic.partitions + new)])
        except OSError:
            self._discard(topic, new, indexes)
            raise
        for partition in new:
            partition.on_high_watermark = self._notify
            topic.partitions.append(partition)
        log.info("topic %s now has %d partitions", name, count)

    def set_topic_config(self, name: str, overrides: dict[str, Any]) -> None:
        """Replace a topic's config overrides; raises OSError (a full disk) with nothing changed."""
        topic = self.topics[name]
        config = TopicConfig(overrides, self.config)
        self._persist([*self._others(name), replace(topic, config=config)])
        topic.config = config
        for partition in topic.partitions:
            partition.config = config
        log.info("topic %s configuration is now %s", name, overrides)

    # -- waiting for data -----------------------------------------------------

    def watch(self, partitions: Iterable[PartitionLog]) -> asyncio.Future[None]:
        """A future resolved the next time any of ``partitions`` gets new durable data."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        for partition in partitions:
            self._watchers.setdefault(partition, []).append(fut)
        return fut

    def unwatch(self, partitions: Iterable[PartitionLog], fut: asyncio.Future[None]) -> None:
        for partition in partitions:
            waiting = self._watchers.get(partition)
            if waiting is None:
                continue
            try:
                waiting.remove(fut)
            except ValueError:
                pass
            if not waiting:
                del self._watchers[partition]

    def _notify(self, partition: PartitionLog) -> None:
        waiting = self._watchers.pop(partition, None)
        if not waiting:
            return
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)


