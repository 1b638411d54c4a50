"""The ACL rules of ``security/acls.py`` (Kafka's StandardAuthorizerData and authorizeByResourceType),
the filters DescribeAcls and DeleteAcls select with, validation of new bindings, durability, and the
one log line a refusal is given (``broker/handlers/authz.py``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from onceflow.broker.handlers.authz import authorize, authorized_operations
from onceflow.config import BrokerConfig, ConfigError
from onceflow.protocol.errors import ErrorCode
from onceflow.security.acls import (
    ACLS_FILE,
    AclBinding,
    AclBindingFilter,
    StandardAuthorizer,
    bitfield,
    creation_error,
    parse_super_users,
)
from onceflow.security.authorizer import CLUSTER_NAME, AclOperation, AclPermissionType, PatternType, ResourceType
from onceflow.security.principal import ANONYMOUS, KafkaPrincipal, user

Op, Perm, Pat, Res = AclOperation, AclPermissionType, PatternType, ResourceType
ALICE, BOB = user("alice"), user("bob")
HOST = "10.0.0.1"


def acl(name: str, op: AclOperation, perm: AclPermissionType = Perm.ALLOW, *, principal: str = "User:alice",
        host: str = "*", pattern: PatternType = Pat.LITERAL, rtype: ResourceType = Res.TOPIC) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authorizer(*bindings: AclBinding, super_users: tuple[str, ...] = (), allow_if_none: bool = False) -> StandardAuthorizer:
    auth = StandardAuthorizer(None, super_users, allow_if_none)
    assert all(r.error is ErrorCode.none for r in auth.create_acls(list(bindings)))
    return auth


# (bindings, principal, host, operation, topic name, allowed?, why)
RULES: list[tuple[tuple[AclBinding, ...], KafkaPrincipal, str, AclOperation, str, bool, str]] = [
    ((), ALICE, HOST, Op.READ, "t", False, "no ACL: denied by default"),
    ((acl("t", Op.READ),), ALICE, HOST, Op.READ, "t", True, "literal allow"),
    ((acl("t", Op.READ),), BOB, HOST, Op.READ, "t", False, "another principal's allow"),
    ((acl("t", Op.READ),), ALICE, HOST, Op.WRITE, "t", False, "another operation"),
    ((acl("t", Op.READ),), ALICE, HOST, Op.READ, "t2", False, "a literal name is not a prefix"),
    ((acl("t", Op.READ, pattern=Pat.PREFIXED),), ALICE, HOST, Op.READ, "t2", True, "prefixed"),
    ((acl("t", Op.READ, pattern=Pat.PREFIXED),), ALICE, HOST, Op.READ, "u", False, "prefix not matching"),
    ((acl("*", Op.READ),), ALICE, HOST, Op.READ, "anything", True, "wildcard resource name"),
    ((acl("*", Op.READ, pattern=Pat.PREFIXED),), ALICE, HOST, Op.READ, "anything", False, "PREFIXED '*' is no wildcard"),
    ((acl("t", Op.READ, principal="User:*"),), BOB, HOST, Op.READ, "t", True, "User:* is every user"),
    ((acl("t", Op.READ, principal="Group:*"),), BOB, HOST, Op.READ, "t", False, "only User:* is a wildcard"),
    ((acl("t", Op.READ, host=HOST),), ALICE, HOST, Op.READ, "t", True, "the client's host"),
    ((acl("t", Op.READ, host="10.0.0.2"),), ALICE, HOST, Op.READ, "t", False, "another host"),
    ((acl("t", Op.READ), acl("t", Op.READ, Perm.DENY)), ALICE, HOST, Op.READ, "t", False, "DENY wins"),
    ((acl("t", Op.READ), acl("*", Op.READ, Perm.DENY)), ALICE, HOST, Op.READ, "t", False, "a wildcard DENY wins"),
    ((acl("t", Op.ALL),), ALICE, HOST, Op.ALTER_CONFIGS, "t", True, "ALL allows every operation"),
    ((acl("t", Op.READ), acl("t", Op.ALL, Perm.DENY)), ALICE, HOST, Op.READ, "t", False, "DENY ALL denies everything"),
    ((acl("t", Op.READ),), ALICE, HOST, Op.DESCRIBE, "t", True, "READ implies DESCRIBE"),
    ((acl("t", Op.WRITE),), ALICE, HOST, Op.DESCRIBE, "t", True, "WRITE implies DESCRIBE"),
    ((acl("t", Op.DELETE),), ALICE, HOST, Op.DESCRIBE, "t", True, "DELETE implies DESCRIBE"),
    ((acl("t", Op.ALTER),), ALICE, HOST, Op.DESCRIBE, "t", True, "ALTER implies DESCRIBE"),
    ((acl("t", Op.CREATE),), ALICE, HOST, Op.DESCRIBE, "t", False, "CREATE does not imply DESCRIBE"),
    ((acl("t", Op.ALTER_CONFIGS),), ALICE, HOST, Op.DESCRIBE_CONFIGS, "t", True, "ALTER_CONFIGS implies DESCRIBE_CONFIGS"),
    ((acl("t", Op.DESCRIBE),), ALICE, HOST, Op.READ, "t", False, "DESCRIBE implies nothing"),
    ((acl("t", Op.READ), acl("t", Op.DESCRIBE), acl("t", Op.READ, Perm.DENY)), ALICE, HOST, Op.DESCRIBE, "t", True,
     "a DENY READ does not deny DESCRIBE"),
    ((acl("t", Op.READ), acl("t", Op.WRITE, Perm.DENY)), ALICE, HOST, Op.DESCRIBE, "t", True,
     "implication is ALLOW's only: a DENY WRITE does not deny DESCRIBE"),
    ((acl("t", Op.READ, rtype=Res.GROUP),), ALICE, HOST, Op.READ, "t", False, "another resource type"),
]


@pytest.mark.parametrize(("bindings", "principal", "host", "operation", "name", "allowed", "why"), RULES,
                         ids=[r[-1] for r in RULES])
def test_the_rules(bindings: tuple[AclBinding, ...], principal: KafkaPrincipal, host: str, operation: AclOperation,
                   name: str, allowed: bool, why: str) -> None:
    assert authorizer(*bindings).authorize(principal, host, operation, Res.TOPIC, name) is allowed, why


def test_a_super_user_may_do_everything_whatever_denies_it() -> None:
    auth = authorizer(acl("t", Op.ALL, Perm.DENY, principal="User:*"), super_users=("User:admin",))
    assert auth.authorize(user("admin"), HOST, Op.WRITE, Res.TOPIC, "t")
    assert auth.authorize(user("admin"), HOST, Op.ALTER, Res.CLUSTER, CLUSTER_NAME)
    assert not auth.authorize(ALICE, HOST, Op.WRITE, Res.TOPIC, "t")


@pytest.mark.parametrize(("bindings", "name", "allowed"), [
    ((), "t", True),  # nothing about t: everyone
    ((acl("other", Op.READ),), "t", True),  # ACLs elsewhere do not count
    ((acl("t", Op.READ, principal="User:bob"),), "t", False),  # t has ACLs, none for alice: denied
    ((acl("t", Op.WRITE),), "t", False),  # alice's, for another operation: denied
    ((acl("t", Op.READ, pattern=Pat.PREFIXED, principal="User:bob"),), "t-1", False),  # a prefixed one counts
    ((acl("*", Op.READ, principal="User:bob"),), "t", False),  # so does the wildcard
], ids=["none", "elsewhere", "another principal", "another operation", "prefixed", "wildcard"])
def test_allow_everyone_if_no_acl_found_looks_at_the_resource_only(bindings: tuple[AclBinding, ...], name: str,
                                                                   allowed: bool) -> None:
    auth = authorizer(*bindings, allow_if_none=True)
    assert auth.authorize(ALICE, HOST, Op.READ, Res.TOPIC, name) is allowed


# authorize_any(WRITE, TOPIC) for alice: Kafka's authorizeByResourceType
ANY_CASES: list[tuple[tuple[AclBinding, ...], bool, str]] = [
    ((), False, "no ACL"),
    ((acl("t", Op.WRITE),), True, "a literal allow"),
    ((acl("t", Op.ALL),), True, "ALL"),
    ((acl("t", Op.READ),), False, "another operation (no implication here)"),
    ((acl("t", Op.WRITE, principal="User:bob"),), False, "another principal"),
    ((acl("t", Op.WRITE, principal="User:*"),), True, "User:*"),
    ((acl("t", Op.WRITE, host="10.9.9.9"),), False, "another host"),
    ((acl("t", Op.WRITE), acl("t", Op.WRITE, Perm.DENY)), False, "the same literal denied"),
    ((acl("t", Op.WRITE), acl("u", Op.WRITE, Perm.DENY)), True, "another literal denied"),
    ((acl("abc", Op.WRITE), acl("ab", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)), False, "a denied prefix dominates"),
    ((acl("abc", Op.WRITE, pattern=Pat.PREFIXED), acl("abc", Op.WRITE, Perm.DENY)), True,
     "a literal deny does not cancel a prefixed allow"),
    ((acl("ab", Op.WRITE, pattern=Pat.PREFIXED), acl("abc", Op.WRITE, Perm.DENY, pattern=Pat.PREFIXED)), True,
     "a longer denied prefix leaves the shorter allow"),
    ((acl("*", Op.WRITE),), True, "a wildcard allow"),
    ((acl("*", Op.WRITE), acl("*", Op.WRITE, Perm.DENY)), False, "a wildcard deny"),
    ((acl("t", Op.WRITE), acl("*", Op.ALL, Perm.DENY)), False, "a wildcard deny of ALL"),
    ((acl("t", Op.WRITE, rtype=Res.GROUP),), False, "another resource type"),
]


@pytest.mark.parametrize(("bindings", "allowed", "why"), ANY_CASES, ids=[c[-1] for c in ANY_CASES])
def test_authorize_any_is_kafkas_authorize_by_resource_type(bindings: tuple[AclBinding, ...], allowed: bool, why: str) -> None:
    assert authorizer(*bindings).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC) is allowed, why


def test_authorize_any_allows_super_users_and_the_default_rule() -> None:
    assert authorizer(super_users=("User:alice",)).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert authorizer(allow_if_none=True).authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)


BINDINGS = [
    acl("orders", Op.READ),
    acl("orders", Op.WRITE, Perm.DENY, principal="User:bob", host=HOST),
    acl("ord", Op.READ, pattern=Pat.PREFIXED),
    acl("*", Op.DESCRIBE),
    acl("audit", Op.READ),
    acl("orders", Op.READ, rtype=Res.GROUP),
]


@pytest.mark.parametrize(("acl_filter", "expected"), [
    (AclBindingFilter(), set(range(6))),
    (AclBindingFilter(Res.TOPIC), {0, 1, 2, 3, 4}),
    (AclBindingFilter(Res.TOPIC, "orders"), {0, 1}),  # ANY pattern: the exact name, either pattern type
    (AclBindingFilter(Res.TOPIC, "ord", Pat.ANY), {2}),
    (AclBindingFilter(Res.TOPIC, "orders", Pat.LITERAL), {0, 1}),
    (AclBindingFilter(Res.TOPIC, "ord", Pat.PREFIXED), {2}),
    (AclBindingFilter(Res.TOPIC, "orders", Pat.PREFIXED), set()),
    (AclBindingFilter(Res.TOPIC, "orders", Pat.MATCH), {0, 1, 2, 3}),  # exact, prefix, wildcard
    (AclBindingFilter(Res.TOPIC, "audit", Pat.MATCH), {3, 4}),
    (AclBindingFilter(Res.TOPIC, None, Pat.MATCH), {0, 1, 2, 3, 4}),
    (AclBindingFilter(Res.TOPIC, None, Pat.PREFIXED), {2}),
    (AclBindingFilter(principal="User:bob"), {1}),
    (AclBindingFilter(host=HOST), {1}),
    (AclBindingFilter(operation=Op.READ), {0, 2, 4, 5}),
    (AclBindingFilter(permission=Perm.DENY), {1}),
    (AclBindingFilter(Res.GROUP, "orders", Pat.MATCH), {5}),
], ids=["any", "topics", "name", "name any pattern", "literal", "prefixed", "prefixed exact only", "match",
        "match wildcard", "match no name", "prefixed no name", "principal", "host", "operation", "permission", "group"])
def test_filters_select_as_kafkas(acl_filter: AclBindingFilter, expected: set[int]) -> None:
    auth = authorizer(*BINDINGS)
    assert set(auth.acls(acl_filter)) == {BINDINGS[i] for i in expected}


def test_delete_removes_what_each_filter_matches_and_reports_it_per_filter() -> None:
    auth = authorizer(*BINDINGS)
    results = auth.delete_acls([AclBindingFilter(Res.TOPIC, "orders"), AclBindingFilter(Res.TOPIC, "orders", Pat.MATCH),
                                AclBindingFilter(Res.USER)])
    assert [set(r.deleted) for r in results] == [{BINDINGS[0], BINDINGS[1]}, {BINDINGS[0], BINDINGS[1], BINDINGS[2], BINDINGS[3]},
                                                 set()]
    assert all(r.error is ErrorCode.none for r in results)
    assert set(auth.acls()) == {BINDINGS[4], BINDINGS[5]}
    assert not auth.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders")


@pytest.mark.parametrize(("binding", "message"), [
    (acl("other", Op.ALTER, rtype=Res.CLUSTER), "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl("", Op.READ), "Invalid empty resource name"),
    (acl("t", Op.READ, rtype=Res.ANY), "Invalid resourceType ANY"),
    (acl("t", Op.READ, pattern=Pat.MATCH), "Invalid patternType MATCH"),
    (acl("t", Op.READ, pattern=Pat.ANY), "Invalid patternType ANY"),
    (acl("t", Op.ANY), "Invalid operation ANY"),
    (acl("t", Op.READ, Perm.ANY), "Invalid permissionType ANY"),
    (acl("t", Op.READ, principal="alice"),
     "Could not parse principal from `alice` (no colon is present separating the principal type from the principal name)"),
    (acl(CLUSTER_NAME, Op.ALTER, rtype=Res.CLUSTER), None),
    (acl("t", Op.READ, principal="Group:ops"), None),  # any Type:name
], ids=["cluster name", "empty name", "ANY type", "MATCH", "ANY pattern", "ANY operation", "ANY permission", "principal",
        "valid cluster", "valid other type"])
def test_a_new_binding_is_checked_as_kafka_checks_it(binding: AclBinding, message: str | None) -> None:
    assert creation_error(binding) == message
    result = StandardAuthorizer(None).create_acls([binding])[0]
    assert (result.error, result.message) == ((ErrorCode.invalid_request, message) if message else (ErrorCode.none, None))


def test_an_invalid_binding_fails_alone() -> None:
    auth = StandardAuthorizer(None)
    results = auth.create_acls([acl("t", Op.READ), acl("t", Op.ANY), acl("t", Op.READ)])
    assert [r.error for r in results] == [ErrorCode.none, ErrorCode.invalid_request, ErrorCode.none]
    assert auth.acls() == [acl("t", Op.READ)]  # created once; the second is already there


def test_wire_codes_unknown_to_kafka_are_unknown() -> None:
    binding = AclBinding.of(99, "t", 3, "User:a", "*", 3, 3)
    assert binding.resource_type is Res.UNKNOWN and binding.has_unknown()
    assert AclBindingFilter.of(2, None, 0, None, None, 1, 1).has_unknown()
    assert not AclBindingFilter.of(1, None, 1, None, None, 1, 1).has_unknown()


def test_acls_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / ACLS_FILE
    auth = StandardAuthorizer(path)
    auth.load()
    assert auth.acls() == [] and not path.exists()
    auth.create_acls(BINDINGS)
    auth.delete_acls([AclBindingFilter(principal="User:bob")])
    again = StandardAuthorizer(path)
    again.load()
    assert again.acls() == auth.acls() == sorted(set(BINDINGS) - {BINDINGS[1]})
    assert again.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "orders")
    assert json.loads(path.read_text())["version"] == 1


def test_the_file_is_written_before_the_change_is_made(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    auth = StandardAuthorizer(blocker / ACLS_FILE)  # writing there fails
    results = auth.create_acls([acl("t", Op.READ), acl("t", Op.ANY)])
    assert [r.error for r in results] == [ErrorCode.kafka_storage_error, ErrorCode.invalid_request]
    assert auth.acls() == [] and not auth.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")

    auth = StandardAuthorizer(tmp_path / ACLS_FILE)
    auth.create_acls([acl("t", Op.READ)])
    auth.path = blocker / ACLS_FILE
    result = auth.delete_acls([AclBindingFilter()])[0]
    assert (result.error, result.deleted) == (ErrorCode.kafka_storage_error, ())
    assert auth.acls() == [acl("t", Op.READ)]  # still there, still applied
    assert auth.authorize(ALICE, HOST, Op.READ, Res.TOPIC, "t")


def test_a_file_it_cannot_read_stops_the_broker(tmp_path: Path) -> None:
    (tmp_path / ACLS_FILE).write_text('{"version": 1, "acls": [{"resourceType": "TOPIC"}]}')
    with pytest.raises(ValueError, match="not an ACL file"):
        StandardAuthorizer.from_config(BrokerConfig({"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"}),
                                       tmp_path)


def test_the_configuration_turns_it_on() -> None:
    assert StandardAuthorizer.from_config(BrokerConfig(), Path("/nonexistent")) is None
    config = BrokerConfig({"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                           "super.users": " User:admin ;User:CN=broker;", "allow.everyone.if.no.acl.found": "true"})
    auth = StandardAuthorizer.from_config(config, Path("/nonexistent"))
    assert auth is not None and auth.super_users == {"User:admin", "User:CN=broker"} and auth.allow_if_no_acl_found
    with pytest.raises(ConfigError):
        parse_super_users("admin")


def _context(auth: StandardAuthorizer | None) -> tuple[SimpleNamespace, SimpleNamespace]:
    return SimpleNamespace(authorizer=auth), SimpleNamespace(principal=BOB, client_host="127.0.0.1")


def test_a_refusal_is_one_line_in_kafkas_words(caplog: pytest.LogCaptureFixture) -> None:
    broker, conn = _context(authorizer())
    with caplog.at_level(logging.INFO, logger="onceflow.authorizer"):
        assert not authorize(broker, conn, Op.WRITE, Res.TRANSACTIONAL_ID, "tx")  # type: ignore[arg-type]
        assert not authorize(broker, conn, Op.DESCRIBE, Res.TOPIC, "hidden", log_denied=False)  # type: ignore[arg-type]
    assert [r.getMessage() for r in caplog.records] == [
        "Principal = User:bob is Denied operation = WRITE from host = 127.0.0.1 on resource = TransactionalId:LITERAL:tx"]


def test_authorized_operations_are_kafkas_bitfield() -> None:
    broker, conn = _context(authorizer(acl("t", Op.READ, principal="User:bob"), acl("t", Op.ALTER_CONFIGS, principal="User:bob")))
    ops = authorized_operations(broker, conn, Res.TOPIC, "t")  # type: ignore[arg-type]
    assert ops == bitfield([Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS])
    none_broker, _ = _context(None)
    assert authorized_operations(none_broker, conn, Res.GROUP, "g") == 3400  # type: ignore[arg-type]  # every group operation
    assert authorize(none_broker, SimpleNamespace(principal=ANONYMOUS), Op.ALTER, Res.CLUSTER, CLUSTER_NAME)  # type: ignore[arg-type]
