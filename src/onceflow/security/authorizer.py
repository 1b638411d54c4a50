"""The ACL vocabulary and the interface request handlers ask.

Values are Kafka's wire codes (``org.apache.kafka.common.resource.ResourceType``,
``acl.AclOperation``, ``resource.PatternType``, ``acl.AclPermissionType``), so
they go to and from CreateAcls, DescribeAcls and DeleteAcls unchanged.

``Authorizer`` is what a handler calls, with the request's principal and the
client's host (``acls.StandardAuthorizer`` implements it).  A broker without
``authorizer.class.name`` has none: every request is allowed, as in Kafka.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Protocol

from .principal import KafkaPrincipal


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclPermissionType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: The one name of the cluster resource (Kafka's ``kafka-cluster``).
CLUSTER_NAME = "kafka-cluster"
#: The wildcard resource name and principal (``*``).
WILDCARD = "*"


class Authorizer(Protocol):
    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                  resource_type: ResourceType, name: str) -> bool:
        """May ``principal`` from ``host`` do ``operation`` on the resource?"""
        ...

    def authorize_any(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """May it do ``operation`` on at least one resource of the type (Kafka's
        ``authorizeByResourceType``: idempotent produce with WRITE on any topic, KIP-679)?"""
        ...
