"""Broker and topic configuration, with Kafka's names and Kafka's defaults.

Theory of operation: ``BROKER_CONFIGS`` and ``TOPIC_CONFIGS`` are tables of
``ConfigDef`` rows (name, type, default, doc).  A ``BrokerConfig`` is built
from those defaults, then a ``server.properties`` file, then ``-o key=value``
overrides, in that order; every value is parsed and checked against its row
once, at start-up.  A topic's effective configuration is its own overrides on
top of the broker-wide synonym of each key (``retention.ms`` falls back to
``log.retention.ms``, as in Kafka's ``LogConfig``), which is also what
DescribeConfigs reports as each entry's source.

Keys Kafka has but Onceflow has no use for (thread pools, replication...)
are accepted and ignored with one INFO line, so an existing
``server.properties`` works unchanged; Kafka's names are Apache Kafka's own
list, ``kafka_broker_configs.txt`` (``scripts/kafka_broker_configs.py``).  A
key neither knows (a typo: ``num.partitons``) is ignored with one WARNING,
with a did-you-mean when a known name is close; the broker still starts, as
Kafka's does.  Per-listener settings
(``listener.name.<listener>.<key>``, Kafka's prefix for ``ssl.*`` and
``sasl.*`` keys) are kept beside the broker-wide ones and read with
``BrokerConfig.for_listener``.
"""

from __future__ import annotations

import difflib
import functools
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any, Final, Generic, TypeVar, cast, overload

import javaproperties

log = logging.getLogger(__name__)


class ConfigType(Enum):
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    INT = "INT"
    SHORT = "SHORT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"
    #: A secret (a key password, a JAAS configuration): never logged, DescribeConfigs answers null.
    PASSWORD = "PASSWORD"


class ConfigError(ValueError):
    """A configuration value that cannot be used (Kafka's INVALID_CONFIG)."""


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ConfigDef(Generic[T]):
    """One setting: Kafka's name, its type, default, documentation and check.

    A broker setting is also a typed key: ``config[LOG_SEGMENT_BYTES]`` is an
    ``int`` to mypy, and a misspelt constant fails at import, not on the one
    path that reads it."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    validator: Callable[[Any], bool] | None = None
    #: The broker-wide key a topic-level key falls back to (topic configs only).
    synonym: str | None = None

    def parse(self, raw: Any) -> T:
        value = _parse_value(self.name, self.type, raw)
        if self.validator is not None and value is not None and not self.validator(value):
            raise ConfigError(f"Invalid value {raw!r} for configuration {self.name}")
        return cast(T, value)


_INT_RANGES = {
    ConfigType.INT: (-(2**31), 2**31 - 1),
    ConfigType.SHORT: (-(2**15), 2**15 - 1),
    ConfigType.LONG: (-(2**63), 2**63 - 1),
}


def _parse_value(name: str, kind: ConfigType, raw: Any) -> Any:
    if raw is None:
        return None
    if kind in _INT_RANGES:
        try:
            value = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"Invalid value {raw!r} for configuration {name}: not a number") from None
        low, high = _INT_RANGES[kind]
        if not low <= value <= high:
            raise ConfigError(f"Invalid value {raw!r} for configuration {name}: out of range")
        return value
    if kind is ConfigType.BOOLEAN:
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("true", "false"):
            return text == "true"
        raise ConfigError(f"Invalid value {raw!r} for configuration {name}: expected true or false")
    if kind is ConfigType.DOUBLE:
        try:
            return float(raw)
        except ValueError:
            raise ConfigError(f"Invalid value {raw!r} for configuration {name}") from None
    if kind is ConfigType.LIST:
        if isinstance(raw, (list, tuple)):
            return [str(x).strip() for x in raw if str(x).strip()]
        return [part.strip() for part in str(raw).split(",") if part.strip()]
    return str(raw).strip()


def _at_least(n: int) -> Callable[[Any], bool]:
    return lambda v: v >= n


def _between(low: float, high: float) -> Callable[[Any], bool]:
    return lambda v: low <= v <= high


def _one_of(*choices: str) -> Callable[[Any], bool]:
    return lambda v: v in choices


def _endpoints(values: list[str]) -> bool:
    try:
        parse_endpoints(values)
    except ConfigError:
        return False
    return True


def parse_endpoints(values: list[str]) -> dict[str, tuple[str, int]]:
    """``NAME://host:port`` entries (``listeners``, ``advertised.listeners``) by listener name,
    upper-cased as Kafka does; an empty host means every address (Kafka's ``PLAINTEXT://:9092``).
    Raises ConfigError on a malformed entry or a name given twice."""
    out: dict[str, tuple[str, int]] = {}
    for entry in values:
        name, sep, address = entry.partition("://")
        host, colon, port = address.rpartition(":")
        name = name.strip().upper()
        if not (sep and colon and name and port.isdigit() and 0 <= int(port) < 65536):
            raise ConfigError(f"Invalid listener {entry!r}: expected NAME://HOST:PORT")
        if name in out:
            raise ConfigError(f"Listener name {name} is given twice in {','.join(values)}")
        out[name] = (host.strip("[]"), int(port))
    return out


def _protocol_map(values: list[str]) -> bool:
    return all(v.count(":") == 1 and v.partition(":")[2].strip().upper() in SECURITY_PROTOCOLS for v in values)


#: Kafka's security protocols (``listener.security.protocol.map`` values).
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


def _assignor_names(values: list[str]) -> bool:
    return bool(values) and len(set(values)) == len(values) and all(v in ("uniform", "range") for v in values)


def _cleanup_policy(values: list[str]) -> bool:
    return bool(values) and all(v in ("delete", "compact") for v in values)


_MS_PER_HOUR = 3_600_000

#: Kafka's prefix of per-listener settings: ``listener.name.sasl_ssl.ssl.keystore.location``.
LISTENER_PREFIX = "listener.name."

# fmt: off
NODE_ID: Final[ConfigDef[int]] = ConfigDef("node.id", ConfigType.INT, 1, "This broker's node id.", _at_least(0))
AUTO_CREATE_TOPICS_ENABLE: Final[ConfigDef[bool]] = ConfigDef("auto.create.topics.enable", ConfigType.BOOLEAN, True, "Create a topic when a client asks for one that does not exist.")
DELETE_TOPIC_ENABLE: Final[ConfigDef[bool]] = ConfigDef("delete.topic.enable", ConfigType.BOOLEAN, True, "Allow DeleteTopics.")
NUM_PARTITIONS: Final[ConfigDef[int]] = ConfigDef("num.partitions", ConfigType.INT, 1, "Partitions of an auto-created topic.", _at_least(1))
DEFAULT_REPLICATION_FACTOR: Final[ConfigDef[int]] = ConfigDef("default.replication.factor", ConfigType.INT, 1, "Replication factor of an auto-created topic (only 1 on a single broker).", _one_of(1))  # type: ignore[arg-type]
LISTENERS: Final[ConfigDef[list[str] | None]] = ConfigDef("listeners", ConfigType.LIST, None, "NAME://HOST:PORT listeners, each on its own port (port 0: a free one); a name maps to PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL through listener.security.protocol.map. Unset: one PLAINTEXT listener on --listen.", _endpoints)
ADVERTISED_LISTENERS: Final[ConfigDef[list[str] | None]] = ConfigDef("advertised.listeners", ConfigType.LIST, None, "NAME://HOST:PORT clients of each listener are told to connect to (Metadata, FindCoordinator, DescribeCluster) when it is not the address the broker listens on, as behind a proxy. A listener not named here advertises its own address.", _endpoints)
LISTENER_SECURITY_PROTOCOL_MAP: Final[ConfigDef[list[str]]] = ConfigDef("listener.security.protocol.map", ConfigType.LIST, ["PLAINTEXT:PLAINTEXT", "SSL:SSL", "SASL_PLAINTEXT:SASL_PLAINTEXT", "SASL_SSL:SASL_SSL"], "LISTENER_NAME:SECURITY_PROTOCOL pairs.", _protocol_map)
SSL_KEYSTORE_TYPE: Final[ConfigDef[str]] = ConfigDef("ssl.keystore.type", ConfigType.STRING, "JKS", "Format of the broker's key and certificate: PEM (JKS and PKCS12 are Java keystores, not read here).", _one_of("JKS", "PKCS12", "PEM"))
SSL_KEYSTORE_LOCATION: Final[ConfigDef[str | None]] = ConfigDef("ssl.keystore.location", ConfigType.STRING, None, "A PEM file holding the broker's private key and certificate chain.")
SSL_KEYSTORE_PASSWORD: Final[ConfigDef[str | None]] = ConfigDef("ssl.keystore.password", ConfigType.PASSWORD, None, "Not used with PEM (Kafka's meaning: the keystore's password).")
SSL_KEY_PASSWORD: Final[ConfigDef[str | None]] = ConfigDef("ssl.key.password", ConfigType.PASSWORD, None, "The password of an encrypted private key.")
SSL_KEYSTORE_CERTIFICATE_CHAIN: Final[ConfigDef[str | None]] = ConfigDef("ssl.keystore.certificate.chain", ConfigType.PASSWORD, None, "The broker's certificate chain, PEM text (instead of ssl.keystore.location).")
SSL_KEYSTORE_KEY: Final[ConfigDef[str | None]] = ConfigDef("ssl.keystore.key", ConfigType.PASSWORD, None, "The broker's private key, PEM text (instead of ssl.keystore.location).")
SSL_TRUSTSTORE_TYPE: Final[ConfigDef[str]] = ConfigDef("ssl.truststore.type", ConfigType.STRING, "JKS", "Format of the CA certificates client certificates are checked against: PEM.", _one_of("JKS", "PKCS12", "PEM"))
SSL_TRUSTSTORE_LOCATION: Final[ConfigDef[str | None]] = ConfigDef("ssl.truststore.location", ConfigType.STRING, None, "A PEM file of CA certificates that client certificates are checked against.")
SSL_TRUSTSTORE_PASSWORD: Final[ConfigDef[str | None]] = ConfigDef("ssl.truststore.password", ConfigType.PASSWORD, None, "Not used with PEM.")
SSL_TRUSTSTORE_CERTIFICATES: Final[ConfigDef[str | None]] = ConfigDef("ssl.truststore.certificates", ConfigType.PASSWORD, None, "CA certificates, PEM text (instead of ssl.truststore.location).")
SSL_CLIENT_AUTH: Final[ConfigDef[str]] = ConfigDef("ssl.client.auth", ConfigType.STRING, "none", "Client certificates: none, requested (checked when given) or required.", _one_of("none", "requested", "required"))
SSL_ENABLED_PROTOCOLS: Final[ConfigDef[list[str]]] = ConfigDef("ssl.enabled.protocols", ConfigType.LIST, ["TLSv1.2", "TLSv1.3"], "TLS versions accepted.", lambda v: bool(v) and all(p in ("TLSv1.2", "TLSv1.3") for p in v))
SSL_CIPHER_SUITES: Final[ConfigDef[list[str]]] = ConfigDef("ssl.cipher.suites", ConfigType.LIST, [], "TLS 1.2 cipher suites, OpenSSL names (empty: the ssl module's defaults).")
SSL_PRINCIPAL_MAPPING_RULES: Final[ConfigDef[str]] = ConfigDef("ssl.principal.mapping.rules", ConfigType.STRING, "DEFAULT", "Rules from a client certificate's subject (RFC 2253) to the principal's name: RULE:pattern/replacement/[LU], ..., DEFAULT.")
SASL_ENABLED_MECHANISMS: Final[ConfigDef[list[str]]] = ConfigDef("sasl.enabled.mechanisms", ConfigType.LIST, ["GSSAPI"], "SASL mechanisms served: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (GSSAPI and OAUTHBEARER are not).")
SASL_JAAS_CONFIG: Final[ConfigDef[str | None]] = ConfigDef("sasl.jaas.config", ConfigType.PASSWORD, None, "A JAAS login-module entry. A broker reads it per listener and mechanism, as listener.name.<listener>.<mechanism>.sasl.jaas.config (PLAIN's users are its user_NAME=\"password\" options); without that prefix it is ignored with a warning, as in Kafka.")
JAVA_SECURITY_AUTH_LOGIN_CONFIG: Final[ConfigDef[str | None]] = ConfigDef("java.security.auth.login.config", ConfigType.STRING, None, "A JAAS file (Kafka's kafka_server_jaas.conf): its KafkaServer section (or <listener>.KafkaServer) lists PLAIN's users.")
SASL_SERVER_MAX_RECEIVE_SIZE: Final[ConfigDef[int]] = ConfigDef("sasl.server.max.receive.size", ConfigType.INT, 524288, "Largest request accepted before a SASL client has authenticated; a larger one closes the connection.", _at_least(1))
CONNECTIONS_MAX_REAUTH_MS: Final[ConfigDef[int]] = ConfigDef("connections.max.reauth.ms", ConfigType.LONG, 0, "KIP-368: a SASL session lasts this long; the client must re-authenticate on the connection before it ends, or it is closed (0: sessions never end).", _at_least(0))
AUTHORIZER_CLASS_NAME: Final[ConfigDef[str]] = ConfigDef("authorizer.class.name", ConfigType.STRING, "", "Turns ACLs on: org.apache.kafka.metadata.authorizer.StandardAuthorizer (or kafka.security.authorizer.AclAuthorizer); empty: every request is allowed.", _one_of("", "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "kafka.security.authorizer.AclAuthorizer"))
SUPER_USERS: Final[ConfigDef[str]] = ConfigDef("super.users", ConfigType.STRING, "", "Principals allowed everything, semicolon-separated: User:admin;User:CN=broker.")
ALLOW_EVERYONE_IF_NO_ACL_FOUND: Final[ConfigDef[bool]] = ConfigDef("allow.everyone.if.no.acl.found", ConfigType.BOOLEAN, False, "Allow a request on a resource that no ACL matches (otherwise denied).")
MESSAGE_MAX_BYTES: Final[ConfigDef[int]] = ConfigDef("message.max.bytes", ConfigType.INT, 1048588, "Largest record batch the broker accepts.", _at_least(0))
SOCKET_REQUEST_MAX_BYTES: Final[ConfigDef[int]] = ConfigDef("socket.request.max.bytes", ConfigType.INT, 104857600, "Largest request frame; a larger one closes the connection.", _at_least(1))
QUEUED_MAX_REQUESTS: Final[ConfigDef[int]] = ConfigDef("queued.max.requests", ConfigType.INT, 500, "Requests a single connection may have in flight before the broker stops reading from it.", _at_least(1))
CONNECTIONS_MAX_IDLE_MS: Final[ConfigDef[int]] = ConfigDef("connections.max.idle.ms", ConfigType.LONG, 600000, "A connection on which nothing has moved for this long (no request in flight) is closed (-1: never).")
LOG_SEGMENT_BYTES: Final[ConfigDef[int]] = ConfigDef("log.segment.bytes", ConfigType.INT, 1073741824, "Segment size before a roll.", _at_least(14))
LOG_ROLL_HOURS: Final[ConfigDef[int]] = ConfigDef("log.roll.hours", ConfigType.INT, 168, "Segment age before a roll, in hours.", _at_least(1))
LOG_ROLL_MS: Final[ConfigDef[int | None]] = ConfigDef("log.roll.ms", ConfigType.LONG, None, "Segment age before a roll; overrides log.roll.hours.")
LOG_RETENTION_HOURS: Final[ConfigDef[int]] = ConfigDef("log.retention.hours", ConfigType.INT, 168, "Retention by age, in hours.")
LOG_RETENTION_MINUTES: Final[ConfigDef[int | None]] = ConfigDef("log.retention.minutes", ConfigType.INT, None, "Retention by age, in minutes; overrides log.retention.hours.")
LOG_RETENTION_MS: Final[ConfigDef[int | None]] = ConfigDef("log.retention.ms", ConfigType.LONG, None, "Retention by age; overrides minutes and hours. -1: no limit.")
LOG_RETENTION_BYTES: Final[ConfigDef[int]] = ConfigDef("log.retention.bytes", ConfigType.LONG, -1, "Retention by partition size. -1: no limit.")
LOG_RETENTION_CHECK_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("log.retention.check.interval.ms", ConfigType.LONG, 300000, "How often retention runs.", _at_least(1))
LOG_CLEANUP_POLICY: Final[ConfigDef[list[str]]] = ConfigDef("log.cleanup.policy", ConfigType.LIST, ["delete"], "Default cleanup policy.", _cleanup_policy)
LOG_INDEX_INTERVAL_BYTES: Final[ConfigDef[int]] = ConfigDef("log.index.interval.bytes", ConfigType.INT, 4096, "Bytes of log between two offset-index entries.", _at_least(0))
LOG_INDEX_SIZE_MAX_BYTES: Final[ConfigDef[int]] = ConfigDef("log.index.size.max.bytes", ConfigType.INT, 10485760, "Largest offset index; the segment rolls when it is full.", _at_least(4))
LOG_MESSAGE_TIMESTAMP_TYPE: Final[ConfigDef[str]] = ConfigDef("log.message.timestamp.type", ConfigType.STRING, "CreateTime", "CreateTime or LogAppendTime.", _one_of("CreateTime", "LogAppendTime"))
LOG_CLEANER_ENABLE: Final[ConfigDef[bool]] = ConfigDef("log.cleaner.enable", ConfigType.BOOLEAN, True, "Run the log cleaner (compaction of cleanup.policy=compact topics, the internal topics included).")
LOG_CLEANER_BACKOFF_MS: Final[ConfigDef[int]] = ConfigDef("log.cleaner.backoff.ms", ConfigType.LONG, 15000, "How long the cleaner sleeps between two passes over the partitions.", _at_least(0))
LOG_CLEANER_MIN_CLEANABLE_RATIO: Final[ConfigDef[float]] = ConfigDef("log.cleaner.min.cleanable.ratio", ConfigType.DOUBLE, 0.5, "A partition is cleaned once its dirty bytes exceed this share of its cleanable bytes.", _between(0.0, 1.0))
LOG_CLEANER_DEDUPE_BUFFER_SIZE: Final[ConfigDef[int]] = ConfigDef("log.cleaner.dedupe.buffer.size", ConfigType.LONG, 134217728, "Memory for the key -> offset map of one cleaning pass; a larger dirty section is cleaned over several passes.", _at_least(1 << 16))
LOG_CLEANER_DELETE_RETENTION_MS: Final[ConfigDef[int]] = ConfigDef("log.cleaner.delete.retention.ms", ConfigType.LONG, 86400000, "How long tombstones survive compaction.")
LOG_CLEANER_MIN_COMPACTION_LAG_MS: Final[ConfigDef[int]] = ConfigDef("log.cleaner.min.compaction.lag.ms", ConfigType.LONG, 0, "Minimum age before a record may be compacted.")
LOG_CLEANER_MAX_COMPACTION_LAG_MS: Final[ConfigDef[int]] = ConfigDef("log.cleaner.max.compaction.lag.ms", ConfigType.LONG, 2**63 - 1, "Maximum time a record may stay uncompacted.", _at_least(1))
MIN_INSYNC_REPLICAS: Final[ConfigDef[int]] = ConfigDef("min.insync.replicas", ConfigType.INT, 1, "Accepted for compatibility; a single broker is always in sync.", _at_least(1))
OFFSETS_TOPIC_NUM_PARTITIONS: Final[ConfigDef[int]] = ConfigDef("offsets.topic.num.partitions", ConfigType.INT, 50, "Partitions of __consumer_offsets.", _at_least(1))
OFFSETS_TOPIC_REPLICATION_FACTOR: Final[ConfigDef[int]] = ConfigDef("offsets.topic.replication.factor", ConfigType.SHORT, 3, "Accepted for compatibility; __consumer_offsets has one replica here.")
OFFSETS_TOPIC_SEGMENT_BYTES: Final[ConfigDef[int]] = ConfigDef("offsets.topic.segment.bytes", ConfigType.INT, 104857600, "Segment size of __consumer_offsets.", _at_least(14))
OFFSETS_RETENTION_MINUTES: Final[ConfigDef[int]] = ConfigDef("offsets.retention.minutes", ConfigType.INT, 10080, "Committed offsets of an empty group are kept this long.", _at_least(1))
OFFSETS_RETENTION_CHECK_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("offsets.retention.check.interval.ms", ConfigType.LONG, 600000, "How often expired offsets are removed.", _at_least(1))
OFFSET_METADATA_MAX_BYTES: Final[ConfigDef[int]] = ConfigDef("offset.metadata.max.bytes", ConfigType.INT, 4096, "Largest metadata string of a committed offset.")
GROUP_INITIAL_REBALANCE_DELAY_MS: Final[ConfigDef[int]] = ConfigDef("group.initial.rebalance.delay.ms", ConfigType.INT, 3000, "How long the first rebalance of an empty group waits for more members.")
GROUP_MIN_SESSION_TIMEOUT_MS: Final[ConfigDef[int]] = ConfigDef("group.min.session.timeout.ms", ConfigType.INT, 6000, "Smallest session timeout a member may ask for.")
GROUP_MAX_SESSION_TIMEOUT_MS: Final[ConfigDef[int]] = ConfigDef("group.max.session.timeout.ms", ConfigType.INT, 1800000, "Largest session timeout a member may ask for.")
GROUP_MAX_SIZE: Final[ConfigDef[int]] = ConfigDef("group.max.size", ConfigType.INT, 2147483647, "Most members a group may have.", _at_least(1))
GROUP_CONSUMER_SESSION_TIMEOUT_MS: Final[ConfigDef[int]] = ConfigDef("group.consumer.session.timeout.ms", ConfigType.INT, 45000, "KIP-848 consumer groups: a member that does not heartbeat for this long is removed.", _at_least(1))
GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("group.consumer.heartbeat.interval.ms", ConfigType.INT, 5000, "KIP-848 consumer groups: how often members are told to heartbeat.", _at_least(1))
GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS: Final[ConfigDef[int]] = ConfigDef("group.consumer.min.session.timeout.ms", ConfigType.INT, 45000, "KIP-848 consumer groups: the smallest group.consumer.session.timeout.ms allowed.", _at_least(1))
GROUP_CONSUMER_MAX_SESSION_TIMEOUT_MS: Final[ConfigDef[int]] = ConfigDef("group.consumer.max.session.timeout.ms", ConfigType.INT, 60000, "KIP-848 consumer groups: the largest group.consumer.session.timeout.ms allowed.", _at_least(1))
GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("group.consumer.min.heartbeat.interval.ms", ConfigType.INT, 5000, "KIP-848 consumer groups: the smallest group.consumer.heartbeat.interval.ms allowed.", _at_least(1))
GROUP_CONSUMER_MAX_HEARTBEAT_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("group.consumer.max.heartbeat.interval.ms", ConfigType.INT, 15000, "KIP-848 consumer groups: the largest group.consumer.heartbeat.interval.ms allowed.", _at_least(1))
GROUP_CONSUMER_MAX_SIZE: Final[ConfigDef[int]] = ConfigDef("group.consumer.max.size", ConfigType.INT, 2147483647, "KIP-848 consumer groups: most members a group may have.", _at_least(1))
GROUP_CONSUMER_ASSIGNORS: Final[ConfigDef[list[str]]] = ConfigDef("group.consumer.assignors", ConfigType.LIST, ["uniform", "range"], "KIP-848 consumer groups: the server-side assignors members may name, the first the default (uniform, range).", _assignor_names)
TRANSACTION_STATE_LOG_NUM_PARTITIONS: Final[ConfigDef[int]] = ConfigDef("transaction.state.log.num.partitions", ConfigType.INT, 50, "Partitions of __transaction_state.", _at_least(1))
TRANSACTION_STATE_LOG_REPLICATION_FACTOR: Final[ConfigDef[int]] = ConfigDef("transaction.state.log.replication.factor", ConfigType.SHORT, 3, "Accepted for compatibility; __transaction_state has one replica here.")
TRANSACTION_STATE_LOG_MIN_ISR: Final[ConfigDef[int]] = ConfigDef("transaction.state.log.min.isr", ConfigType.INT, 2, "Accepted for compatibility.")
TRANSACTION_STATE_LOG_SEGMENT_BYTES: Final[ConfigDef[int]] = ConfigDef("transaction.state.log.segment.bytes", ConfigType.INT, 104857600, "Segment size of __transaction_state.", _at_least(14))
TRANSACTION_MAX_TIMEOUT_MS: Final[ConfigDef[int]] = ConfigDef("transaction.max.timeout.ms", ConfigType.INT, 900000, "Largest transaction.timeout.ms a producer may ask for.", _at_least(1))
TRANSACTIONAL_ID_EXPIRATION_MS: Final[ConfigDef[int]] = ConfigDef("transactional.id.expiration.ms", ConfigType.INT, 604800000, "A transactional id idle this long (and not in a transaction) is forgotten.", _at_least(1))
TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("transaction.abort.timed.out.transaction.cleanup.interval.ms", ConfigType.INT, 10000, "How often transactions past their timeout are aborted.", _at_least(1))
TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("transaction.remove.expired.transaction.cleanup.interval.ms", ConfigType.INT, 3600000, "How often expired transactional ids are removed.", _at_least(1))
TRANSACTION_PARTITION_VERIFICATION_ENABLE: Final[ConfigDef[bool]] = ConfigDef("transaction.partition.verification.enable", ConfigType.BOOLEAN, True, "Refuse transactional produce to a partition not added to the transaction (KIP-890 part 1).")
GROUP_VERSION: Final[ConfigDef[int]] = ConfigDef("group.version", ConfigType.SHORT, 1, "The finalized group.version feature (Kafka's feature level; 1: the KIP-848 consumer group protocol, group.protocol=consumer; 0: classic groups only).", _between(0, 1))
TRANSACTION_VERSION: Final[ConfigDef[int]] = ConfigDef("transaction.version", ConfigType.SHORT, 2, "The finalized transaction.version feature (Kafka's feature level; 2: transactions v2, KIP-890 part 2; 1: flexible __transaction_state records only; 0: neither).", _between(0, 2))
PRODUCER_ID_EXPIRATION_MS: Final[ConfigDef[int]] = ConfigDef("producer.id.expiration.ms", ConfigType.INT, 86400000, "Producer state of an idle producer id is dropped from a partition after this long.", _at_least(1))
PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS: Final[ConfigDef[int]] = ConfigDef("producer.id.expiration.check.interval.ms", ConfigType.INT, 600000, "How often expired producer ids are removed.", _at_least(1))
METRICS_PORT: Final[ConfigDef[int | None]] = ConfigDef("metrics.port", ConfigType.INT, None, "Serve Prometheus metrics at /metrics and the console at / on this port, on the listener's address (0: any free port; unset: off).", _between(0, 65535))
CONSOLE_ALLOW_ABORT: Final[ConfigDef[bool]] = ConfigDef("console.allow.abort", ConfigType.BOOLEAN, False, "Let the console abort a hanging transaction (the same WriteTxnMarkers as onceflow txn abort); read-only otherwise.")

_BROKER_ROWS: list[ConfigDef[Any]] = [
    NODE_ID,
    AUTO_CREATE_TOPICS_ENABLE,
    DELETE_TOPIC_ENABLE,
    NUM_PARTITIONS,
    DEFAULT_REPLICATION_FACTOR,
    LISTENERS,
    ADVERTISED_LISTENERS,
    LISTENER_SECURITY_PROTOCOL_MAP,
    SSL_KEYSTORE_TYPE,
    SSL_KEYSTORE_LOCATION,
    SSL_KEYSTORE_PASSWORD,
    SSL_KEY_PASSWORD,
    SSL_KEYSTORE_CERTIFICATE_CHAIN,
    SSL_KEYSTORE_KEY,
    SSL_TRUSTSTORE_TYPE,
    SSL_TRUSTSTORE_LOCATION,
    SSL_TRUSTSTORE_PASSWORD,
    SSL_TRUSTSTORE_CERTIFICATES,
    SSL_CLIENT_AUTH,
    SSL_ENABLED_PROTOCOLS,
    SSL_CIPHER_SUITES,
    SSL_PRINCIPAL_MAPPING_RULES,
    SASL_ENABLED_MECHANISMS,
    SASL_JAAS_CONFIG,
    JAVA_SECURITY_AUTH_LOGIN_CONFIG,
    SASL_SERVER_MAX_RECEIVE_SIZE,
    CONNECTIONS_MAX_REAUTH_MS,
    AUTHORIZER_CLASS_NAME,
    SUPER_USERS,
    ALLOW_EVERYONE_IF_NO_ACL_FOUND,
    MESSAGE_MAX_BYTES,
    SOCKET_REQUEST_MAX_BYTES,
    QUEUED_MAX_REQUESTS,
    CONNECTIONS_MAX_IDLE_MS,
    LOG_SEGMENT_BYTES,
    LOG_ROLL_HOURS,
    LOG_ROLL_MS,
    LOG_RETENTION_HOURS,
    LOG_RETENTION_MINUTES,
    LOG_RETENTION_MS,
    LOG_RETENTION_BYTES,
    LOG_RETENTION_CHECK_INTERVAL_MS,
    LOG_CLEANUP_POLICY,
    LOG_INDEX_INTERVAL_BYTES,
    LOG_INDEX_SIZE_MAX_BYTES,
    LOG_MESSAGE_TIMESTAMP_TYPE,
    LOG_CLEANER_ENABLE,
    LOG_CLEANER_BACKOFF_MS,
    LOG_CLEANER_MIN_CLEANABLE_RATIO,
    LOG_CLEANER_DEDUPE_BUFFER_SIZE,
    LOG_CLEANER_DELETE_RETENTION_MS,
    LOG_CLEANER_MIN_COMPACTION_LAG_MS,
    LOG_CLEANER_MAX_COMPACTION_LAG_MS,
    MIN_INSYNC_REPLICAS,
    OFFSETS_TOPIC_NUM_PARTITIONS,
    OFFSETS_TOPIC_REPLICATION_FACTOR,
    OFFSETS_TOPIC_SEGMENT_BYTES,
    OFFSETS_RETENTION_MINUTES,
    OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    OFFSET_METADATA_MAX_BYTES,
    GROUP_INITIAL_REBALANCE_DELAY_MS,
    GROUP_MIN_SESSION_TIMEOUT_MS,
    GROUP_MAX_SESSION_TIMEOUT_MS,
    GROUP_MAX_SIZE,
    GROUP_CONSUMER_SESSION_TIMEOUT_MS,
    GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS,
    GROUP_CONSUMER_MAX_SESSION_TIMEOUT_MS,
    GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_MAX_HEARTBEAT_INTERVAL_MS,
    GROUP_CONSUMER_MAX_SIZE,
    GROUP_CONSUMER_ASSIGNORS,
    TRANSACTION_STATE_LOG_NUM_PARTITIONS,
    TRANSACTION_STATE_LOG_REPLICATION_FACTOR,
    TRANSACTION_STATE_LOG_MIN_ISR,
    TRANSACTION_STATE_LOG_SEGMENT_BYTES,
    TRANSACTION_MAX_TIMEOUT_MS,
    TRANSACTIONAL_ID_EXPIRATION_MS,
    TRANSACTION_ABORT_TIMED_OUT_TRANSACTION_CLEANUP_INTERVAL_MS,
    TRANSACTION_REMOVE_EXPIRED_TRANSACTION_CLEANUP_INTERVAL_MS,
    TRANSACTION_PARTITION_VERIFICATION_ENABLE,
    TRANSACTION_VERSION,
    GROUP_VERSION,
    PRODUCER_ID_EXPIRATION_MS,
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    METRICS_PORT,
    CONSOLE_ALLOW_ABORT,
]

_TOPIC_ROWS: list[ConfigDef[Any]] = [
    ConfigDef("cleanup.policy", ConfigType.LIST, None, "delete, compact, or both.", _cleanup_policy, "log.cleanup.policy"),
    ConfigDef("retention.ms", ConfigType.LONG, None, "Retention by age; -1: no limit.", _at_least(-1), "log.retention.ms"),
    ConfigDef("retention.bytes", ConfigType.LONG, None, "Retention by size; -1: no limit.", None, "log.retention.bytes"),
    ConfigDef("segment.bytes", ConfigType.INT, None, "Segment size before a roll.", _at_least(14), "log.segment.bytes"),
    ConfigDef("segment.ms", ConfigType.LONG, None, "Segment age before a roll.", _at_least(1), "log.roll.ms"),
    ConfigDef("segment.index.bytes", ConfigType.INT, None, "Largest offset index of a segment.", _at_least(4), "log.index.size.max.bytes"),
    ConfigDef("index.interval.bytes", ConfigType.INT, None, "Bytes of log between two index entries.", _at_least(0), "log.index.interval.bytes"),
    ConfigDef("max.message.bytes", ConfigType.INT, None, "Largest record batch accepted.", _at_least(0), "message.max.bytes"),
    ConfigDef("message.timestamp.type", ConfigType.STRING, None, "CreateTime or LogAppendTime.", _one_of("CreateTime", "LogAppendTime"), "log.message.timestamp.type"),
    ConfigDef("delete.retention.ms", ConfigType.LONG, None, "How long tombstones survive compaction.", _at_least(0), "log.cleaner.delete.retention.ms"),
    ConfigDef("min.compaction.lag.ms", ConfigType.LONG, None, "Minimum age before a record may be compacted.", _at_least(0), "log.cleaner.min.compaction.lag.ms"),
    ConfigDef("max.compaction.lag.ms", ConfigType.LONG, None, "Maximum time a record may stay uncompacted.", _at_least(1), "log.cleaner.max.compaction.lag.ms"),
    ConfigDef("min.cleanable.dirty.ratio", ConfigType.DOUBLE, None, "Dirty share of the cleanable bytes above which the partition is cleaned.", _between(0.0, 1.0), "log.cleaner.min.cleanable.ratio"),
    ConfigDef("min.insync.replicas", ConfigType.INT, None, "Accepted for compatibility.", _at_least(1), "min.insync.replicas"),
]
# fmt: on

BROKER_CONFIGS: dict[str, ConfigDef[Any]] = {row.name: row for row in _BROKER_ROWS}
TOPIC_CONFIGS: dict[str, ConfigDef[Any]] = {row.name: row for row in _TOPIC_ROWS}


def parse_properties(text: str) -> dict[str, str]:
    """Java ``.properties`` text as ``java.util.Properties.load`` reads it (how Kafka reads
    ``server.properties``): ``key=value``, ``key: value`` or ``key value``; ``#``/``!`` comments;
    backslash escapes (``C:\\\\kafka``, ``a\\=b``, ``\\u0041``); continuation lines, their leading
    whitespace dropped; the last of a repeated key wins.  The ``javaproperties`` library does the
    parsing.  Raises ConfigError on a malformed ``\\u`` escape (Java: IllegalArgumentException)."""
    try:
        return dict(javaproperties.loads(text))
    except javaproperties.InvalidUEscapeError as exc:
        raise ConfigError(f"invalid \\u escape {exc.escape!r}") from None


#: A ``server.properties`` larger than this is not one (and ``--config /dev/zero`` must end).
PROPERTIES_FILE_MAX_BYTES = 16 << 20
#: Bytes no hand-written .properties file holds: C0 controls other than tab, LF, FF and CR.
_BINARY_BYTE = re.compile(rb"[\x00-\x08\x0b\x0e-\x1f]")


def read_properties_file(path: str | Path) -> dict[str, str]:
    """A ``server.properties`` file, parsed by ``parse_properties``.  Its bytes are UTF-8, or
    ISO-8859-1 (what ``Properties.load`` assumes) where they are not.  A file that cannot be read,
    or that is not text (NUL or other control bytes: a binary file, UTF-16, a wrong path), raises
    ConfigError: one line naming the file, so ``onceflow broker`` refuses it before starting."""
    name = str(path)
    try:
        with open(path, "rb") as f:
            data = f.read(PROPERTIES_FILE_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read {name}: {exc.strerror or exc}") from None
    binary = _BINARY_BYTE.search(data)
    if binary is not None:
        at, byte = binary.start(), data[binary.start()]
        what = f"NUL bytes (the first at byte {at})" if byte == 0 else f"control byte 0x{byte:02x} at byte {at}"
        raise ConfigError(f"not a .properties file: {name} contains {what}, so it is binary, not text")
    if len(data) > PROPERTIES_FILE_MAX_BYTES:
        raise ConfigError(f"not a .properties file: {name} is larger than {PROPERTIES_FILE_MAX_BYTES >> 20} MiB")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        return parse_properties(text)
    except ConfigError as exc:
        raise ConfigError(f"{name}: {exc}") from None


#: Families Kafka reads by prefix rather than by name: config providers
#: (``config.providers.<name>.class``, ``...param.<p>``) and the remote-storage plugins' own
#: settings under the default ``remote.log.storage.manager.impl.prefix`` and
#: ``remote.log.metadata.manager.impl.prefix``.
_KAFKA_PREFIXES = ("config.providers.", "rsm.config.", "rlmm.config.")


@functools.cache
def kafka_broker_config_names() -> frozenset[str]:
    """Apache Kafka's broker configuration names (``kafka_broker_configs.txt``)."""
    text = resources.files("onceflow").joinpath("kafka_broker_configs.txt").read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#"))


@functools.cache
def _known_names() -> tuple[str, ...]:
    """What a typo is compared with: Onceflow's names and Kafka's."""
    return tuple(sorted(kafka_broker_config_names() | BROKER_CONFIGS.keys()))


def _kafka_knows(key: str) -> bool:
    return key in kafka_broker_config_names() or key.startswith(_KAFKA_PREFIXES)


def _per_mechanism(rest: str) -> str | None:
    """``<mechanism>.<key>`` after a listener prefix, for the keys Kafka reads per SASL mechanism
    (``scram-sha-256.sasl.jaas.config``, ``plain.connections.max.reauth.ms``): ``<key>``, else None."""
    _, dot, key = rest.partition(".")
    if dot and (key.startswith("sasl.") or key == CONNECTIONS_MAX_REAUTH_MS.name) and _kafka_knows(key):
        return key
    return None


def unknown_config_message(key: str) -> str:
    """The warning for a key neither Onceflow nor Kafka knows, in the words of Kafka's own warning
    for a key it does not know (``AbstractConfig.logUnused`` in older Kafka clients; Kafka 4's
    broker says nothing at all), and the closest known name when one is close."""
    name, prefix = key, ""
    if key.startswith(LISTENER_PREFIX):
        listener, _, name = key[len(LISTENER_PREFIX):].partition(".")
        prefix = f"{LISTENER_PREFIX}{listener}."
    guess = difflib.get_close_matches(name, _known_names(), n=1, cutoff=0.8)
    if not guess and prefix and "." in name:  # listener.name.l.scram-sha-256.sasl.jass.config
        mechanism, _, tail = name.partition(".")
        guess = [f"{mechanism}.{g}" for g in difflib.get_close_matches(tail, _known_names(), n=1, cutoff=0.8)]
    hint = f" (did you mean {prefix}{guess[0]}?)" if guess else "."
    return f"The configuration '{key}' was supplied but isn't a known config{hint}"


class BrokerConfig:
    """The broker's effective configuration (defaults < properties file < overrides)."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, Any] = {name: row.default for name, row in BROKER_CONFIGS.items()}
        self._explicit: set[str] = set()
        #: ``listener.name.<listener>.<key>`` settings: listener name (upper case) -> key -> value.
        self._per_listener: dict[str, dict[str, Any]] = {}
        #: Keys neither Onceflow nor Kafka knows, each with the WARNING it was logged with.
        self.unknown: dict[str, str] = {}
        self.update(overrides or {})

    @classmethod
    def load(cls, properties_file: str | Path | None = None, overrides: Iterable[str] = ()) -> BrokerConfig:
        settings: dict[str, Any] = {}
        if properties_file is not None:
            settings.update(read_properties_file(properties_file))
        for item in overrides:
            key, sep, value = item.partition("=")
            if not sep:
                raise ConfigError(f"expected key=value, got {item!r}")
            settings[key.strip()] = value.strip()
        return cls(settings)

    def update(self, settings: Mapping[str, Any]) -> None:
        """Apply ``settings``; on a ConfigError nothing changes.  A key Kafka has and Onceflow does
        not use is ignored with an INFO line, a key neither knows with a WARNING (``unknown``)."""
        before, explicit, unknown = dict(self._values), set(self._explicit), dict(self.unknown)
        per_listener = {name: dict(values) for name, values in self._per_listener.items()}
        try:
            for key, raw in settings.items():
                if key.startswith(LISTENER_PREFIX):
                    self._set_for_listener(key, raw)
                    continue
                row = BROKER_CONFIGS.get(key)
                if row is None:
                    self._ignore(key, _kafka_knows(key))
                    continue
                self._values[key] = row.parse(raw)
                self._explicit.add(key)
            self._check_bounds()
        except ConfigError:
            self._values, self._explicit, self._per_listener, self.unknown = before, explicit, per_listener, unknown
            raise

    def _ignore(self, key: str, kafka_knows: bool) -> None:
        if kafka_knows:
            log.info("ignoring configuration %s: Onceflow does not use it", key)
            return
        message = unknown_config_message(key)
        log.warning("%s", message)
        self.unknown[key] = message

    def _set_for_listener(self, key: str, raw: Any) -> None:
        """``listener.name.<listener>.<key>``: a broker key for one listener, or a mechanism's
        ``<mechanism>.sasl.jaas.config`` (``listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config``)."""
        listener, dot, rest = key[len(LISTENER_PREFIX):].partition(".")
        if not (dot and listener and rest):
            raise ConfigError(f"Invalid configuration {key}: expected listener.name.<listener>.<config>")
        row = BROKER_CONFIGS.get(rest)
        if row is None and rest.endswith("." + SASL_JAAS_CONFIG.name):
            row = SASL_JAAS_CONFIG
        if row is None:
            self._ignore(key, _kafka_knows(rest) or _per_mechanism(rest) is not None)
            return
        self._per_listener.setdefault(listener.upper(), {})[rest] = row.parse(raw)

    def for_listener(self, listener: str, key: ConfigDef[T] | str) -> T | Any:
        """A setting as one listener sees it: its ``listener.name.<listener>.`` value, else the
        broker-wide one (Kafka's rule for the ssl.* and sasl.* keys)."""
        name = key if isinstance(key, str) else key.name
        values = self._per_listener.get(listener.upper(), {})
        if name in values:
            return values[name]
        return self._values[name] if name in self._values else None

    def is_sensitive(self, key: str) -> bool:
        row = BROKER_CONFIGS.get(key)
        return row is not None and row.type is ConfigType.PASSWORD

    def _check_bounds(self) -> None:
        """Kafka's GroupCoordinatorConfig checks: each KIP-848 default within its bounds."""
        for value, low, high in ((GROUP_CONSUMER_SESSION_TIMEOUT_MS, GROUP_CONSUMER_MIN_SESSION_TIMEOUT_MS,
                                  GROUP_CONSUMER_MAX_SESSION_TIMEOUT_MS),
                                 (GROUP_CONSUMER_HEARTBEAT_INTERVAL_MS, GROUP_CONSUMER_MIN_HEARTBEAT_INTERVAL_MS,
                                  GROUP_CONSUMER_MAX_HEARTBEAT_INTERVAL_MS)):
            if self[high] < self[low]:
                raise ConfigError(f"{high.name} must be greater than or equal to {low.name}")
            if self[value] < self[low]:
                raise ConfigError(f"{value.name} must be greater than or equal to {low.name}")
            if self[value] > self[high]:
                raise ConfigError(f"{value.name} must be less than or equal to {high.name}")

    @overload
    def __getitem__(self, key: ConfigDef[T]) -> T: ...

    @overload
    def __getitem__(self, key: str) -> Any: ...

    def __getitem__(self, key: ConfigDef[Any] | str) -> Any:
        """A setting's value: typed by its ``ConfigDef`` constant, or ``Any`` by name (for
        values named at run time: server.properties, DescribeConfigs)."""
        return self._values[key if isinstance(key, str) else key.name]

    def is_default(self, key: str) -> bool:
        return key not in self._explicit

    def items(self) -> list[tuple[str, Any]]:
        return sorted(self._values.items())

    # Derived values, resolved the way Kafka's KafkaConfig resolves them.
    @property
    def log_retention_ms(self) -> int:
        if self._values["log.retention.ms"] is not None:
            return int(self._values["log.retention.ms"])
        if self._values["log.retention.minutes"] is not None:
            return int(self._values["log.retention.minutes"]) * 60_000
        return int(self._values["log.retention.hours"]) * _MS_PER_HOUR

    @property
    def log_roll_ms(self) -> int:
        if self._values["log.roll.ms"] is not None:
            return int(self._values["log.roll.ms"])
        return int(self._values["log.roll.hours"]) * _MS_PER_HOUR

    def topic_default(self, topic_key: str) -> Any:
        """The broker-wide value a topic-level key falls back to."""
        synonym = TOPIC_CONFIGS[topic_key].synonym
        if synonym == "log.retention.ms":
            return self.log_retention_ms
        if synonym == "log.roll.ms":
            return self.log_roll_ms
        assert synonym is not None
        return self._values[synonym]


def validate_topic_configs(configs: Mapping[str, Any]) -> dict[str, Any]:
    """Parse topic-level overrides; unknown keys and bad values raise ConfigError."""
    parsed: dict[str, Any] = {}
    for key, raw in configs.items():
        row = TOPIC_CONFIGS.get(key)
        if row is None:
            raise ConfigError(f"Unknown topic config name: {key}")
        if raw is None:
            raise ConfigError(f"Null value not supported for topic config {key}")
        parsed[key] = row.parse(raw)
    return parsed


def render_value(value: Any) -> str | None:
    """A config value as Kafka prints it in DescribeConfigs."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """A topic's effective settings: its overrides over the broker defaults."""

    overrides: Mapping[str, Any]
    broker: BrokerConfig

    def __getitem__(self, key: str) -> Any:
        if key in self.overrides:
            return self.overrides[key]
        return self.broker.topic_default(key)

    @property
    def segment_bytes(self) -> int:
        return int(self["segment.bytes"])

    @property
    def segment_ms(self) -> int:
        return int(self["segment.ms"])

    @property
    def retention_ms(self) -> int:
        return int(self["retention.ms"])

    @property
    def retention_bytes(self) -> int:
        return int(self["retention.bytes"])

    @property
    def max_message_bytes(self) -> int:
        return int(self["max.message.bytes"])

    @property
    def index_interval_bytes(self) -> int:
        return int(self["index.interval.bytes"])

    @property
    def segment_index_bytes(self) -> int:
        return int(self["segment.index.bytes"])

    @property
    def log_append_time(self) -> bool:
        return bool(self["message.timestamp.type"] == "LogAppendTime")

    @property
    def delete_enabled(self) -> bool:
        return "delete" in self["cleanup.policy"]

    @property
    def compact_enabled(self) -> bool:
        return "compact" in self["cleanup.policy"]

    @property
    def min_cleanable_ratio(self) -> float:
        return float(self["min.cleanable.dirty.ratio"])

    @property
    def min_compaction_lag_ms(self) -> int:
        return int(self["min.compaction.lag.ms"])

    @property
    def max_compaction_lag_ms(self) -> int:
        return int(self["max.compaction.lag.ms"])

    @property
    def delete_retention_ms(self) -> int:
        return int(self["delete.retention.ms"])
