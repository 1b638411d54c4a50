"""Topic administration: CreateTopics, DeleteTopics, CreatePartitions and configs.

Validation follows Kafka's controller: names (``Topic.validate``),
partition counts, replication factor (only 1 exists here:
INVALID_REPLICATION_FACTOR otherwise), manual assignments (every replica
list must be exactly this broker), and topic configs (INVALID_CONFIG for an
unknown key or a bad value).  ``validate_only`` runs every check and changes
nothing.  DescribeConfigs reports each topic config's effective value and
where it comes from (a topic override, a broker setting, or the default),
with synonyms when asked, as Kafka does.  Only topic configs can be altered;
broker configs are static (set in ``server.properties`` or with ``-o``).

ACLs, as a KRaft Kafka checks them (``ControllerApis``, to which a broker forwards
these, and ``ConfigHelper`` for DescribeConfigs), before anything changes:
CreateTopics needs CREATE on the cluster or on each topic (TOPIC_AUTHORIZATION_FAILED,
"Authorization failed."), and a created topic's configs are shown only with
DESCRIBE_CONFIGS on it (otherwise ``topic_config_error_code`` says
TOPIC_AUTHORIZATION_FAILED and no configs, counts or factor are given); DeleteTopics
needs DELETE on the cluster, or DESCRIBE and DELETE on each topic -- one not
describable is refused before whether it exists is said, and one named by id is
answered without its name unless describable; CreatePartitions needs ALTER on each
topic; DescribeConfigs DESCRIBE_CONFIGS and (Incremental)AlterConfigs ALTER_CONFIGS on
the topic, or on the cluster for the broker's configs (CLUSTER_AUTHORIZATION_FAILED),
or on the group; IncrementalAlterConfigs of broker loggers needs CLUSTER_ACTION.
"""

from __future__ import annotations

import logging
from typing import Any

from ...config import BROKER_CONFIGS, DELETE_TOPIC_ENABLE, NUM_PARTITIONS, TOPIC_CONFIGS, ConfigError, ConfigType, render_value, validate_topic_configs
from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...security.authorizer import AclOperation, ResourceType
from ..partitions import MAX_PARTITIONS
from .authz import authorize, authorize_cluster, authorized_names
from .common import NO_THROTTLE, Request, build, responses
from .context import BrokerContext, Connection, Handler
from .metadata import ZERO_UUID

log = logging.getLogger(__name__)

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

# DescribeConfigs config_source values
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

# DescribeConfigs config_type values (v3+)
_CONFIG_TYPE_CODES = {
    ConfigType.BOOLEAN: 1,
    ConfigType.STRING: 2,
    ConfigType.INT: 3,
    ConfigType.SHORT: 4,
    ConfigType.LONG: 5,
    ConfigType.DOUBLE: 6,
    ConfigType.LIST: 7,
    ConfigType.PASSWORD: 9,
}

# IncrementalAlterConfigs operations
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _replication_error(factor: int) -> str | None:
    if factor in (-1, 1):
        return None
    return f"Replication factor: {factor} larger than available brokers: 1." if factor > 1 else \
        "Replication factor must be larger than 0, or -1 to use the default value."


# -- CreateTopics -------------------------------------------------------------


def handle_create_topics(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    results = []
    seen: dict[str, int] = {}
    for t in body.topics:
        seen[t.name] = seen.get(t.name, 0) + 1
    creatable = describable = None  # None: every topic (no authorizer)
    if broker.authorizer is not None:
        unique = [name for name, count in seen.items() if count == 1]
        creatable = (set(unique) if authorize_cluster(broker, conn, AclOperation.CREATE, log_denied=False)
                     else authorized_names(broker, conn, AclOperation.CREATE, ResourceType.TOPIC, unique))
        describable = authorized_names(broker, conn, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, unique,
                                       log_denied=False)
    for t in body.topics:
        error: ErrorCode
        message: str | None
        topic: Any
        if creatable is not None and seen[t.name] == 1 and t.name not in creatable:
            error, message, topic = ErrorCode.topic_authorization_failed, "Authorization failed.", None
        else:
            error, message, topic = _create_one(broker, t, body.validate_only, seen[t.name] > 1)
        if error is not ErrorCode.none:
            log.info("CreateTopics %s from %s: %s (%s)", t.name, conn.peer, error.name, message)
        fields: dict[str, Any] = {"name": t.name, "topic_id": ZERO_UUID, "error_code": error, "error_message": message,
                                  "num_partitions": -1, "replication_factor": -1, "configs": None}
        if error is ErrorCode.none:
            num_partitions, overrides = topic
            if describable is None or t.name in describable:
                fields.update(num_partitions=num_partitions, replication_factor=1,
                              configs=_creatable_configs(m, broker, overrides))
            else:  # created, but its configs are not the principal's to see (Kafka's ReplicationControlManager)
                fields.update(topic_config_error_code=ErrorCode.topic_authorization_failed,
                              configs=() if hasattr(m, "CreatableTopicConfigs") else None)
            if not body.validate_only:
                fields["topic_id"] = broker.registry.topics[t.name].topic_id
        results.append(build(m.CreatableTopicResult, **fields))
    return build(m.CreateTopicsResponse, throttle_time=NO_THROTTLE, topics=tuple(results))


def _create_one(broker: BrokerContext, t: Any, validate_only: bool, duplicated: bool) -> tuple[ErrorCode, str | None, Any]:
    if duplicated:
        return ErrorCode.invalid_request, "Duplicate topic name.", None
    num_partitions = t.num_partitions
    if t.assignments:
        if num_partitions != -1 or t.replication_factor != -1:
            return ErrorCode.invalid_request, "Both numPartitions or replicationFactor and replicasAssignments were set.", None
        indexes = sorted(a.partition_index for a in t.assignments)
        if indexes != list(range(len(indexes))):
            return ErrorCode.invalid_replica_assignment, "Partitions should be numbered 0 to N-1 without gaps.", None
        for a in t.assignments:
            if list(a.broker_ids) != [broker.node_id]:
                return ErrorCode.invalid_replica_assignment, f"Replica assignment {list(a.broker_ids)} must be [{broker.node_id}] on a single broker.", None
        num_partitions = len(indexes)
    else:
        if num_partitions == -1:
            num_partitions = broker.config[NUM_PARTITIONS]
        reason = _replication_error(t.replication_factor)
        if reason:
            return ErrorCode.invalid_replication_factor, reason, None
        if num_partitions <= 0:
            return ErrorCode.invalid_partitions, "Number of partitions was set to an invalid non-positive value.", None
    configs = {c.name: c.value for c in t.configs}
    error, message, overrides = broker.registry.check_new_topic(t.name, num_partitions, configs)
    if error is not ErrorCode.none:
        return error, message, None
    if not validate_only:
        try:
            broker.create_topic(t.name, num_partitions, overrides)
        except OSError as exc:
            return _storage_error(f"creating topic {t.name}", exc), f"The topic could not be created: {exc}", None
    return ErrorCode.none, None, (num_partitions, overrides)


def _storage_error(doing: str, exc: OSError) -> ErrorCode:
    """A metadata change the disk refused (e.g. full): nothing changed; logged once."""
    log.error("%s failed: %s", doing, exc)
    return ErrorCode.kafka_storage_error


def _creatable_configs(m: Any, broker: BrokerContext, overrides: dict[str, Any]) -> tuple[Any, ...] | None:
    if not hasattr(m, "CreatableTopicConfigs"):  # CreateTopics v4 and older report no configs
        return None
    out = []
    for key in TOPIC_CONFIGS:
        value, source = _topic_value(broker, overrides, key)
        out.append(build(m.CreatableTopicConfigs, name=key, value=render_value(value), read_only=False,
                         config_source=source, is_sensitive=False))
    return tuple(out)


def _topic_value(broker: BrokerContext, overrides: dict[str, Any], key: str) -> tuple[Any, int]:
    if key in overrides:
        return overrides[key], SOURCE_DYNAMIC_TOPIC
    synonym = TOPIC_CONFIGS[key].synonym
    value = broker.config.topic_default(key)
    source = SOURCE_DEFAULT if synonym is None or broker.config.is_default(synonym) else SOURCE_STATIC_BROKER
    return value, source


# -- DeleteTopics -------------------------------------------------------------


def handle_delete_topics(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    registry = broker.registry
    if request.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    else:
        wanted = [(name, None) for name in body.topic_names]
    results = []
    describable = deletable = None  # None: every topic (no authorizer)
    if broker.authorizer is not None and not authorize_cluster(broker, conn, AclOperation.DELETE, log_denied=False):
        names = {name for name, _ in wanted if name is not None}
        names |= {t.name for _, topic_id in wanted if topic_id is not None and (t := registry.by_id.get(topic_id)) is not None}
        describable = authorized_names(broker, conn, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
        deletable = authorized_names(broker, conn, AclOperation.DELETE, ResourceType.TOPIC, names)
    for name, topic_id in wanted:
        by_id = name is None and topic_id is not None and topic_id != ZERO_UUID
        if by_id:
            topic = registry.by_id.get(topic_id)
            missing = ErrorCode.unknown_topic_id
        else:
            topic = registry.topics.get(name) if name is not None else None
            missing = ErrorCode.unknown_topic_or_partition
        error, message = ErrorCode.none, None
        if deletable is not None and describable is not None and (refused := _delete_refusal(
                name, topic.name if by_id and topic is not None else None, by_id, describable, deletable)) is not None:
            error, shown = ErrorCode.topic_authorization_failed, refused[0]
            log.info("DeleteTopics %s from %s: %s", name or topic_id, conn.peer, error.name)
            results.append(build(m.DeletableTopicResult, name=shown, topic_id=topic_id or ZERO_UUID, error_code=error,
                                 error_message=None))
            continue
        if topic is None:
            error = missing
        elif not broker.config[DELETE_TOPIC_ENABLE]:
            error, message = ErrorCode.topic_deletion_disabled, "Topic deletion is disabled."
        elif topic.internal:
            error, message = ErrorCode.invalid_topic_exception, f"Topic {topic.name} is internal and cannot be deleted."
        else:
            try:
                broker.delete_topic(topic.name)
            except OSError as exc:
                error, message = _storage_error(f"deleting topic {topic.name}", exc), f"The topic could not be deleted: {exc}"
        if error is not ErrorCode.none:
            log.info("DeleteTopics %s from %s: %s", name or topic_id, conn.peer, error.name)
        results.append(build(m.DeletableTopicResult, name=topic.name if topic else name,
                             topic_id=topic.topic_id if topic else (topic_id or ZERO_UUID),
                             error_code=error, error_message=message))
    return build(m.DeleteTopicsResponse, throttle_time=NO_THROTTLE, responses=tuple(results))


def _delete_refusal(name: str | None, resolved: str | None, by_id: bool, describable: set[str],
                    deletable: set[str]) -> tuple[str | None] | None:
    """Kafka's ``ControllerApis.deleteTopics``: None if the topic may go on, else the name its
    TOPIC_AUTHORIZATION_FAILED answer shows.  By name: refused unless describable (before its
    existence is looked at) and, once known to exist, deletable.  By id: an unknown id goes on (to
    UNKNOWN_TOPIC_ID); a known one not deletable is refused, named only if describable."""
    if by_id:
        if resolved is None or resolved in deletable:
            return None
        return (resolved if resolved in describable else None,)
    if name is None:
        return None
    if name not in describable:
        return (name,)
    if name in deletable:
        return None
    return (name,)


# -- CreatePartitions ---------------------------------------------------------


def handle_create_partitions(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    results = []
    alterable = None if broker.authorizer is None else authorized_names(
        broker, conn, AclOperation.ALTER, ResourceType.TOPIC, (t.name for t in body.topics))
    for t in body.topics:
        topic = broker.registry.topics.get(t.name)
        error, message = ErrorCode.none, None
        if alterable is not None and t.name not in alterable:
            error = ErrorCode.topic_authorization_failed  # ALTER on the topic (ControllerApis.createPartitions)
        elif topic is None:
            error, message = ErrorCode.unknown_topic_or_partition, f"The topic '{t.name}' does not exist."
        elif t.count < len(topic.partitions):
            error = ErrorCode.invalid_partitions
            message = (f"The topic {t.name} currently has {len(topic.partitions)} partition(s); "
                       f"{t.count} would not be an increase.")  # Kafka's words (ReplicationControlManager)
        elif t.count == len(topic.partitions):
            error, message = ErrorCode.invalid_partitions, f"Topic already has {t.count} partition(s)."
        elif t.count > MAX_PARTITIONS:
            error, message = ErrorCode.invalid_partitions, f"A topic may have at most {MAX_PARTITIONS} partitions."
        elif t.assignments is not None and (
            len(t.assignments) != t.count - len(topic.partitions)
            or any(list(a.broker_ids) != [broker.node_id] for a in t.assignments)
        ):
            error, message = ErrorCode.invalid_replica_assignment, "Replica assignments must name this broker once per new partition."
        elif not body.validate_only:
            try:
                broker.registry.add_partitions(t.name, t.count, broker.clock.now_ms())
            except OSError as exc:
                error, message = _storage_error(f"adding partitions to {t.name}", exc), f"Partitions could not be added: {exc}"
        results.append(build(m.CreatePartitionsTopicResult, name=t.name, error_code=error, error_message=message))
    return build(m.CreatePartitionsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


# -- DescribeConfigs ----------------------------------------------------------


def handle_describe_configs(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    body = request.body
    include_synonyms = bool(getattr(body, "include_synonyms", False))
    include_docs = bool(getattr(body, "include_documentation", False))
    results = []
    for res in body.resources:
        keys = set(res.configuration_keys) if res.configuration_keys else None
        error, message, entries = ErrorCode.none, None, []
        refusal = _config_refusal(broker, conn, res, AclOperation.DESCRIBE_CONFIGS)
        if refusal is not None:
            error, message = refusal
        elif res.resource_type == RESOURCE_TOPIC:
            topic = broker.registry.topics.get(res.resource_name)
            if topic is None:
                error, message = ErrorCode.unknown_topic_or_partition, f"Topic '{res.resource_name}' does not exist."
            else:
                for key, row in TOPIC_CONFIGS.items():
                    if keys is not None and key not in keys:
                        continue
                    value, source = _topic_value(broker, dict(topic.config.overrides), key)
                    synonyms = _topic_synonyms(m, broker, dict(topic.config.overrides), key) if include_synonyms else ()
                    entries.append(_config_entry(m, key, value, source, row, synonyms, include_docs))
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.node_id)):
                error, message = ErrorCode.invalid_request, f"Unexpected broker id, expected {broker.node_id}"
            else:
                for key, row in BROKER_CONFIGS.items():
                    if keys is not None and key not in keys:
                        continue
                    source = SOURCE_DEFAULT if broker.config.is_default(key) else SOURCE_STATIC_BROKER
                    shown = None if row.type is ConfigType.PASSWORD else broker.config[key]
                    synonyms = ((build(m.DescribeConfigsSynonym, name=key, value=render_value(shown), source=source),)
                                if include_synonyms else ())
                    entries.append(_config_entry(m, key, broker.config[key], source, row, synonyms, include_docs, read_only=True))
        elif res.resource_type == RESOURCE_BROKER_LOGGER:
            entries = []
        else:
            error, message = ErrorCode.invalid_request, f"Unsupported resource type {res.resource_type}"
        results.append(build(m.DescribeConfigsResult, error_code=error, error_message=message, resource_type=res.resource_type,
                             resource_name=res.resource_name, configs=tuple(entries)))
    return build(m.DescribeConfigsResponse, throttle_time=NO_THROTTLE, results=tuple(results))


#: Config resource type -> (the ACL resource its configs are authorized on, the refusal's error).
_CONFIG_RESOURCES = {
    RESOURCE_TOPIC: (ResourceType.TOPIC, ErrorCode.topic_authorization_failed),
    RESOURCE_BROKER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    RESOURCE_BROKER_LOGGER: (ResourceType.CLUSTER, ErrorCode.cluster_authorization_failed),
    RESOURCE_GROUP: (ResourceType.GROUP, ErrorCode.group_authorization_failed),
}
#: Errors' default messages, which Kafka's refusals of configs carry.
_AUTHORIZATION_MESSAGES = {
    ErrorCode.topic_authorization_failed: "Topic authorization failed.",
    ErrorCode.cluster_authorization_failed: "Cluster authorization failed.",
    ErrorCode.group_authorization_failed: "Group authorization failed.",
}


def _config_refusal(broker: BrokerContext, conn: Connection, res: Any, operation: AclOperation) -> tuple[ErrorCode, str] | None:
    """Why the principal may not describe (DESCRIBE_CONFIGS) or alter (ALTER_CONFIGS) a config
    resource, or None.  The broker's (and its loggers') configs are the cluster's; altering
    loggers needs CLUSTER_ACTION (Kafka's RuntimeLoggerManager)."""
    if broker.authorizer is None:
        return None
    found = _CONFIG_RESOURCES.get(res.resource_type)
    if found is None:
        return None  # not a resource type configs have: answered as without ACLs
    resource_type, error = found
    if res.resource_type == RESOURCE_BROKER_LOGGER and operation is AclOperation.ALTER_CONFIGS:
        operation = AclOperation.CLUSTER_ACTION
    if resource_type is ResourceType.CLUSTER:
        allowed = authorize_cluster(broker, conn, operation)
    else:
        allowed = authorize(broker, conn, operation, resource_type, res.resource_name)
    return None if allowed else (error, _AUTHORIZATION_MESSAGES[error])


def _config_entry(m: Any, key: str, value: Any, source: int, row: Any, synonyms: tuple[Any, ...], include_docs: bool,
                  read_only: bool = False) -> Any:
    sensitive = row.type is ConfigType.PASSWORD  # Kafka never sends a secret back
    return build(
        m.DescribeConfigsResourceResult,
        name=key, value=None if sensitive else render_value(value), read_only=read_only, config_source=source,
        is_default=source == SOURCE_DEFAULT, is_sensitive=sensitive, synonyms=synonyms, config_type=_CONFIG_TYPE_CODES[row.type],
        documentation=row.doc if include_docs else None,
    )


def _topic_synonyms(m: Any, broker: BrokerContext, overrides: dict[str, Any], key: str) -> tuple[Any, ...]:
    out = []
    if key in overrides:
        out.append(build(m.DescribeConfigsSynonym, name=key, value=render_value(overrides[key]), source=SOURCE_DYNAMIC_TOPIC))
    synonym = TOPIC_CONFIGS[key].synonym
    # A broker key with no value of its own (log.retention.ms, log.roll.ms: their default is
    # derived from the .hours/.minutes keys) is no synonym: Kafka's ConfigHelper lists only
    # the set keys from the topic key's own broker synonym on.
    if synonym is not None and broker.config[synonym] is not None:
        source = SOURCE_DEFAULT if broker.config.is_default(synonym) else SOURCE_STATIC_BROKER
        out.append(build(m.DescribeConfigsSynonym, name=synonym, value=render_value(broker.config.topic_default(key)), source=source))
    return tuple(out)


# -- AlterConfigs / IncrementalAlterConfigs -----------------------------------


def handle_alter_configs(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    """AlterConfigs replaces a topic's whole set of overrides."""
    m = responses(request)
    out = []
    for res in request.body.resources:
        new = {c.name: c.value for c in res.configs if c.value is not None}
        error, message = _config_refusal(broker, conn, res, AclOperation.ALTER_CONFIGS) or _apply_topic_configs(
            broker, res, lambda _old, new=new: new, request.body.validate_only)
        out.append(build(m.AlterConfigsResourceResponse, error_code=error, error_message=message,
                         resource_type=res.resource_type, resource_name=res.resource_name))
    return build(m.AlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(out))


def handle_incremental_alter_configs(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    m = responses(request)
    out = []
    for res in request.body.resources:

        def change(old: dict[str, Any], res: Any = res) -> dict[str, Any]:
            new = {k: render_value(v) for k, v in old.items()}
            for c in res.configs:
                if c.config_operation == OP_SET:
                    new[c.name] = c.value
                elif c.config_operation == OP_DELETE:
                    new.pop(c.name, None)
                elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
                    row = TOPIC_CONFIGS.get(c.name)
                    if row is None or row.type is not ConfigType.LIST:
                        raise ConfigError(f"{c.name} is not a list config; APPEND/SUBTRACT do not apply")
                    current = [x for x in str(new.get(c.name) or render_value(broker.config.topic_default(c.name)) or "").split(",") if x]
                    items = [x.strip() for x in (c.value or "").split(",") if x.strip()]
                    if c.config_operation == OP_APPEND:
                        current += [x for x in items if x not in current]
                    else:
                        current = [x for x in current if x not in items]
                    new[c.name] = ",".join(current)
                else:
                    raise ConfigError(f"unknown operation {c.config_operation}")
            return new

        error, message = _config_refusal(broker, conn, res, AclOperation.ALTER_CONFIGS) or _apply_topic_configs(
            broker, res, change, request.body.validate_only)
        out.append(build(m.AlterConfigsResourceResponse, error_code=error, error_message=message,
                         resource_type=res.resource_type, resource_name=res.resource_name))
    return build(m.IncrementalAlterConfigsResponse, throttle_time=NO_THROTTLE, responses=tuple(out))


def _apply_topic_configs(broker: BrokerContext, res: Any, change: Any, validate_only: bool) -> tuple[ErrorCode, str | None]:
    if res.resource_type == RESOURCE_BROKER:
        return ErrorCode.invalid_request, "Broker configs are static here: set them in server.properties or with -o"
    if res.resource_type != RESOURCE_TOPIC:
        return ErrorCode.invalid_request, f"Unsupported resource type {res.resource_type}"
    topic = broker.registry.topics.get(res.resource_name)
    if topic is None:
        return ErrorCode.unknown_topic_or_partition, f"Topic '{res.resource_name}' does not exist."
    try:
        overrides = validate_topic_configs(change(dict(topic.config.overrides)))
    except ConfigError as exc:
        return ErrorCode.invalid_config, str(exc)
    if not validate_only:
        try:
            broker.registry.set_topic_config(topic.name, overrides)
        except OSError as exc:
            return _storage_error(f"changing the configuration of {topic.name}", exc), f"The configuration could not be saved: {exc}"
    return ErrorCode.none, None


#: Kafka's client quota entity types (ClientQuotaEntity).
_QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
_MATCH_EXACT = 0


def handle_describe_client_quotas(broker: BrokerContext, request: Request, conn: Connection) -> Any:
    """DescribeClientQuotas (KIP-546): this broker enforces no quotas, so every well-formed filter
    matches nothing.  Served because Kafka's ``kafka-configs --describe --entity-type users`` asks it
    before it describes the users' SCRAM credentials.  Needs DESCRIBE_CONFIGS on the cluster."""
    m = responses(request)
    error, message = ErrorCode.none, None
    if not authorize_cluster(broker, conn, AclOperation.DESCRIBE_CONFIGS):
        error, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
    else:
        seen: set[str] = set()
        for component in request.body.components:
            if component.entity_type not in _QUOTA_ENTITY_TYPES:
                error, message = ErrorCode.invalid_request, f"Custom entity type '{component.entity_type}' not supported"
            elif component.entity_type in seen:
                error, message = ErrorCode.invalid_request, f"Duplicate {component.entity_type} filter component entity type"
            elif component.match_type == _MATCH_EXACT and component.match is None:
                error, message = ErrorCode.invalid_request, "Exact match requires a name"
            seen.add(component.entity_type)
    return build(m.DescribeClientQuotasResponse, throttle_time=NO_THROTTLE, error_code=error, error_message=message,
                 entries=() if error is ErrorCode.none else None)


HANDLERS: dict[int, Handler] = {
    apis.DESCRIBE_CLIENT_QUOTAS: handle_describe_client_quotas,
    apis.CREATE_TOPICS: handle_create_topics,
    apis.DELETE_TOPICS: handle_delete_topics,
    apis.CREATE_PARTITIONS: handle_create_partitions,
    apis.DESCRIBE_CONFIGS: handle_describe_configs,
    apis.ALTER_CONFIGS: handle_alter_configs,
    apis.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
}
