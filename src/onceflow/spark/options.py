"""The connector's options: parsed and checked once, on the driver, before any I/O.

Theory of operation
-------------------
Spark hands a data source its options as a string-to-string map whose keys
it has lower-cased (``CaseInsensitiveDict``); users write them in camelCase
(``startingOffsets``).  ``parse_source_options`` and ``parse_sink_options``
fold every key to lower case, look it up in a table of the options the
source (or sink) knows, and turn the whole map into one frozen
``SourceOptions`` (``SinkOptions``).  Everything that can be wrong with the
options is found here, at ``load()``/``start()`` time, and reported as one
``OptionError`` whose message names the option in its documented spelling,
so nothing fails later on an executor.

Names, defaults and semantics are those of Apache Spark's Kafka connector
(``KafkaSourceProvider``, ``JsonUtils``): ``subscribe`` / ``subscribePattern``
/ ``assign``, ``startingOffsets`` / ``endingOffsets`` as ``earliest``,
``latest`` or Spark's offsets JSON (``-2`` earliest, ``-1`` latest),
``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger`` with ``maxTriggerDelay``,
``minPartitions``, ``includeHeaders``, ``failOnDataLoss``, ``groupIdPrefix``,
and every ``kafka.*`` option handed to the Kafka client with its prefix
removed.  Where Onceflow deviates it says so in a comment marked
"Deviation from Spark"; the main ones are:

* unknown options are errors (Spark ignores them), with a "did you mean"
  suggestion; Spark options Onceflow does not implement (the timestamp
  options, ``maxRecordsPerPartition``...) are errors that say so;
* the source reads with ``isolation.level=read_committed`` unless told
  otherwise (Kafka's default is read_uncommitted);
* offsets JSON that cannot match the subscription (partitions that are not
  assigned, topics that are not subscribed) is refused here rather than by
  an assertion when the query starts;
* the sink is transactional (``deliveryGuarantee``, ``transactionalIdPrefix``)
  and so refuses producer settings that would break transactions.

The ``kafka.*`` settings go through ``onceflow.clientconfig``, as every
client setting in Onceflow does: Kafka's Java names that librdkafka lacks
(``kafka.sasl.jaas.config``, ``kafka.ssl.truststore.*``, ``kafka.ssl.keystore.*``)
become librdkafka's, and librdkafka checks the result offline, so a bad
security setting is one ``OptionError`` naming it, here.  Secrets (passwords,
keys, the JAAS text) are never quoted in an error, and the parsed options'
``repr`` leaves the client settings out.

Everything here is plain data: the result pickles (Spark ships readers and
writers to executors), which is why mappings are plain ``dict`` objects
rather than read-only proxies.  Warnings that Spark would log (a fixed
``kafka.group.id``, per-trigger limits in a batch query) come back as
strings in ``SourceOptions.warnings`` for the caller to log.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from ..clientconfig import ClientSettings, SettingError, is_secret, translate

__all__ = [
    "EARLIEST",
    "LATEST",
    "Assign",
    "OffsetSpec",
    "OptionError",
    "SinkOptions",
    "SourceOptions",
    "Subscribe",
    "SubscribePattern",
    "Subscription",
    "check_sink_columns",
    "offsets_to_json",
    "parse_duration_ms",
    "parse_offsets_json",
    "parse_sink_options",
    "parse_source_options",
]


class OptionError(ValueError):
    """A bad option or column; the message names it."""

    def __init__(self, message: str, option: str | None = None) -> None:
        super().__init__(message)
        #: The option (or column) at fault, in its documented spelling, when there is one.
        self.option = option

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.option))


# --------------------------------------------------------------------------- subscriptions


@dataclass(frozen=True)
class Subscribe:
    """``subscribe``: a fixed list of topics, all their partitions, new ones included."""

    topics: tuple[str, ...]


@dataclass(frozen=True)
class SubscribePattern:
    """``subscribePattern``: every topic whose whole name matches the regular expression.

    Kafka's Java client matches with ``Pattern.matcher(topic).matches()``, a
    full match; Python's ``re`` is close enough to Java's syntax for the
    patterns people write for topic names.
    """

    pattern: str

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


@dataclass(frozen=True)
class Assign:
    """``assign``: exactly these partitions, sorted by (topic, partition)."""

    partitions: tuple[tuple[str, int], ...]


Subscription = Subscribe | SubscribePattern | Assign

# --------------------------------------------------------------------------- offsets

#: Spark's offsets-JSON sentinels (``KafkaOffsetRangeLimit.EARLIEST`` / ``LATEST``).
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends: ``earliest``, ``latest`` or per-partition offsets.

    For ``specific``, ``offsets`` maps (topic, partition) to an offset, or to
    ``EARLIEST`` (-2) or ``LATEST`` (-1), which are resolved against the
    brokers when the query starts.  For the other kinds it is empty.
    """

    kind: Literal["earliest", "latest", "specific"]
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return cls("earliest")

    @classmethod
    def latest(cls) -> OffsetSpec:
        return cls("latest")

    @classmethod
    def specific(cls, offsets: Mapping[tuple[str, int], int]) -> OffsetSpec:
        return cls("specific", dict(offsets))


# --------------------------------------------------------------------------- parsed options


@dataclass(frozen=True)
class SourceOptions:
    """The source's options, checked.  See ``parse_source_options``."""

    bootstrap_servers: str
    subscription: Subscription
    #: Default: latest for streaming, earliest for batch.
    starting_offsets: OffsetSpec
    #: Batch only (default latest); ``None`` for streaming.
    ending_offsets: OffsetSpec | None
    #: Streaming only; ``None`` in batch queries (Spark ignores them there, with a warning).
    max_offsets_per_trigger: int | None
    min_offsets_per_trigger: int | None
    #: Spark's ``maxTriggerDelay`` (default 15m), in milliseconds.
    max_trigger_delay_ms: int
    min_partitions: int | None
    include_headers: bool
    fail_on_data_loss: bool
    #: Onceflow's ``commitOffsetsToGroup``: a group to which each finished batch's offsets are committed, for lag tools.
    commit_offsets_to_group: str | None
    #: Spark's ``groupIdPrefix`` for the readers' generated group ids.
    group_id_prefix: str
    #: Every ``kafka.*`` option with the prefix removed (keys lower-cased) and in librdkafka's names
    #: (``clientconfig.translate``); ``isolation.level`` always present.  Left out of the ``repr``: secrets.
    kafka_params: Mapping[str, str] = field(repr=False)
    #: What Spark would log as warnings; the caller logs them.
    warnings: tuple[str, ...] = ()
    #: ``kafka.default.api.timeout.ms``: how long the driver's metadata and offset calls go unanswered
    #: before the query fails, naming the bootstrap servers (Kafka's default, 60 s).
    api_timeout_ms: int = 60_000
    #: For each key of ``kafka_params``, the ``kafka.*`` setting it comes from (a Java name, or the same).
    kafka_origins: Mapping[str, str] = field(default_factory=dict)

    @property
    def group_id(self) -> str | None:
        """The fixed group id from ``kafka.group.id``, if the user set one (else readers generate one)."""
        return self.kafka_params.get("group.id")

    @property
    def isolation_level(self) -> str:
        return self.kafka_params.get("isolation.level", "read_committed")


@dataclass(frozen=True)
class SinkOptions:
    """The sink's options, checked.  See ``parse_sink_options``."""

    bootstrap_servers: str
    #: The ``topic`` option; rows then need no ``topic`` column (and it wins over one, as in Spark).
    topic: str | None
    delivery_guarantee: Literal["exactly-once", "at-least-once"]
    #: ``transactionalIdPrefix``; ``None``: ``sink.DEFAULT_PREFIX``. Ids are ``<prefix>-<query id>-<slot>``.
    transactional_id_prefix: str | None
    checkpoint_location: str | None
    #: From ``kafka.transaction.timeout.ms``; default 600000 (10 min).
    transaction_timeout_ms: int
    #: Every ``kafka.*`` option with the prefix removed, in librdkafka's names; with exactly-once,
    #: ``transaction.timeout.ms`` always present.  Left out of the ``repr``: secrets.
    kafka_params: Mapping[str, str] = field(repr=False)
    #: ``acceptChangedReplay``: a micro-batch whose changed replay is let through (see ``protocol``).
    accept_changed_replay: int | None = None
    #: ``replayWaitMs``: how long a task of a partly written micro-batch waits for the earlier run's task
    #: partitions to be confirmed before it hands its rows to the driver.
    replay_wait_ms: int = 30_000
    #: ``writeName``: which write of a foreachBatch function this is (``write_exactly_once``'s name).
    name: str | None = None
    #: ``kafka.default.api.timeout.ms``: how long the driver waits for the cluster to answer before the
    #: write fails, naming the bootstrap servers (Kafka's default, 60 s).
    api_timeout_ms: int = 60_000
    #: For each key of ``kafka_params``, the ``kafka.*`` setting it comes from (a Java name, or the same).
    kafka_origins: Mapping[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------- option tables

_SOURCE = "the onceflow source"
_SINK = "the onceflow sink"

_STRATEGIES = ("subscribe", "subscribePattern", "assign")

#: Options the source knows, in their documented spelling.  ``path`` and
#: ``checkpointLocation`` are what Spark itself may pass; they are accepted and ignored.
_SOURCE_OPTIONS = (
    *_STRATEGIES,
    "startingOffsets",
    "endingOffsets",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "includeHeaders",
    "groupIdPrefix",
    "commitOffsetsToGroup",
    "path",
    "checkpointLocation",
)

#: Options the sink knows.  ``includeHeaders`` is accepted (a headers column is
#: written whenever there is one); ``path`` and ``queryName`` are accepted and ignored.
_SINK_OPTIONS = (
    "topic",
    "deliveryGuarantee",
    "transactionalIdPrefix",
    "acceptChangedReplay",
    "replayWaitMs",
    "writeName",
    "includeHeaders",
    "checkpointLocation",
    "path",
    "queryName",
)

#: Spark Kafka source options Onceflow does not implement: a clear error rather than "unknown".
_UNSUPPORTED_SOURCE_OPTIONS = {
    "startingTimestamp": "timestamp-based starting offsets are not supported; use 'startingOffsets' with offsets",
    "endingTimestamp": "timestamp-based ending offsets are not supported; use 'endingOffsets' with offsets",
    "startingOffsetsByTimestamp": "timestamp-based starting offsets are not supported; use 'startingOffsets' with offsets",
    "endingOffsetsByTimestamp": "timestamp-based ending offsets are not supported; use 'endingOffsets' with offsets",
    "startingOffsetsByTimestampStrategy": "timestamp-based starting offsets are not supported",
    "maxRecordsPerPartition": "use 'minPartitions' to split large offset ranges",
    "kafkaConsumer.pollTimeoutMs": "the readers use their own bounded poll",
    "fetchOffset.numRetries": "offset lookups are retried by the Kafka client",
    "fetchOffset.retryIntervalMs": "offset lookups are retried by the Kafka client",
}

_SINK_ONLY = ("topic", "deliveryGuarantee", "transactionalIdPrefix", "acceptChangedReplay", "replayWaitMs",
              "writeName")
_SOURCE_ONLY = tuple(o for o in _SOURCE_OPTIONS if o not in _SINK_OPTIONS)

_DEFAULT_GROUP_ID_PREFIX = "onceflow-spark-source"
_DEFAULT_MAX_TRIGGER_DELAY = "15m"
_DEFAULT_TRANSACTION_TIMEOUT_MS = 600_000

_ASSIGN_EXAMPLE = '{"topicA":[0,1],"topicB":[2,4]}'
_OFFSETS_EXAMPLE = '{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}'

_MAX_INT32 = 2**31 - 1  # Kafka's partition numbers
_MAX_INT64 = 2**63 - 1  # Kafka's offsets
_INT = re.compile(r"[+-]?[0-9]+")
_DURATION = re.compile(r"(-?[0-9]+)([a-z]+)?")
#: Spark's ``JavaUtils.timeStringAs`` suffixes, in milliseconds (``us`` is floored, as TimeUnit does).
_DURATION_UNITS_MS = {None: 1, "ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}
#: Kafka's ``Topic.validate``: legal characters and the length limit.
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")


# --------------------------------------------------------------------------- the raw map


class _Raw:
    """The incoming options, keys folded to lower case, each remembered under its documented name."""

    def __init__(self, options: Mapping[str, str], known: Sequence[str], what: str,
                 unsupported: Mapping[str, str], foreign: Sequence[str], foreign_what: str) -> None:
        canonical = {name.lower(): name for name in known}
        unsupported_by_key = {name.lower(): name for name in unsupported}
        foreign_by_key = {name.lower(): name for name in foreign}
        self.values: dict[str, str] = {}  # documented name (or "kafka.x") -> value
        seen: dict[str, str] = {}  # folded key -> key as given
        items: list[tuple[object, object]] = list(options.items())
        for key, value in items:
            if not isinstance(key, str) or not isinstance(value, str):
                # Spark turns every option value into a string; a caller that did not is told so.
                shown = "a secret's value" if isinstance(key, str) and is_secret(key) else repr(value)
                raise OptionError(f"Option {key!r} for {what} must be a string with a string value, got {shown}",
                                  str(key))
            folded = key.strip().lower()
            if folded in seen:
                # Deviation from Spark: its case-insensitive map keeps one of the two silently.
                raise OptionError(f"Option {key!r} is given twice for {what} (as {seen[folded]!r} and {key!r}); "
                                  "option names are case-insensitive", key)
            seen[folded] = key
            if folded.startswith("kafka."):
                name = "kafka." + folded[len("kafka."):]
                if name == "kafka.":
                    raise OptionError(f"Option {key!r} for {what} names no Kafka setting after 'kafka.'", key)
            elif folded in canonical:
                name = canonical[folded]
            elif folded in unsupported_by_key:
                name = unsupported_by_key[folded]
                raise OptionError(f"Option '{name}' of Spark's Kafka connector is not supported by {what}: "
                                  f"{unsupported[name]}", name)
            elif folded in foreign_by_key:
                name = foreign_by_key[folded]
                raise OptionError(f"Option '{name}' is {foreign_what} option; {what} does not take it", name)
            else:
                # Deviation from Spark: it ignores options it does not know, so a typo silently does nothing.
                raise OptionError(_unknown_message(key, folded, canonical, what), key)
            self.values[name] = value

    def get(self, name: str) -> str | None:
        return self.values.get(name)

    def kafka_params(self) -> dict[str, str]:
        return {name[len("kafka."):]: value for name, value in self.values.items() if name.startswith("kafka.")}


def _unknown_message(key: str, folded: str, canonical: Mapping[str, str], what: str) -> str:
    close = difflib.get_close_matches(folded, list(canonical), n=1, cutoff=0.6)
    if close:
        hint = f"; did you mean '{canonical[close[0]]}'?"
    elif "." in folded:
        hint = f"; Kafka client settings take the prefix 'kafka.': did you mean 'kafka.{folded}'?"
    else:
        hint = f". Known options: {', '.join(sorted(canonical.values(), key=str.lower))}, and 'kafka.*' client settings"
    return f"Unknown option '{key}' for {what}{hint}"


# --------------------------------------------------------------------------- value parsers


def _parse_bool(raw: _Raw, name: str, default: bool) -> bool:
    value = raw.get(name)
    if value is None:
        return default
    folded = value.strip().lower()  # Scala's toBoolean does not trim; surrounding blanks are harmless here
    if folded == "true":
        return True
    if folded == "false":
        return False
    raise OptionError(f"Option '{name}' must be 'true' or 'false', got {value!r}", name)


def _parse_positive_int(raw: _Raw, name: str) -> int | None:
    value = raw.get(name)
    if value is None:
        return None
    text = value.strip()
    if not _INT.fullmatch(text):
        raise OptionError(f"Option '{name}' must be a positive integer, got {value!r}", name)
    number = int(text)
    if number <= 0:
        raise OptionError(f"Option '{name}' must be positive, got {value!r}", name)
    return number


def parse_duration_ms(text: str, option: str) -> int:
    """Spark's duration strings (``Utils.timeStringAsMs``): ``500ms``, ``30s``, ``15m``, ``1h``, ``1d``, ``250us``;
    a bare number is milliseconds.  Negative durations are refused (Spark accepts them, meaninglessly)."""
    match = _DURATION.fullmatch(text.strip().lower())
    unit = match.group(2) if match else None
    if match is None or (unit not in _DURATION_UNITS_MS and unit != "us"):
        raise OptionError(f"Option '{option}' must be a duration such as 500ms, 30s, 15m, 1h or 1d "
                          f"(a bare number is milliseconds), got {text!r}", option)
    number = int(match.group(1))
    if number < 0:
        raise OptionError(f"Option '{option}' must not be negative, got {text!r}", option)
    if unit == "us":
        return number // 1000
    return number * _DURATION_UNITS_MS[unit]


def _check_topic(topic: str, option: str) -> str:
    # Deviation from Spark: it passes names through and lets the Kafka client refuse them later.
    if not _TOPIC.fullmatch(topic) or topic in (".", ".."):
        raise OptionError(f"Option '{option}': {topic!r} is not a legal Kafka topic name "
                          "(1 to 249 of the characters a-z, A-Z, 0-9, '.', '_', '-')", option)
    return topic


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Deviation from Spark: Jackson keeps the last of two equal keys; a repeated key is more likely a mistake.
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _load_json(text: str, option: str, example: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except ValueError as exc:  # json.JSONDecodeError is a ValueError, and so are duplicate keys
        raise OptionError(f"Option '{option}' is not valid JSON ({exc}); expected e.g. {example}, got {text!r}",
                          option) from None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _parse_partition(key: Any, option: str, topic: str, example: str) -> int:
    """A partition number: a JSON integer, or a string of digits (object keys), within Kafka's int32."""
    if isinstance(key, str) and key.isascii() and key.isdigit():
        key = int(key)
    if not _is_int(key) or not 0 <= key <= _MAX_INT32:
        raise OptionError(f"Option '{option}': partition {key!r} of topic {topic!r} is not a partition number "
                          f"(an integer from 0 to {_MAX_INT32}); expected e.g. {example}", option)
    return int(key)


def _parse_assign(text: str) -> Assign:
    option = "assign"
    if not text.strip().startswith("{"):
        raise OptionError(f"No topicpartitions to assign as specified value for option 'assign' is {text!r}; "
                          f"expected e.g. {_ASSIGN_EXAMPLE}", option)
    data = _load_json(text, option, _ASSIGN_EXAMPLE)
    if not isinstance(data, dict):
        raise OptionError(f"Option 'assign' must be a JSON object; expected e.g. {_ASSIGN_EXAMPLE}, got {text!r}", option)
    partitions: set[tuple[str, int]] = set()
    for topic, parts in data.items():
        _check_topic(topic, option)
        if not isinstance(parts, list):
            raise OptionError(f"Option 'assign': topic {topic!r} must map to a list of partitions; "
                              f"expected e.g. {_ASSIGN_EXAMPLE}, got {text!r}", option)
        for part in parts:
            if isinstance(part, str):  # Spark's parser wants numbers here, not strings
                raise OptionError(f"Option 'assign': partition {part!r} of topic {topic!r} must be a JSON number; "
                                  f"expected e.g. {_ASSIGN_EXAMPLE}", option)
            partitions.add((topic, _parse_partition(part, option, topic, _ASSIGN_EXAMPLE)))
    if not partitions:
        # Deviation from Spark: it accepts an empty assignment (and then reads nothing, forever).
        raise OptionError(f"No topicpartitions to assign as specified value for option 'assign' is {text!r}", option)
    return Assign(tuple(sorted(partitions)))


def parse_offsets_json(text: str, option: str, *, allow_earliest: bool) -> dict[tuple[str, int], int]:
    """Spark's per-partition offsets JSON, ``{"topicA":{"0":23,"1":-1},"topicB":{"0":-2}}``.

    Offsets are integers >= -2 (-2 earliest, -1 latest).  ``allow_earliest``
    False refuses -2, as ``endingOffsets`` must (Spark: "ending offset ...
    can't be earliest for batch queries").  Errors name ``option``.
    """
    data = _load_json(text, option, _OFFSETS_EXAMPLE)
    if not isinstance(data, dict):
        raise OptionError(f"Option '{option}' must be a JSON object; expected e.g. {_OFFSETS_EXAMPLE}, got {text!r}",
                          option)
    offsets: dict[tuple[str, int], int] = {}
    for topic, parts in data.items():
        _check_topic(topic, option)
        if not isinstance(parts, dict):
            raise OptionError(f"Option '{option}': topic {topic!r} must map to an object of partition offsets; "
                              f"expected e.g. {_OFFSETS_EXAMPLE}, got {text!r}", option)
        for key, offset in parts.items():
            partition = _parse_partition(key, option, topic, _OFFSETS_EXAMPLE)
            if (topic, partition) in offsets:
                raise OptionError(f"Option '{option}' names partition {partition} of topic {topic!r} twice", option)
            if not _is_int(offset) or not EARLIEST <= offset <= _MAX_INT64:
                raise OptionError(f"Option '{option}': the offset of {topic}-{partition} must be an integer from -2 "
                                  f"to {_MAX_INT64} (-2 earliest, -1 latest), got {offset!r}", option)
            if offset == EARLIEST and not allow_earliest:
                raise OptionError(f"Option '{option}': the offset for {topic}-{partition} can't be earliest (-2) "
                                  "for batch queries on Kafka", option)
            offsets[(topic, partition)] = offset
    if not offsets:
        # Deviation from Spark: "{}" would fail its all-partitions assertion when the query starts.
        raise OptionError(f"Option '{option}' names no partitions; expected e.g. {_OFFSETS_EXAMPLE}, got {text!r}",
                          option)
    return offsets


def offsets_to_json(offsets: Mapping[tuple[str, int], int]) -> str:
    """Spark's offsets JSON, ``{"topic":{"0":23}}``: compact, topics and partitions sorted (numerically)."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        nested.setdefault(topic, {})[str(partition)] = offset
    return json.dumps(nested, separators=(",", ":"))


def _parse_offset_spec(raw: _Raw, name: str, default: OffsetSpec, *, allow_earliest: bool) -> OffsetSpec:
    value = raw.get(name)
    if value is None:
        return default
    text = value.strip()
    if text.lower() == "earliest":
        return OffsetSpec.earliest()
    if text.lower() == "latest":
        return OffsetSpec.latest()
    if not text.startswith("{"):
        raise OptionError(f"Option '{name}' must be 'earliest', 'latest' or JSON such as {_OFFSETS_EXAMPLE}, "
                          f"got {value!r}", name)
    return OffsetSpec.specific(parse_offsets_json(text, name, allow_earliest=allow_earliest))


def _parse_subscription(raw: _Raw) -> Subscription:
    given = [name for name in _STRATEGIES if raw.get(name) is not None]
    if not given:
        raise OptionError(f"One of the following options must be specified for {_SOURCE}: "
                          f"{', '.join(_STRATEGIES)}", "subscribe")
    if len(given) > 1:
        raise OptionError(f"Only one of the following options can be specified for {_SOURCE}: "
                          f"{', '.join(_STRATEGIES)} (got {', '.join(given)})", given[1])
    name = given[0]
    value = raw.get(name) or ""
    if name == "subscribe":
        entries = [t.strip() for t in value.split(",")]
        if not any(entries):
            raise OptionError(f"No topics to subscribe to as specified value for option 'subscribe' is {value!r}", name)
        if not all(entries):
            # Deviation from Spark: it drops empty entries ("a,,b"); a stray comma is more likely a mistake.
            raise OptionError(f"Option 'subscribe' has an empty topic name in {value!r}", name)
        topics: list[str] = []
        for topic in entries:
            if _check_topic(topic, name) not in topics:
                topics.append(topic)
        return Subscribe(tuple(topics))
    if name == "subscribePattern":
        pattern = value.strip()
        if not pattern:
            raise OptionError(f"Pattern to subscribe is empty as specified value for option 'subscribePattern' is "
                              f"{value!r}", name)
        try:
            re.compile(pattern)
        except re.error as exc:
            raise OptionError(f"Option 'subscribePattern' is not a valid regular expression ({exc}): {pattern!r}",
                              name) from None
        return SubscribePattern(pattern)
    return _parse_assign(value)


def _check_offsets_cover(spec: OffsetSpec, name: str, subscription: Subscription) -> None:
    """Specific offsets must be able to match the subscription.

    Spark asserts, when the query starts, that the partitions named equal
    the consumer's assignment ("If startingOffsets contains specific offsets,
    you must specify all TopicPartitions").  With ``assign`` that set is
    known now, so the same check runs here.  With ``subscribe`` and
    ``subscribePattern`` only the topics can be checked now; that every
    partition is named is for the caller to check against the brokers.
    Deviation from Spark: the same rule, found before the query starts.
    """
    if spec.kind != "specific":
        return
    named = set(spec.offsets)
    if isinstance(subscription, Assign):
        assigned = set(subscription.partitions)
        if named != assigned:
            extra = ", ".join(f"{t}-{p}" for t, p in sorted(named - assigned))
            missing = ", ".join(f"{t}-{p}" for t, p in sorted(assigned - named))
            detail = "; ".join(part for part in (extra and f"not assigned: {extra}", missing and f"missing: {missing}")
                               if part)
            raise OptionError(f"If option '{name}' contains specific offsets, you must specify all TopicPartitions of "
                              f"option 'assign' and no others ({detail}). Use -1 for latest, -2 for earliest", name)
    elif isinstance(subscription, Subscribe):
        stray = sorted({t for t, _ in named} - set(subscription.topics))
        if stray:
            raise OptionError(f"Option '{name}' names topics that option 'subscribe' does not: {', '.join(stray)}", name)
    else:
        stray = sorted({t for t, _ in named if not subscription.matches(t)})
        if stray:
            raise OptionError(f"Option '{name}' names topics that option 'subscribePattern' "
                              f"({subscription.pattern!r}) does not match: {', '.join(stray)}", name)


# --------------------------------------------------------------------------- Kafka client settings

_CUSTOM_GROUP_ID_WARNING = (
    "Kafka option 'kafka.group.id' has been set on this query; it is not recommended. Concurrent queries or sources "
    "using the same group id may interfere with each other as members of the same consumer group."
)

_AUTO_OFFSET_RESET_ERROR = (
    "Kafka option 'auto.offset.reset' is not supported. Instead set the source option 'startingOffsets' to "
    "'earliest' or 'latest' to specify where to start. Structured Streaming manages which offsets are consumed "
    "internally, rather than relying on the kafkaConsumer to do it. Note that 'startingOffsets' only applies when a "
    "new streaming query is started, and that resuming will always pick up from where the query left off."
)

#: Consumer settings the source refuses (``KafkaSourceProvider.validateGeneralOptions``), by key without the prefix.
_REFUSED_CONSUMER_PARAMS = {
    "auto.offset.reset": _AUTO_OFFSET_RESET_ERROR,
    "key.deserializer": "Kafka option 'key.deserializer' is not supported as keys are read as bytes. "
                        "Use DataFrame operations to explicitly deserialize the keys.",
    "value.deserializer": "Kafka option 'value.deserializer' is not supported as values are read as bytes. "
                          "Use DataFrame operations to explicitly deserialize the values.",
    "enable.auto.commit": "Kafka option 'enable.auto.commit' is not supported: the query tracks its own offsets "
                          "(see option 'commitOffsetsToGroup' to publish them to a consumer group)",
    "interceptor.classes": "Kafka option 'interceptor.classes' is not supported: interceptors can modify payloads",
}

#: Producer settings the sink refuses.
_REFUSED_PRODUCER_PARAMS = {
    "key.serializer": "Kafka option 'key.serializer' is not supported as keys are written as bytes.",
    "value.serializer": "Kafka option 'value.serializer' is not supported as values are written as bytes.",
    # Deviation from Spark (whose sink is not transactional): the sink derives its transactional ids.
    "transactional.id": "Kafka option 'transactional.id' is not supported: the sink derives one transactional id per "
                        "task from option 'transactionalIdPrefix' and Spark's query id",
}

_ISOLATION_LEVELS = ("read_committed", "read_uncommitted")

#: Kafka's clients wait ``default.api.timeout.ms`` (60 s by default) for a metadata or offset call.
#: A batch write fails, naming the bootstrap servers, when no broker answers within it; the source's
#: driver retries its calls for twice as long (Spark's source retries its admin calls, too).  librdkafka
#: has no such setting, so it is taken out of the client settings.
_DEFAULT_API_TIMEOUT_MS = 60_000


def _api_timeout_ms(kafka_params: dict[str, str]) -> int:
    text = kafka_params.pop("default.api.timeout.ms", None)
    if text is None:
        return _DEFAULT_API_TIMEOUT_MS
    if _INT.fullmatch(text.strip()) and 0 < int(text) <= _MAX_INT32:  # a Java int in Kafka; 0 would never wait
        return int(text)
    raise OptionError(f"Option 'kafka.default.api.timeout.ms' must be an integer from 1 to {_MAX_INT32} (milliseconds), "
                      f"got {text!r}", "kafka.default.api.timeout.ms")


def _client_params(kafka_params: Mapping[str, str]) -> ClientSettings:
    """The ``kafka.*`` settings in librdkafka's names (``clientconfig.translate``): Kafka's Java names
    translated.  A setting that cannot be is an ``OptionError`` naming it (as ``kafka.<name>``)."""
    try:
        return translate(kafka_params)
    except SettingError as exc:
        raise _option_error(exc) from None


def _check_client_params(settings: ClientSettings) -> None:
    """librdkafka's verdict on the settings, offline (``ClientSettings.check``), after the options' own
    checks (whose messages say more); its refusal is an ``OptionError`` naming the user's setting."""
    try:
        settings.check()
    except SettingError as exc:
        raise _option_error(exc) from None


def _option_error(exc: SettingError) -> OptionError:
    """A client setting's error as the connector's, naming ``kafka.<setting>``; it quotes no secret."""
    if exc.setting is None:
        return OptionError(f"Options 'kafka.*': {exc}", "kafka.*")
    text = str(exc).removeprefix(f"{exc.setting}: ")
    return OptionError(f"Option 'kafka.{exc.setting}': {text}", f"kafka.{exc.setting}")


def _require_bootstrap(kafka_params: Mapping[str, str], client: str) -> str:
    servers = kafka_params.get("bootstrap.servers", "").strip()
    if not servers:
        raise OptionError(f"Option 'kafka.bootstrap.servers' must be specified for configuring Kafka {client}",
                          "kafka.bootstrap.servers")
    return servers


def _refuse(kafka_params: Mapping[str, str], refused: Mapping[str, str]) -> None:
    for key, message in refused.items():
        if key in kafka_params:
            raise OptionError(message, f"kafka.{key}")


# --------------------------------------------------------------------------- the source


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check the source's options (keys in any case) and return them parsed.

    ``streaming`` selects the rules of ``readStream`` (starting offsets
    default to latest, no ending offsets) or of ``read`` (earliest to latest,
    per-trigger limits ignored with a warning).  Raises ``OptionError``.
    """
    raw = _Raw(options, _SOURCE_OPTIONS, _SOURCE, _UNSUPPORTED_SOURCE_OPTIONS, _SINK_ONLY, "a sink")
    warnings: list[str] = []
    kafka_params = raw.kafka_params()

    _refuse(kafka_params, _REFUSED_CONSUMER_PARAMS)
    api_timeout_ms = _api_timeout_ms(kafka_params)
    client = _client_params(kafka_params)
    kafka_params = dict(client.config)
    subscription = _parse_subscription(raw)
    bootstrap_servers = _require_bootstrap(kafka_params, "consumer")

    # Deviation from Spark: read_committed by default (Kafka's default is read_uncommitted), so
    # records of open or aborted transactions are never read.
    isolation = kafka_params.get("isolation.level", "read_committed").strip().lower()
    if isolation not in _ISOLATION_LEVELS:
        raise OptionError(f"Option 'kafka.isolation.level' must be 'read_committed' or 'read_uncommitted', got "
                          f"{kafka_params['isolation.level']!r}", "kafka.isolation.level")
    kafka_params["isolation.level"] = isolation

    # Deviation from Spark: the default prefix is Onceflow's ("spark-kafka-source" in Spark).
    given_prefix = raw.get("groupIdPrefix")
    group_id_prefix = _DEFAULT_GROUP_ID_PREFIX if given_prefix is None else given_prefix.strip()
    if not group_id_prefix:
        raise OptionError("Option 'groupIdPrefix' must not be empty", "groupIdPrefix")
    if "group.id" in kafka_params:
        if not kafka_params["group.id"].strip():
            raise OptionError("Option 'kafka.group.id' must not be empty", "kafka.group.id")
        warnings.append(_CUSTOM_GROUP_ID_WARNING)
        if raw.get("groupIdPrefix") is not None:
            warnings.append("Option 'groupIdPrefix' will be ignored as option 'kafka.group.id' has been set.")

    if streaming:
        if raw.get("endingOffsets") is not None:
            raise OptionError("Option 'endingOffsets' is not valid in streaming queries (ending offset not valid in "
                              "streaming queries)", "endingOffsets")
        starting = _parse_offset_spec(raw, "startingOffsets", OffsetSpec.latest(), allow_earliest=True)
        ending = None
    else:
        starting = _parse_offset_spec(raw, "startingOffsets", OffsetSpec.earliest(), allow_earliest=True)
        if starting.kind == "latest":
            raise OptionError("Option 'startingOffsets': starting offset can't be latest for batch queries on Kafka",
                              "startingOffsets")
        for (topic, partition), offset in sorted(starting.offsets.items()):
            if offset == LATEST:
                raise OptionError(f"Option 'startingOffsets': the offset for {topic}-{partition} can't be latest (-1) "
                                  "for batch queries on Kafka", "startingOffsets")
        ending = _parse_offset_spec(raw, "endingOffsets", OffsetSpec.latest(), allow_earliest=False)
        if ending.kind == "earliest":
            raise OptionError("Option 'endingOffsets': ending offset can't be earliest for batch queries on Kafka",
                              "endingOffsets")
        _check_start_before_end(starting, ending)

    _check_offsets_cover(starting, "startingOffsets", subscription)
    if ending is not None:
        _check_offsets_cover(ending, "endingOffsets", subscription)

    max_offsets = _parse_positive_int(raw, "maxOffsetsPerTrigger")
    min_offsets = _parse_positive_int(raw, "minOffsetsPerTrigger")
    if min_offsets is not None and max_offsets is not None and min_offsets > max_offsets:
        raise OptionError(f"The value of minOffsetsPerTrigger({min_offsets}) is higher than the "
                          f"maxOffsetsPerTrigger({max_offsets}).", "minOffsetsPerTrigger")
    delay_text = raw.get("maxTriggerDelay")
    max_delay_ms = parse_duration_ms(_DEFAULT_MAX_TRIGGER_DELAY if delay_text is None else delay_text, "maxTriggerDelay")
    if not streaming:
        # As Spark: ignored in batch queries, with a warning; None so no batch reader applies them by mistake.
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if raw.get(name) is not None:
                warnings.append(f"{name} option ignored in batch queries")
        max_offsets = min_offsets = None

    commit_group = raw.get("commitOffsetsToGroup")
    if commit_group is not None:
        commit_group = commit_group.strip()
        if not commit_group:
            raise OptionError("Option 'commitOffsetsToGroup' must name a consumer group, got an empty string",
                              "commitOffsetsToGroup")

    _check_client_params(client)
    return SourceOptions(
        bootstrap_servers=bootstrap_servers,
        subscription=subscription,
        starting_offsets=starting,
        ending_offsets=ending,
        max_offsets_per_trigger=max_offsets,
        min_offsets_per_trigger=min_offsets,
        max_trigger_delay_ms=max_delay_ms,
        min_partitions=_parse_positive_int(raw, "minPartitions"),
        include_headers=_parse_bool(raw, "includeHeaders", False),
        fail_on_data_loss=_parse_bool(raw, "failOnDataLoss", True),
        commit_offsets_to_group=commit_group,
        group_id_prefix=group_id_prefix,
        kafka_params=kafka_params,
        warnings=tuple(warnings),
        api_timeout_ms=api_timeout_ms,
        kafka_origins=dict(client.origins),
    )


def _check_start_before_end(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's ``checkOffsetLimitValidity``: two specific specs name the same partitions, start <= end."""
    if starting.kind != "specific" or ending.kind != "specific":
        return
    if set(starting.offsets) != set(ending.offsets):
        only_start = ", ".join(f"{t}-{p}" for t, p in sorted(set(starting.offsets) - set(ending.offsets)))
        only_end = ", ".join(f"{t}-{p}" for t, p in sorted(set(ending.offsets) - set(starting.offsets)))
        raise OptionError("Options 'startingOffsets' and 'endingOffsets' must name the same partitions "
                          f"(only in startingOffsets: {only_start or 'none'}; only in endingOffsets: {only_end or 'none'})",
                          "endingOffsets")
    for tp, start in sorted(starting.offsets.items()):
        end = ending.offsets[tp]
        if start >= 0 and end >= 0 and start > end:
            raise OptionError(f"Option 'startingOffsets' ({start}) is greater than option 'endingOffsets' ({end}) "
                              f"for {tp[0]}-{tp[1]}", "endingOffsets")


# --------------------------------------------------------------------------- the sink

_GUARANTEES: tuple[Literal["exactly-once"], Literal["at-least-once"]] = ("exactly-once", "at-least-once")


def parse_sink_options(options: Mapping[str, str], *, streaming: bool) -> SinkOptions:
    """Check the sink's options (keys in any case) and return them parsed.

    The rules are the same for streaming and batch writes; ``streaming`` is
    taken for symmetry with ``parse_source_options``.  Raises ``OptionError``.
    """
    del streaming  # the same rules either way (see the docstring)
    raw = _Raw(options, _SINK_OPTIONS, _SINK, {}, _SOURCE_ONLY + tuple(_UNSUPPORTED_SOURCE_OPTIONS), "a source")
    kafka_params = raw.kafka_params()
    _refuse(kafka_params, _REFUSED_PRODUCER_PARAMS)
    api_timeout_ms = _api_timeout_ms(kafka_params)
    client = _client_params(kafka_params)
    kafka_params = dict(client.config)
    bootstrap_servers = _require_bootstrap(kafka_params, "producer")

    topic = raw.get("topic")
    if topic is not None:
        topic = _check_topic(topic.strip(), "topic")  # Spark trims it too

    guarantee_given = raw.get("deliveryGuarantee")
    guarantee_text = "exactly-once" if guarantee_given is None else guarantee_given.strip().lower()
    guarantee = next((g for g in _GUARANTEES if g == guarantee_text), None)
    if guarantee is None:
        raise OptionError(f"Option 'deliveryGuarantee' must be 'exactly-once' or 'at-least-once', got "
                          f"{raw.get('deliveryGuarantee')!r}", "deliveryGuarantee")

    prefix = raw.get("transactionalIdPrefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not prefix:
            raise OptionError("Option 'transactionalIdPrefix' must not be empty", "transactionalIdPrefix")

    timeout_text = kafka_params.get("transaction.timeout.ms")
    if timeout_text is None:
        timeout_ms = _DEFAULT_TRANSACTION_TIMEOUT_MS
    elif _INT.fullmatch(timeout_text.strip()) and int(timeout_text) > 0:
        timeout_ms = int(timeout_text)
    else:
        raise OptionError(f"Option 'kafka.transaction.timeout.ms' must be a positive integer (milliseconds), got "
                          f"{timeout_text!r}", "kafka.transaction.timeout.ms")

    _check_producer_params(kafka_params, guarantee, timeout_ms)
    if guarantee == "exactly-once":
        kafka_params["transaction.timeout.ms"] = str(timeout_ms)

    accept_text = raw.get("acceptChangedReplay")
    accept = None
    if accept_text is not None:
        if not _INT.fullmatch(accept_text.strip()) or int(accept_text) < 0:
            raise OptionError(f"Option 'acceptChangedReplay' must be a micro-batch id (an integer from 0), got "
                              f"{accept_text!r}", "acceptChangedReplay")
        accept = int(accept_text)
    name = raw.get("writeName")
    if name is not None:
        name = check_write_name(name.strip(), "writeName")

    _parse_bool(raw, "includeHeaders", False)  # accepted, but it must still be a boolean
    _check_client_params(client)
    return SinkOptions(
        bootstrap_servers=bootstrap_servers,
        topic=topic,
        delivery_guarantee=guarantee,
        transactional_id_prefix=prefix,
        checkpoint_location=raw.get("checkpointLocation"),
        transaction_timeout_ms=timeout_ms,
        kafka_params=kafka_params,
        accept_changed_replay=accept,
        replay_wait_ms=_parse_positive_int(raw, "replayWaitMs") or 30_000,
        name=name,
        api_timeout_ms=api_timeout_ms,
        kafka_origins=dict(client.origins),
    )


#: A write's name goes into topic names and transactional ids: Kafka's legal characters, short enough
#: for ``onceflow-progress-<query id>-<name>`` to stay within 249.
_WRITE_NAME = re.compile(r"[a-zA-Z0-9._-]{1,150}")


def check_write_name(name: str, option: str) -> str:
    if not _WRITE_NAME.fullmatch(name):
        raise OptionError(f"{option} {name!r} must be 1 to 150 of the characters a-z, A-Z, 0-9, '.', '_', '-' (it "
                          "becomes part of Kafka topic names and transactional ids)", option)
    return name


_BOOLEANS = ("true", "false")


def _check_producer_params(kafka_params: Mapping[str, str], guarantee: str, timeout_ms: int) -> None:
    """Producer settings that librdkafka would accept here and then refuse in every task, or that would
    quietly break the guarantee: refused now, naming the setting."""
    idempotence = kafka_params.get("enable.idempotence", "true").strip().lower()
    if idempotence not in _BOOLEANS:
        raise OptionError(f"Option 'kafka.enable.idempotence' must be 'true' or 'false', got "
                          f"{kafka_params['enable.idempotence']!r}", "kafka.enable.idempotence")
    acks = kafka_params.get("acks", "all").strip().lower()
    if acks not in ("all", "-1", "0", "1") and not (_INT.fullmatch(acks) and int(acks) > 1):
        raise OptionError(f"Option 'kafka.acks' must be all, -1, 0 or 1, got {kafka_params['acks']!r}", "kafka.acks")
    if guarantee == "exactly-once":
        if idempotence == "false":
            raise OptionError("Option 'kafka.enable.idempotence' can't be false with deliveryGuarantee "
                              "'exactly-once': transactions need the idempotent producer", "kafka.enable.idempotence")
        if acks not in ("all", "-1"):
            # Kafka's own rule: an idempotent (so a transactional) producer needs acks=all.
            raise OptionError(f"Option 'kafka.acks' must be 'all' (or -1) with deliveryGuarantee 'exactly-once', "
                              f"got {kafka_params['acks']!r}", "kafka.acks")
    elif acks == "0":
        raise OptionError("Option 'kafka.acks' can't be 0 with deliveryGuarantee 'at-least-once': the producer would "
                          "not know whether a row was written", "kafka.acks")
    elif idempotence == "true" and acks not in ("all", "-1"):
        raise OptionError(f"Option 'kafka.acks'={kafka_params['acks']!r} needs 'kafka.enable.idempotence'=false: the "
                          "idempotent producer (the default) needs acks=all", "kafka.acks")
    in_flight = kafka_params.get("max.in.flight.requests.per.connection",
                                 kafka_params.get("max.in.flight"))
    if in_flight is not None:
        if not _INT.fullmatch(in_flight.strip()) or int(in_flight) < 1:
            raise OptionError(f"Option 'kafka.max.in.flight.requests.per.connection' must be a positive integer, got "
                              f"{in_flight!r}", "kafka.max.in.flight.requests.per.connection")
        if int(in_flight) > 5 and idempotence == "true":
            raise OptionError(f"Option 'kafka.max.in.flight.requests.per.connection' must be at most 5 with the "
                              f"idempotent producer (Kafka's limit), got {in_flight!r}",
                              "kafka.max.in.flight.requests.per.connection")
    for name in ("message.timeout.ms", "delivery.timeout.ms"):
        text = kafka_params.get(name)
        if text is None:
            continue
        if not _INT.fullmatch(text.strip()) or int(text) < 0:
            raise OptionError(f"Option 'kafka.{name}' must be a non-negative integer (milliseconds), got {text!r}",
                              f"kafka.{name}")
        if guarantee == "exactly-once" and (int(text) == 0 or int(text) > timeout_ms):
            raise OptionError(f"Option 'kafka.{name}' ({text}) must be between 1 and the transaction timeout "
                              f"({timeout_ms} ms, 'kafka.transaction.timeout.ms'): librdkafka refuses a longer one",
                              f"kafka.{name}")


# --------------------------------------------------------------------------- the sink's columns

_SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")


def check_sink_columns(column_names: Sequence[str], topic_option: str | None) -> None:
    """The rows written must have a ``value`` column, a ``topic`` column or the ``topic`` option, and no
    columns other than key, value, topic, partition and headers.  Names are case-sensitive, as in Spark's
    ``KafkaWriter``; types are not checked here.

    Deviation from Spark: it ignores other columns, which hides typos such as ``vaule``; here they are errors.
    """
    seen: set[str] = set()
    for name in column_names:
        if name in seen:
            raise OptionError(f"Column '{name}' appears more than once in the rows written to the onceflow sink", name)
        seen.add(name)
        if name not in _SINK_COLUMNS:
            close = difflib.get_close_matches(name.lower(), _SINK_COLUMNS, n=1, cutoff=0.6)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise OptionError(f"Column '{name}' is not one the onceflow sink writes (allowed: "
                              f"{', '.join(_SINK_COLUMNS)}){hint}", name)
    if "value" not in seen:
        raise OptionError("Required attribute 'value' not found: the rows written to the onceflow sink need a "
                          "'value' column", "value")
    if topic_option is None and "topic" not in seen:
        raise OptionError("topic option required when no 'topic' attribute is present. Use the topic option for "
                          "setting a topic.", "topic")
