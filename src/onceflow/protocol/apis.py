"""The APIs this broker serves, and the versions of each.

Theory of operation: ``SUPPORTED`` is the one table of API keys and version
ranges.  ApiVersions answers from it, ``framing.parse_request`` refuses
anything outside it, and the broker checks at start-up that every key in it
has a handler.  The floors are Kafka 4's (KIP-896 removed older versions;
kio carries no schemas below them).  The ceilings are the newest versions
whose semantics this broker implements fully: Produce stops at 12 (13 names
topics by id, KIP-516, not served yet); Produce 12, TxnOffsetCommit 5 and
EndTxn 5 are transactions v2's (KIP-890 part 2: the first two add their
partition to the transaction, the last bumps the epoch), which a client uses
when ApiVersions finalizes ``transaction.version`` 2; AddPartitionsToTxn
stops at 3, the last client version (v4+ is broker-to-broker verification,
done in-process here).  After a SaslHandshake v0 the SASL tokens come as
bare frames without Kafka's header (``server.KafkaProtocol`` passes them to
the connection's authenticator); v1 carries them in SaslAuthenticate.  A client simply negotiates the highest version both
sides know.

``build(cls, **fields)`` constructs a kio entity of any version from the
fields that version has, so one handler can answer every version of its API:
fields the version lacks are dropped, fields it has must be given (or have a
schema default).
"""

from __future__ import annotations

import dataclasses
from functools import cache
from types import ModuleType
from typing import Any

from kio.index import load_payload_module
from kio.schema.index import api_key_map
from kio.static.constants import EntityType

PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
SASL_HANDSHAKE = 17
API_VERSIONS = 18
CREATE_TOPICS = 19
DELETE_TOPICS = 20
DELETE_RECORDS = 21
INIT_PRODUCER_ID = 22
ADD_PARTITIONS_TO_TXN = 24
ADD_OFFSETS_TO_TXN = 25
END_TXN = 26
WRITE_TXN_MARKERS = 27
TXN_OFFSET_COMMIT = 28
DESCRIBE_ACLS = 29
CREATE_ACLS = 30
DELETE_ACLS = 31
DESCRIBE_CONFIGS = 32
ALTER_CONFIGS = 33
SASL_AUTHENTICATE = 36
CREATE_PARTITIONS = 37
DELETE_GROUPS = 42
INCREMENTAL_ALTER_CONFIGS = 44
OFFSET_DELETE = 47
DESCRIBE_CLIENT_QUOTAS = 48
DESCRIBE_USER_SCRAM_CREDENTIALS = 50
ALTER_USER_SCRAM_CREDENTIALS = 51
DESCRIBE_CLUSTER = 60
DESCRIBE_PRODUCERS = 61
DESCRIBE_TRANSACTIONS = 65
LIST_TRANSACTIONS = 66
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
DESCRIBE_TOPIC_PARTITIONS = 75

#: The first versions of a transactions-v2 client (KIP-890 part 2): Produce adds its partitions
#: to the transaction itself, TxnOffsetCommit its group, EndTxn bumps the epoch.
PRODUCE_V2, TXN_OFFSET_COMMIT_V2, END_TXN_V2 = 12, 5, 5

#: api_key -> (min_version, max_version)
SUPPORTED: dict[int, tuple[int, int]] = {
    PRODUCE: (3, 13),
    FETCH: (4, 16),
    LIST_OFFSETS: (1, 8),
    METADATA: (0, 12),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 5),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 6),
    LIST_GROUPS: (0, 5),
    SASL_HANDSHAKE: (0, 1),
    API_VERSIONS: (0, 4),
    SASL_AUTHENTICATE: (0, 2),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    DELETE_RECORDS: (0, 2),
    DESCRIBE_CONFIGS: (1, 4),
    ALTER_CONFIGS: (0, 2),
    CREATE_PARTITIONS: (0, 3),
    DELETE_GROUPS: (0, 2),
    INCREMENTAL_ALTER_CONFIGS: (0, 1),
    OFFSET_DELETE: (0, 0),
    DESCRIBE_CLIENT_QUOTAS: (0, 1),
    DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    DESCRIBE_CLUSTER: (0, 1),
    INIT_PRODUCER_ID: (0, 5),
    ADD_PARTITIONS_TO_TXN: (0, 3),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 5),
    WRITE_TXN_MARKERS: (1, 1),
    TXN_OFFSET_COMMIT: (0, 5),
    DESCRIBE_ACLS: (1, 3),
    CREATE_ACLS: (1, 3),
    DELETE_ACLS: (1, 3),
    DESCRIBE_PRODUCERS: (0, 0),
    DESCRIBE_TRANSACTIONS: (0, 0),
    LIST_TRANSACTIONS: (0, 1),
    CONSUMER_GROUP_HEARTBEAT: (0, 1),
    CONSUMER_GROUP_DESCRIBE: (0, 1),
    DESCRIBE_TOPIC_PARTITIONS: (0, 0),
}


#: Where ApiVersions advertises a lower floor than ``SUPPORTED`` serves.  Kafka 4 advertises
#: Produce from v0 though it refuses v0-2 as we do (the connection is closed): librdkafka
#: versions that test for v0 otherwise send gzip, snappy and lz4 batches uncompressed
#: (KAFKA-18659, confluentinc/librdkafka#4956).
ADVERTISED_MIN: dict[int, int] = {PRODUCE: 0}


def advertised(api_key: int) -> tuple[int, int]:
    """The version range ApiVersions advertises for a served API."""
    low, high = SUPPORTED[api_key]
    return ADVERTISED_MIN.get(api_key, low), high


def api_name(api_key: int) -> str:
    name = api_key_map.get(api_key)
    if name is None:
        return f"api_key_{api_key}"
    return "".join(part.capitalize() for part in name.split("_"))


def is_supported(api_key: int, api_version: int) -> bool:
    bounds = SUPPORTED.get(api_key)
    return bounds is not None and bounds[0] <= api_version <= bounds[1]


def max_version(api_key: int) -> int:
    return SUPPORTED[api_key][1]


@cache
def response_module(api_key: int, version: int) -> ModuleType:
    """The kio module holding the response entities of one API version."""
    return load_payload_module(api_key, version, EntityType.response)


@cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def build(cls: type, **fields: Any) -> Any:
    """A ``cls`` instance from the subset of ``fields`` that ``cls`` declares."""
    names = _field_names(cls)
    return cls(**{k: v for k, v in fields.items() if k in names})


def has_field(entity: Any, name: str) -> bool:
    cls: type = type(entity)
    return name in _field_names(cls)
