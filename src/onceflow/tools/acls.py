"""``onceflow acls list|add|remove``: a cluster's ACLs, through confluent-kafka's AdminClient.

Theory of operation
-------------------
An ACL binding is a resource pattern (type, name, pattern type) and an
entry (principal, host, operation, allow or deny).  The options are
``kafka-acls.sh``'s, and so is the way they combine: ``add`` makes one
binding for every resource x principal x host x operation given (a
principal's hosts are ``--allow-host`` for ``--allow-principal``,
``--deny-host`` for ``--deny-principal``, ``*`` when none is given), and
sends them in one CreateAcls request.  ``list`` and ``remove`` turn the same
options into binding filters, where what is not given matches anything:
no resource option matches every resource, no operation every operation, no
principal every principal.  ``remove`` sends them in one DeleteAcls request
and reports what the brokers deleted; ``list`` sends one DescribeAcls
request per filter and reports the union.

Pattern types default as in ``kafka-acls.sh``: ``literal`` for ``add`` and
``remove``, and, for ``list``, ``any`` (every ACL on the names given,
literal or prefixed; ``match`` adds the ones that apply to them through a
wildcard or a prefix).  ``add`` checks each operation against its resource
type, as ``kafka-acls.sh`` does (a group cannot be written).

Resource names, principals and hosts are non-empty UTF-8, checked by the
parser (``cliargs.name``): librdkafka crashes on text that is not.  A
resource name is not held to Kafka's topic names: ``*`` and prefixes are
names here.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterable
from typing import Any

from ..cliargs import name as non_empty
from ..clientconfig import NO_SETTINGS, ClientSettings
from .common import DEFAULT_TIMEOUT_S, UsageError, add_command, add_family, confluent_admin, wait

#: Kafka's name for the cluster resource (``kafka-acls.sh --cluster``).
CLUSTER_NAME = "kafka-cluster"

#: Resource type -> the operations it has (``kafka-acls.sh``'s own table).
VALID_OPERATIONS = {
    "TOPIC": ("READ", "WRITE", "CREATE", "DESCRIBE", "DELETE", "ALTER", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "ALL"),
    "GROUP": ("READ", "DESCRIBE", "DELETE", "ALL"),
    "CLUSTER": ("CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE", "ALTER", "DESCRIBE",
                "ALL"),
    "TRANSACTIONAL_ID": ("DESCRIBE", "WRITE", "ALL"),
}
OPERATIONS = ("ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS",
              "ALTER_CONFIGS", "IDEMPOTENT_WRITE")
PATTERN_TYPES = ("literal", "prefixed", "match", "any")


def _folded(text: str) -> str:
    return text.replace("-", "").replace("_", "").replace(" ", "").lower()


def operation_name(text: str) -> str:
    """An operation as Kafka names it (``Read``, ``IdempotentWrite``, ``idempotent-write``...) in upper snake case."""
    for name in OPERATIONS:
        if _folded(name) == _folded(text):
            return name
    raise argparse.ArgumentTypeError(f"unknown operation {text!r} (one of {', '.join(_camel(o) for o in OPERATIONS)})")


def _camel(name: str) -> str:
    return "".join(part.capitalize() for part in name.split("_"))


def _principal(text: str) -> str:
    kind, sep, who = non_empty(text).partition(":")
    if not sep or not kind.strip() or not who.strip():
        raise argparse.ArgumentTypeError(f"expected a principal such as User:alice, got {text!r}")
    return f"{kind.strip()}:{who.strip()}"


# -- resources and entries --------------------------------------------------------------


def resources(topics: Iterable[str] = (), groups: Iterable[str] = (), transactional_ids: Iterable[str] = (),
              cluster: bool = False) -> list[tuple[str, str]]:
    """(resource type, name) for each resource option, in Kafka's type names."""
    out = [("TOPIC", t) for t in topics] + [("GROUP", g) for g in groups]
    out += [("TRANSACTIONAL_ID", t) for t in transactional_ids]
    if cluster:
        out.append(("CLUSTER", CLUSTER_NAME))
    return out


def entries(allow_principals: Iterable[str], deny_principals: Iterable[str], allow_hosts: Iterable[str],
            deny_hosts: Iterable[str]) -> list[tuple[str, str, str]]:
    """(principal, host, permission) for each principal and its hosts (``*`` when none is given)."""
    allow_hosts, deny_hosts = list(allow_hosts) or ["*"], list(deny_hosts) or ["*"]
    return ([(p, h, "ALLOW") for p in allow_principals for h in allow_hosts]
            + [(p, h, "DENY") for p in deny_principals for h in deny_hosts])


def _confluent_type(kind: str) -> Any:
    from confluent_kafka.admin import ResourceType

    return ResourceType.BROKER if kind == "CLUSTER" else ResourceType[kind]


def _row(binding: Any) -> dict[str, Any]:
    kind = binding.restype.name
    return {
        "principal": binding.principal,
        "host": binding.host,
        "operation": binding.operation.name,
        "permission": binding.permission_type.name,
        "resource_type": "CLUSTER" if kind == "BROKER" else kind,
        "resource_name": binding.name,
        "pattern_type": binding.resource_pattern_type.name,
    }


def _sorted(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    unique = {tuple(row.values()): row for row in rows}
    return [unique[key] for key in sorted(unique, key=lambda k: (k[4], k[5], k[6], k[0], k[1], k[2], k[3]))]


# -- the commands --------------------------------------------------------------------------


def add_acls(bootstrap: str, resource_list: list[tuple[str, str]], entry_list: list[tuple[str, str, str]],
             operations: list[str], *, pattern_type: str = "literal", timeout: float = DEFAULT_TIMEOUT_S,
             client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Create a binding for every resource x entry x operation (CreateAcls); the bindings made."""
    from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType

    if pattern_type not in ("literal", "prefixed"):
        raise UsageError(f"--resource-pattern-type must be literal or prefixed to add ACLs, not {pattern_type}")
    if not resource_list:
        raise UsageError("name a resource: --topic, --group, --transactional-id or --cluster")
    if not entry_list:
        raise UsageError("name a principal: --allow-principal or --deny-principal")
    if not operations:
        raise UsageError("name an operation: --operation (e.g. Read, Write, Describe, All)")
    for (kind, _), operation in itertools.product(resource_list, operations):
        if operation not in VALID_OPERATIONS[kind]:
            raise UsageError(f"--operation {_camel(operation)} does not apply to a {kind.lower().replace('_', ' ')} "
                             f"(it takes {', '.join(_camel(o) for o in VALID_OPERATIONS[kind])})")
    bindings = [AclBinding(_confluent_type(kind), name, ResourcePatternType[pattern_type.upper()], principal, host,
                           AclOperation[operation], AclPermissionType[permission])
                for kind, name in resource_list for principal, host, permission in entry_list for operation in operations]
    admin = confluent_admin(bootstrap, client)
    futures = admin.create_acls(bindings, request_timeout=timeout)
    for binding, future in futures.items():
        wait(future, timeout, f"the ACL {_describe(binding)}")
    return _sorted(_row(b) for b in bindings)


def _describe(binding: Any) -> str:
    row = _row(binding)
    return (f"{row['permission'].lower()} {row['principal']} {row['operation']} from {row['host']} on "
            f"{row['resource_type'].lower()} {row['resource_name']!r} ({row['pattern_type'].lower()})")


#: (principal, host, permission) of a filter; None matches any principal or host, "ANY" any permission.
Who = tuple[str | None, str | None, str]


def _filters(resource_list: list[tuple[str, str]], who: list[Who], operations: list[str], pattern_type: str) -> list[Any]:
    """Binding filters for every combination of the options given; an option not given matches anything."""
    from confluent_kafka.admin import AclBindingFilter, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

    patterns: list[tuple[Any, str | None]] = [(_confluent_type(k), n) for k, n in resource_list] or [(ResourceType.ANY, None)]
    what = [AclOperation[o] for o in operations] or [AclOperation.ANY]
    # None matches any name, principal or host (confluent-kafka's documentation; its type hints say str).
    return [AclBindingFilter(kind, name, ResourcePatternType[pattern_type.upper()], principal, host, operation,  # type: ignore[arg-type]
                             AclPermissionType[permission])
            for kind, name in patterns for principal, host, permission in who or [(None, None, "ANY")] for operation in what]


def list_acls(bootstrap: str, resource_list: list[tuple[str, str]] | None = None, *, who: list[Who] | None = None,
              operations: list[str] | None = None, pattern_type: str = "any", timeout: float = DEFAULT_TIMEOUT_S,
              client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """The bindings that match the filters (DescribeAcls, one request per filter)."""
    admin = confluent_admin(bootstrap, client)
    rows: list[dict[str, Any]] = []
    for binding_filter in _filters(resource_list or [], who or [], operations or [], pattern_type):
        found = wait(admin.describe_acls(binding_filter, request_timeout=timeout), timeout, "the ACL list")
        rows += [_row(b) for b in found]
    return _sorted(rows)


def remove_acls(bootstrap: str, resource_list: list[tuple[str, str]] | None = None, *, who: list[Who] | None = None,
                operations: list[str] | None = None, pattern_type: str = "literal", timeout: float = DEFAULT_TIMEOUT_S,
                client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Delete the bindings that match the filters (one DeleteAcls request); the bindings deleted."""
    filters = _filters(resource_list or [], who or [], operations or [], pattern_type)
    admin = confluent_admin(bootstrap, client)
    futures = admin.delete_acls(filters, request_timeout=timeout)
    rows: list[dict[str, Any]] = []
    for future in futures.values():
        rows += [_row(b) for b in wait(future, timeout, "the ACL removal")]
    return _sorted(rows)


# -- command line --------------------------------------------------------------------------


def _resource_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--topic", type=non_empty, action="append", default=[], metavar="TOPIC", help="a topic ('*': every topic), repeatable")
    p.add_argument("--group", type=non_empty, action="append", default=[], metavar="GROUP", help="a consumer group ('*': every group), repeatable")
    p.add_argument("--transactional-id", type=non_empty, action="append", default=[], metavar="ID",
                   help="a transactional id ('*': every one), repeatable")
    p.add_argument("--cluster", action="store_true", help="the cluster resource (kafka-cluster)")
    p.add_argument("--operation", action="append", type=operation_name, default=[], metavar="OP",
                   help="Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, "
                        "IdempotentWrite or All; repeatable")


def _entry_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--allow-principal", action="append", type=_principal, default=[], metavar="PRINCIPAL",
                   help="a principal allowed (User:alice), repeatable")
    p.add_argument("--deny-principal", action="append", type=_principal, default=[], metavar="PRINCIPAL",
                   help="a principal denied, repeatable")
    p.add_argument("--allow-host", type=non_empty, action="append", default=[], metavar="HOST",
                   help="a host the allowed principals may come from (default *), repeatable")
    p.add_argument("--deny-host", type=non_empty, action="append", default=[], metavar="HOST",
                   help="a host the denied principals are denied from (default *), repeatable")


def _pattern_option(p: argparse.ArgumentParser, default: str, choices: tuple[str, ...]) -> None:
    p.add_argument("--resource-pattern-type", choices=choices, default=default, type=str.lower,
                   help=f"how resource names match: {', '.join(choices)} (default {default})")


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow acls``'s commands and options on its parser."""
    actions = add_family(parser)

    p = add_command(actions, "list", "ACL bindings, filtered by resource, principal and operation (DescribeAcls)", _list,
                    empty="no ACLs")
    _resource_options(p)
    p.add_argument("--principal", action="append", type=_principal, default=[], metavar="PRINCIPAL",
                   help="only this principal's bindings, repeatable")
    _pattern_option(p, "any", PATTERN_TYPES)

    p = add_command(actions, "add", "add ACL bindings: every resource x principal x host x operation given (CreateAcls)", _add)
    _resource_options(p)
    _entry_options(p)
    _pattern_option(p, "literal", ("literal", "prefixed"))

    p = add_command(actions, "remove", "remove the ACL bindings that match (DeleteAcls); reports what was deleted", _remove,
                    empty="no ACLs matched: nothing deleted")
    _resource_options(p)
    _entry_options(p)
    _pattern_option(p, "literal", PATTERN_TYPES)


def _resources(args: argparse.Namespace) -> list[tuple[str, str]]:
    return resources(args.topic, args.group, args.transactional_id, args.cluster)


def _who(args: argparse.Namespace) -> list[Who]:
    """remove's filters: each principal from each of its hosts (any host when none is given)."""
    allow_hosts: list[str | None] = list(args.allow_host) or [None]
    deny_hosts: list[str | None] = list(args.deny_host) or [None]
    return ([(p, h, "ALLOW") for p in args.allow_principal for h in allow_hosts]
            + [(p, h, "DENY") for p in args.deny_principal for h in deny_hosts])


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_acls(args.bootstrap_servers, _resources(args), who=[(p, None, "ANY") for p in args.principal],
                     operations=args.operation, pattern_type=args.resource_pattern_type, timeout=args.timeout,
                     client=args.client)


def _add(args: argparse.Namespace) -> list[dict[str, Any]]:
    return add_acls(args.bootstrap_servers, _resources(args),
                    entries(args.allow_principal, args.deny_principal, args.allow_host, args.deny_host), args.operation,
                    pattern_type=args.resource_pattern_type, timeout=args.timeout, client=args.client)


def _remove(args: argparse.Namespace) -> list[dict[str, Any]]:
    if (args.allow_host and not args.allow_principal) or (args.deny_host and not args.deny_principal):
        raise UsageError("--allow-host goes with --allow-principal, --deny-host with --deny-principal")
    if not (_resources(args) or args.allow_principal or args.deny_principal or args.operation):
        raise UsageError("name what to remove: a resource (--topic, --group, --transactional-id, --cluster), "
                         "a principal or an operation")
    return remove_acls(args.bootstrap_servers, _resources(args), who=_who(args), operations=args.operation,
                       pattern_type=args.resource_pattern_type, timeout=args.timeout, client=args.client)


__all__ = ["add_acls", "entries", "list_acls", "remove_acls", "resources"]
