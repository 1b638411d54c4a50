"""ACLs: bindings, the filters DescribeAcls and DeleteAcls use, and ``StandardAuthorizer``.

Theory of operation.  An ``AclBinding`` is one rule: a resource pattern (type, name,
LITERAL or PREFIXED) and an entry (principal, host, operation, ALLOW or DENY).  The
authorizer keeps them indexed by resource type, and answers a question -- may this
principal from this host do this operation on this resource? -- as Kafka's
``StandardAuthorizerData.authorize`` does:

* a principal listed in ``super.users`` may do everything;
* the bindings that *match the resource* are those of its type whose name is the
  resource's name (LITERAL), the wildcard ``*`` (LITERAL), or a prefix of it (PREFIXED);
* of those, the ones that *apply* name the principal or ``User:*`` (only ``User:*`` is a
  wildcard), the client's host or ``*``, and the operation: ALL always; for an ALLOW
  binding also an operation that implies the one asked (READ, WRITE, DELETE and ALTER
  imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS), never for a DENY binding
  (a DENY READ does not deny DESCRIBE);
* an applying DENY wins over any ALLOW; an applying ALLOW allows; otherwise, if no
  binding matched the resource at all, ``allow.everyone.if.no.acl.found`` decides
  (default: denied), and if some did (for other principals, hosts or operations), denied.

``authorize_any`` is Kafka's ``Authorizer.authorizeByResourceType`` (KIP-679: an
idempotent producer needs IDEMPOTENT_WRITE on the cluster or WRITE on *some* topic):
allowed if the question for a made-up name is allowed (super users, the default rule),
else if some ALLOW binding for the principal, host and operation (or ALL) names a
resource that no DENY binding covers -- a DENY on ``*`` denies everything, a DENY on a
literal name cancels an ALLOW on the same literal, a DENY PREFIXED cancels every ALLOW
whose name starts with it.

Bindings are durable: ``acls.json`` in the data directory, rewritten whole with
``fileio.atomic_write`` *before* the in-memory index changes (prepare the new set,
write it, apply it), so a crash leaves the old set or the new one, never a mix, and an
answer never promises a change that a restart would lose.  CreateAcls and DeleteAcls
are each one write: Kafka's controller appends each request's records atomically
(``AclControlManager``).  Creating a binding that exists already succeeds and changes
nothing.  A new binding is checked as Kafka checks it (``AclApis.handleCreateAcls``,
then ``AclControlManager.validateNewAcl``); the message is Kafka's, answered with
INVALID_REQUEST for that binding alone.

Filters (``AclBindingFilter``): ANY fields match everything; a null name or principal
or host matches every one; pattern type ANY matches both pattern types by exact name;
MATCH matches what would apply to a resource of that name: the LITERAL name, the
LITERAL wildcard ``*``, and PREFIXED patterns that prefix it (Kafka's
``ResourcePatternFilter.matches``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..config import ALLOW_EVERYONE_IF_NO_ACL_FOUND, AUTHORIZER_CLASS_NAME, NODE_ID, SUPER_USERS, BrokerConfig, ConfigError
from ..fileio import atomic_write
from ..protocol.errors import ErrorCode
from .authorizer import CLUSTER_NAME, WILDCARD, AclOperation, AclPermissionType, PatternType, ResourceType
from .principal import KafkaPrincipal

log = logging.getLogger(__name__)

#: The file the bindings live in, in the data directory.
ACLS_FILE = "acls.json"
_FORMAT_VERSION = 1
#: The only principal wildcard (Kafka's ``StandardAuthorizerData.WILDCARD_PRINCIPAL``).
WILDCARD_PRINCIPAL = "User:*"

#: An ALLOW of one of these also allows DESCRIBE (``StandardAuthorizerData.IMPLIES_DESCRIBE``).
IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                              AclOperation.ALTER})
#: An ALLOW of one of these also allows DESCRIBE_CONFIGS.
IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

#: The operations each resource type has (Kafka's ``AclEntry.supportedOperations``): what an
#: ``authorized_operations`` bitfield is made of.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE,
                         AclOperation.DELETE, AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.DESCRIBE_CONFIGS,
                         AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS,
                           AclOperation.ALTER_CONFIGS, AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def bitfield(operations: Iterable[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation."""
    out = 0
    for op in operations:
        out |= 1 << op
    return out


def resource_type_name(resource_type: ResourceType) -> str:
    """Kafka's ``SecurityUtils.resourceTypeName``: TRANSACTIONAL_ID -> ``TransactionalId``."""
    return "".join(part.capitalize() for part in resource_type.name.split("_"))


E = TypeVar("E", ResourceType, AclOperation, PatternType, AclPermissionType)


def _enum(cls: type[E], code: int) -> E:
    """A wire code as the enum, UNKNOWN (0) for a code the enum lacks (Kafka's ``fromCode``)."""
    try:
        return cls(code)
    except ValueError:
        return cls(0)


def _any_unknown(resource_type: ResourceType, pattern_type: PatternType, operation: AclOperation,
                 permission: AclPermissionType) -> bool:
    return (resource_type is ResourceType.UNKNOWN or pattern_type is PatternType.UNKNOWN
            or operation is AclOperation.UNKNOWN or permission is AclPermissionType.UNKNOWN)


@dataclass(frozen=True, slots=True, order=True)
class AclBinding:
    """One ACL: a resource pattern and an access control entry (Kafka's ``AclBinding``)."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    @classmethod
    def of(cls, resource_type: int, resource_name: str, pattern_type: int, principal: str, host: str,
           operation: int, permission: int) -> AclBinding:
        """From wire codes; a code the enums lack becomes UNKNOWN."""
        return cls(_enum(ResourceType, resource_type), resource_name, _enum(PatternType, pattern_type), principal, host,
                   _enum(AclOperation, operation), _enum(AclPermissionType, permission))

    def has_unknown(self) -> bool:
        """Kafka refuses to parse a CreateAcls request holding one (the connection is closed)."""
        return _any_unknown(self.resource_type, self.pattern_type, self.operation, self.permission)

    def __str__(self) -> str:  # Kafka's AclBinding.toString
        return (f"(pattern=ResourcePattern(resourceType={self.resource_type.name}, name={self.resource_name}, "
                f"patternType={self.pattern_type.name}), entry=(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission.name}))")

    def to_json(self) -> dict[str, str]:
        return {"resourceType": self.resource_type.name, "name": self.resource_name, "patternType": self.pattern_type.name,
                "principal": self.principal, "host": self.host, "operation": self.operation.name,
                "permissionType": self.permission.name}

    @classmethod
    def from_json(cls, entry: dict[str, str]) -> AclBinding:
        return cls(ResourceType[entry["resourceType"]], entry["name"], PatternType[entry["patternType"]], entry["principal"],
                   entry["host"], AclOperation[entry["operation"]], AclPermissionType[entry["permissionType"]])


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select bindings with (Kafka's ``AclBindingFilter``):
    ANY (and None for the strings) matches everything; MATCH as explained above."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission: AclPermissionType = AclPermissionType.ANY

    @classmethod
    def of(cls, resource_type: int, resource_name: str | None, pattern_type: int, principal: str | None,
           host: str | None, operation: int, permission: int) -> AclBindingFilter:
        return cls(_enum(ResourceType, resource_type), resource_name, _enum(PatternType, pattern_type), principal, host,
                   _enum(AclOperation, operation), _enum(AclPermissionType, permission))

    def has_unknown(self) -> bool:
        return _any_unknown(self.resource_type, self.pattern_type, self.operation, self.permission)

    def matches(self, binding: AclBinding) -> bool:
        return self._matches_pattern(binding) and self._matches_entry(binding)

    def _matches_pattern(self, binding: AclBinding) -> bool:
        if self.resource_type is not ResourceType.ANY and self.resource_type is not binding.resource_type:
            return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and self.pattern_type is not binding.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if self.pattern_type is PatternType.ANY or self.pattern_type is binding.pattern_type:
            return name == binding.resource_name
        # MATCH: what would apply to a resource called ``name``.
        if binding.pattern_type is PatternType.LITERAL:
            return name == binding.resource_name or binding.resource_name == WILDCARD
        if binding.pattern_type is PatternType.PREFIXED:
            return name.startswith(binding.resource_name)
        return False

    def _matches_entry(self, binding: AclBinding) -> bool:
        if self.principal is not None and self.principal != binding.principal:
            return False
        if self.host is not None and self.host != binding.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation is not binding.operation:
            return False
        return self.permission is AclPermissionType.ANY or self.permission is binding.permission


#: Every binding.
ANY_FILTER = AclBindingFilter()


def creation_error(binding: AclBinding) -> str | None:
    """Why Kafka refuses to create ``binding`` (INVALID_REQUEST with this message), or None.

    The broker's checks first (``AclApis.handleCreateAcls``), then the controller's
    (``AclControlManager.validateNewAcl``; the principal check is Kafka 4's)."""
    if binding.resource_type is ResourceType.CLUSTER and binding.resource_name != CLUSTER_NAME:
        return f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}"
    if not binding.resource_name:
        return "Invalid empty resource name"
    if binding.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY):
        return f"Invalid resourceType {binding.resource_type.name}"
    if binding.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        return f"Invalid patternType {binding.pattern_type.name}"
    if binding.operation in (AclOperation.UNKNOWN, AclOperation.ANY):
        return f"Invalid operation {binding.operation.name}"
    if binding.permission not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        return f"Invalid permissionType {binding.permission.name}"
    if ":" not in binding.principal:
        return (f"Could not parse principal from `{binding.principal}` (no colon is present separating the "
                "principal type from the principal name)")
    return None


@dataclass(frozen=True, slots=True)
class CreateResult:
    error: ErrorCode
    message: str | None = None


@dataclass(frozen=True, slots=True)
class DeleteResult:
    """One filter's outcome: the bindings it deleted, or why nothing was."""

    error: ErrorCode
    message: str | None
    deleted: tuple[AclBinding, ...]


class _TypeIndex:
    """The bindings of one resource type: LITERAL ones by name (``*`` included), PREFIXED ones by prefix."""

    __slots__ = ("literal", "prefixed")

    def __init__(self) -> None:
        self.literal: dict[str, list[AclBinding]] = {}
        self.prefixed: dict[str, list[AclBinding]] = {}

    def add(self, binding: AclBinding) -> None:
        table = self.literal if binding.pattern_type is PatternType.LITERAL else self.prefixed
        table.setdefault(binding.resource_name, []).append(binding)

    def matching(self, name: str) -> Iterator[AclBinding]:
        """The bindings that match a resource called ``name`` (whoever they are for)."""
        yield from self.literal.get(name, ())
        if name != WILDCARD:
            yield from self.literal.get(WILDCARD, ())
        for prefix, bindings in self.prefixed.items():
            if name.startswith(prefix):
                yield from bindings


def _principal_applies(acl_principal: str, principal_text: str) -> bool:
    return acl_principal == principal_text or acl_principal == WILDCARD_PRINCIPAL


def _operation_applies(binding: AclBinding, operation: AclOperation) -> bool:
    if binding.operation is AclOperation.ALL or binding.operation is operation:
        return True
    if binding.permission is not AclPermissionType.ALLOW:
        return False  # implied operations are ALLOW's only
    if operation is AclOperation.DESCRIBE:
        return binding.operation in IMPLIES_DESCRIBE
    if operation is AclOperation.DESCRIBE_CONFIGS:
        return binding.operation in IMPLIES_DESCRIBE_CONFIGS
    return False


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over a durable set of bindings (see the module docstring).

    ``path`` None keeps the bindings in memory only (unit tests)."""

    def __init__(self, path: Path | None, super_users: Iterable[str] = (), allow_if_no_acl_found: bool = False) -> None:
        self.path = path
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl_found = allow_if_no_acl_found
        self._bindings: frozenset[AclBinding] = frozenset()
        self._index: dict[ResourceType, _TypeIndex] = {}

    # -- configuration and storage ----------------------------------------------

    @classmethod
    def from_config(cls, config: BrokerConfig, data_dir: Path) -> StandardAuthorizer | None:
        """The authorizer ``authorizer.class.name`` asks for (None: none), its bindings loaded."""
        if not config[AUTHORIZER_CLASS_NAME]:
            return None
        authorizer = cls(data_dir / ACLS_FILE, parse_super_users(config[SUPER_USERS]), config[ALLOW_EVERYONE_IF_NO_ACL_FOUND])
        authorizer.load()
        log.info("[StandardAuthorizer %d] set super.users=%s, default result=%s; %d acl(s) loaded from %s",
                 config[NODE_ID], ",".join(sorted(authorizer.super_users)),
                 "ALLOWED" if authorizer.allow_if_no_acl_found else "DENIED", len(authorizer._bindings), authorizer.path)
        return authorizer

    def load(self) -> None:
        """Read the bindings from ``path`` (none if the file does not exist).  Raises ValueError
        for a file this code did not write: the broker does not start on ACLs it cannot read."""
        if self.path is None:
            return
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self._apply(frozenset())
            return
        try:
            document = json.loads(text)
            if document.get("version") != _FORMAT_VERSION:
                raise ValueError(f"unknown version {document.get('version')!r}")
            bindings = frozenset(AclBinding.from_json(entry) for entry in document["acls"])
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.path}: not an ACL file: {exc!r}") from exc
        self._apply(bindings)

    def _store(self, bindings: frozenset[AclBinding]) -> None:
        """Write ``bindings`` durably (raises OSError, the old file intact)."""
        if self.path is None:
            return
        document = {"version": _FORMAT_VERSION, "acls": [b.to_json() for b in sorted(bindings)]}
        atomic_write(self.path, json.dumps(document, indent=1) + "\n")

    def _apply(self, bindings: frozenset[AclBinding]) -> None:
        index: dict[ResourceType, _TypeIndex] = {}
        for binding in bindings:
            index.setdefault(binding.resource_type, _TypeIndex()).add(binding)
        self._bindings, self._index = bindings, index

    # -- CreateAcls, DeleteAcls, DescribeAcls -------------------------------------

    def acls(self, acl_filter: AclBindingFilter = ANY_FILTER) -> list[AclBinding]:
        """The bindings ``acl_filter`` matches, sorted."""
        return sorted(b for b in self._bindings if acl_filter.matches(b))

    def create_acls(self, bindings: list[AclBinding]) -> list[CreateResult]:
        """One result per binding, in order: created (or there already), or why not.  The valid
        new ones are written in one durable write before they take effect; if it fails, none
        does (KAFKA_STORAGE_ERROR for each)."""
        errors = [creation_error(b) for b in bindings]
        wanted = self._bindings | {b for b, e in zip(bindings, errors, strict=True) if e is None}
        failed: str | None = None
        if wanted != self._bindings:
            try:
                self._store(wanted)
            except OSError as exc:
                log.error("cannot save the ACLs to %s: %s", self.path, exc)
                failed = f"The ACLs could not be saved: {exc}"
            else:
                added = wanted - self._bindings
                self._apply(wanted)
                for binding in sorted(added):
                    log.info("ACL created: %s", binding)
        return [CreateResult(ErrorCode.invalid_request, e) if e is not None
                else CreateResult(ErrorCode.kafka_storage_error, failed) if failed is not None
                else CreateResult(ErrorCode.none) for e in errors]

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[DeleteResult]:
        """One result per filter, in order, each listing what it matched (a binding two filters
        match is listed by both); every matched binding is removed in one durable write."""
        matched = [tuple(self.acls(f)) for f in filters]
        doomed = frozenset(b for found in matched for b in found)
        if doomed:
            remaining = self._bindings - doomed
            try:
                self._store(remaining)
            except OSError as exc:
                log.error("cannot save the ACLs to %s: %s", self.path, exc)
                message = f"The ACLs could not be saved: {exc}"
                return [DeleteResult(ErrorCode.kafka_storage_error, message, ()) for _ in filters]
            self._apply(remaining)
            for binding in sorted(doomed):
                log.info("ACL deleted: %s", binding)
        return [DeleteResult(ErrorCode.none, None, found) for found in matched]

    # -- authorization --------------------------------------------------------------

    def authorize(self, principal: KafkaPrincipal, host: str, operation: AclOperation, resource_type: ResourceType,
                  name: str) -> bool:
        principal_text = str(principal)
        if principal_text in self.super_users:
            return True
        index = self._index.get(resource_type)
        if index is None:
            return self.allow_if_no_acl_found
        matched = allowed = False
        for binding in index.matching(name):
            matched = True
            if not _principal_applies(binding.principal, principal_text):
                continue
            if binding.host != WILDCARD and binding.host != host:
                continue
            if not _operation_applies(binding, operation):
                continue
            if binding.permission is AclPermissionType.DENY:
                return False
            allowed = True
        if allowed:
            return True
        return self.allow_if_no_acl_found and not matched

    def authorize_any(self, principal: KafkaPrincipal, host: str, operation: AclOperation,
                      resource_type: ResourceType) -> bool:
        """Kafka's ``Authorizer.authorizeByResourceType`` (see the module docstring)."""
        if self.authorize(principal, host, operation, resource_type, "hardcode"):
            return True
        index = self._index.get(resource_type)
        if index is None:
            return False
        principal_text = str(principal)
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[AclBinding] = []
        for table in (index.literal, index.prefixed):
            for bindings in table.values():
                for b in bindings:
                    if b.host != host and b.host != WILDCARD:
                        continue
                    if not _principal_applies(b.principal, principal_text):
                        continue
                    if b.operation is not operation and b.operation is not AclOperation.ALL:
                        continue
                    if b.permission is AclPermissionType.DENY:
                        if b.pattern_type is PatternType.LITERAL:
                            if b.resource_name == WILDCARD:
                                return False
                            deny_literal.add(b.resource_name)
                        else:
                            deny_prefixed.add(b.resource_name)
                    else:
                        allow.append(b)
        if any(b.pattern_type is PatternType.LITERAL and b.resource_name == WILDCARD for b in allow):
            return True
        for b in allow:
            if b.pattern_type is PatternType.LITERAL and b.resource_name in deny_literal:
                continue
            name = b.resource_name
            if not any(name[:end] in deny_prefixed for end in range(1, len(name) + 1)):
                return True
        return False


def parse_super_users(value: str) -> list[str]:
    """``super.users``: ``User:a;User:b``, each trimmed and checked as a principal (Kafka's
    ``StandardAuthorizer.getConfiguredSuperUsers``)."""
    out = []
    for item in value.split(";"):
        item = item.strip()
        if not item:
            continue
        kind, sep, _ = item.partition(":")
        if not sep or not kind:
            raise ConfigError(f"super.users: expected principals as Type:name, got {item!r}")
        out.append(item)
    return out
