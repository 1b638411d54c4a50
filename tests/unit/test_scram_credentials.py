"""``ScramCredentialStore``: KIP-554's outcomes as Kafka 4's controller gives them
(``ScramControlManager``, ``ScramImage.describe``), and credentials that outlive the store."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest

from onceflow import fileio
from onceflow.protocol.errors import ErrorCode
from onceflow.security import credentials as credentials_module
from onceflow.security.credentials import (
    FILE_NAME,
    AlterResult,
    CredentialInfo,
    ScramCredentialStore,
    ScramDeletion,
    ScramUpsertion,
    UserDescription,
)
from onceflow.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, ScramMechanism, credential_from_salted_password, salted_password

SHA256, SHA512 = SCRAM_SHA_256.code, SCRAM_SHA_512.code


def upsert(user: str, mechanism: int = SHA256, iterations: int = 4096, password: str = "pw", salt: bytes = b"salt") -> ScramUpsertion:
    scram = {SHA256: SCRAM_SHA_256, SHA512: SCRAM_SHA_512}.get(mechanism, SCRAM_SHA_256)
    return ScramUpsertion(user, mechanism, iterations, salt, salted_password(scram, password, salt, min(max(iterations, 1), 20000)))


def ok(*users: str) -> list[AlterResult]:
    return [AlterResult(user) for user in users]


@pytest.fixture
def store(tmp_path: Path) -> ScramCredentialStore:
    return ScramCredentialStore(tmp_path)


def test_an_upserted_credential_is_kafkas_stored_fields_and_never_the_password(store: ScramCredentialStore, tmp_path: Path) -> None:
    alteration = upsert("alice", SHA512, 8192, password="alice-secret")
    assert store.alter([], [alteration]) == ok("alice")
    credential = store.lookup("alice", SCRAM_SHA_512)
    assert credential == credential_from_salted_password(SCRAM_SHA_512, b"salt", alteration.salted_password, 8192)
    assert store.lookup("alice", SCRAM_SHA_256) is None and store.lookup("bob", SCRAM_SHA_512) is None
    text = (tmp_path / FILE_NAME).read_text()
    assert "alice-secret" not in text and alteration.salted_password.hex() not in text
    assert base64.b64encode(alteration.salted_password).decode() not in text
    assert stat.S_IMODE(os.stat(tmp_path / FILE_NAME).st_mode) & 0o077 == 0, "credentials are readable by the owner only"


def test_credentials_survive_a_new_store_on_the_same_directory(store: ScramCredentialStore, tmp_path: Path) -> None:
    store.alter([], [upsert("alice", SHA256), upsert("bob", SHA512, 16384)])
    store.alter([], [upsert("alice", SHA512, 5000, password="other")])
    store.alter([ScramDeletion("bob", SHA512)], [])
    again = ScramCredentialStore(tmp_path)
    for user in ("alice", "bob"):
        for mechanism in (SCRAM_SHA_256, SCRAM_SHA_512):
            assert again.lookup(user, mechanism) == store.lookup(user, mechanism)
    assert again.describe() == store.describe() == [
        UserDescription("alice", credentials=(CredentialInfo(SCRAM_SHA_256, 4096), CredentialInfo(SCRAM_SHA_512, 5000)))]


def test_a_leftover_temporary_file_is_removed_at_load(tmp_path: Path) -> None:
    ScramCredentialStore(tmp_path).alter([], [upsert("alice")])
    (tmp_path / (FILE_NAME + ".tmp")).write_text("half a write")
    store = ScramCredentialStore(tmp_path)
    assert not (tmp_path / (FILE_NAME + ".tmp")).exists()
    assert store.lookup("alice", SCRAM_SHA_256) is not None


@pytest.mark.parametrize("damage", ["not json", '{"version": 2, "users": {}}', '{"version": 1}',
                                    '{"version": 1, "users": {"a": {"SCRAM-SHA-1": {}}}}',
                                    '{"version": 1, "users": {"a": {"SCRAM-SHA-256": {"salt": "!!", "stored_key": "", "server_key": "", "iterations": 4096}}}}',
                                    '{"version": 1, "users": {"a": {"SCRAM-SHA-256": {"salt": "", "stored_key": "", "server_key": "", "iterations": "4096"}}}}',
                                    '{"version": 1, "users": {"a": {}}}', "[]"])
def test_a_damaged_file_stops_the_broker_rather_than_lose_credentials(tmp_path: Path, damage: str) -> None:
    (tmp_path / FILE_NAME).write_text(damage)
    with pytest.raises(RuntimeError, match=f"{FILE_NAME} is damaged .*refusing to start without the SCRAM credentials"):
        ScramCredentialStore(tmp_path)


def test_a_failed_write_changes_nothing(store: ScramCredentialStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store.alter([], [upsert("alice")])
    before = (tmp_path / FILE_NAME).read_bytes()

    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(credentials_module, "atomic_write", full_disk)
    results = store.alter([ScramDeletion("alice", SHA256)], [upsert("bob"), upsert("", SHA256)])
    assert results == [AlterResult("alice", ErrorCode.kafka_storage_error, "The credentials could not be written: No space left on device"),
                       AlterResult("bob", ErrorCode.kafka_storage_error, "The credentials could not be written: No space left on device"),
                       AlterResult("", ErrorCode.unacceptable_credential, "Username must not be empty")]
    assert store.lookup("alice", SCRAM_SHA_256) is not None and store.lookup("bob", SCRAM_SHA_256) is None
    assert (tmp_path / FILE_NAME).read_bytes() == before
    monkeypatch.setattr(credentials_module, "atomic_write", fileio.atomic_write)
    assert store.alter([ScramDeletion("alice", SHA256)], []) == ok("alice")


def test_only_a_change_writes(store: ScramCredentialStore, tmp_path: Path) -> None:
    assert store.alter([], []) == []
    assert store.alter([ScramDeletion("nobody", SHA256)], [upsert("", SHA256)]) == [
        AlterResult("nobody", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        AlterResult("", ErrorCode.unacceptable_credential, "Username must not be empty")]
    assert not (tmp_path / FILE_NAME).exists()


# -- Alter: Kafka 4's outcomes ----------------------------------------------------------------


@pytest.mark.parametrize(("iterations", "message"), [(4095, "Too few iterations"), (1, "Too few iterations"), (-5, "Too few iterations"),
                                                     (16385, "Too many iterations"), (2**31 - 1, "Too many iterations")])
def test_iterations_outside_kafkas_bounds_are_unacceptable(store: ScramCredentialStore, iterations: int, message: str) -> None:
    for mechanism in (SHA256, SHA512):
        alteration = ScramUpsertion("alice", mechanism, iterations, b"salt", b"x" * 32)
        assert store.alter([], [alteration]) == [AlterResult("alice", ErrorCode.unacceptable_credential, message)]
    assert store.describe() == []


@pytest.mark.parametrize("iterations", [4096, 16384])
def test_the_bounds_themselves_are_accepted(store: ScramCredentialStore, iterations: int) -> None:
    assert store.alter([], [upsert("alice", SHA512, iterations)]) == ok("alice")


@pytest.mark.parametrize("code", [0, 3, 10, -1, 127])
def test_an_unknown_mechanism_code_is_unsupported(store: ScramCredentialStore, code: int) -> None:
    results = store.alter([ScramDeletion("a", code)], [ScramUpsertion("b", code, 4096, b"s", b"p")])
    assert results == [AlterResult(user, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism") for user in ("a", "b")]


def test_an_empty_user_name_is_unacceptable_before_anything_else(store: ScramCredentialStore) -> None:
    # Kafka's AlterUserScramCredentialsRequestTest.testAlterEmptyUser: one result, whatever else the empty name did.
    results = store.alter([ScramDeletion("", SHA256), ScramDeletion("", 9)], [ScramUpsertion("", 9, 1, b"", b"")])
    assert results == [AlterResult("", ErrorCode.unacceptable_credential, "Username must not be empty")]


def test_an_empty_salted_password_is_unacceptable(store: ScramCredentialStore) -> None:
    assert store.alter([], [ScramUpsertion("alice", SHA256, 4096, b"salt", b"")]) == [
        AlterResult("alice", ErrorCode.unacceptable_credential, "Salted password must not be empty")]


def test_deleting_what_does_not_exist_is_resource_not_found(store: ScramCredentialStore) -> None:
    store.alter([], [upsert("alice", SHA256)])
    assert store.alter([ScramDeletion("alice", SHA512), ScramDeletion("bob", SHA256)], []) == [
        AlterResult("alice", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist"),
        AlterResult("bob", ErrorCode.resource_not_found, "Attempt to delete a user credential that does not exist")]
    assert store.lookup("alice", SCRAM_SHA_256) is not None


@pytest.mark.parametrize(("deletions", "upsertions"), [
    ([ScramDeletion("alice", SHA256), ScramDeletion("alice", SHA256)], []),
    ([], [upsert("alice", SHA256), upsert("alice", SHA256)]),
    ([ScramDeletion("alice", SHA256)], [upsert("alice", SHA256)]),
    # Kafka 4 keys alterations by user: two mechanisms of one user in one request are a duplicate too.
    ([], [upsert("alice", SHA256), upsert("alice", SHA512)]),
    ([ScramDeletion("alice", SHA256)], [upsert("alice", SHA512)]),
    ([ScramDeletion("alice", SHA256), ScramDeletion("alice", SHA512)], []),
], ids=["delete-twice", "upsert-twice", "delete-and-upsert", "two-mechanisms", "delete-one-upsert-other", "delete-both"])
def test_a_user_altered_twice_in_one_request_is_a_duplicate_and_nothing_of_it_changes(
        store: ScramCredentialStore, deletions: list[ScramDeletion], upsertions: list[ScramUpsertion]) -> None:
    store.alter([], [upsert("alice", SHA256, password="old")])
    store.alter([], [upsert("alice", SHA512, password="old")])
    before = store.describe(), store.lookup("alice", SCRAM_SHA_256), store.lookup("alice", SCRAM_SHA_512)
    results = store.alter(deletions, [*upsertions, upsert("bob")])
    assert results == [AlterResult("bob"),
                       AlterResult("alice", ErrorCode.duplicate_resource, "A user credential cannot be altered twice in the same request")]
    assert (store.describe(["alice"]), store.lookup("alice", SCRAM_SHA_256), store.lookup("alice", SCRAM_SHA_512)) == \
           ([d for d in before[0] if d.user == "alice"], before[1], before[2])
    assert store.lookup("bob", SCRAM_SHA_256) is not None


def test_a_users_first_error_stands(store: ScramCredentialStore) -> None:
    """Kafka's testAlterUnknownMechanism: after user1's unknown mechanism, its valid deletion is not looked at."""
    store.alter([], [upsert("user1")])
    results = store.alter([ScramDeletion("user1", 0), ScramDeletion("user1", SHA256), ScramDeletion("user2", 10)],
                          [ScramUpsertion("user4", 0, 8192, b"s", b"p"), upsert("user4", SHA256, 8192), ScramUpsertion("user5", 10, 8192, b"s", b"p")])
    assert [(r.user, r.error) for r in results] == [(user, ErrorCode.unsupported_sasl_mechanism) for user in ("user1", "user2", "user4", "user5")]
    assert store.lookup("user1", SCRAM_SHA_256) is not None and store.lookup("user4", SCRAM_SHA_256) is None


def test_results_list_deletions_then_upsertions_then_errors(store: ScramCredentialStore) -> None:
    store.alter([], [upsert("d1"), upsert("d2")])
    results = store.alter([ScramDeletion("d2", SHA256), ScramDeletion("gone", SHA256), ScramDeletion("d1", SHA256)],
                          [upsert("u1", SHA512), upsert("bad", SHA256, 10), upsert("u2")])
    assert [(r.user, r.error) for r in results] == [
        ("d2", ErrorCode.none), ("d1", ErrorCode.none), ("u1", ErrorCode.none), ("u2", ErrorCode.none),
        ("gone", ErrorCode.resource_not_found), ("bad", ErrorCode.unacceptable_credential)]
    assert all(r.message is None for r in results[:4])
    assert [d.user for d in store.describe()] == ["u1", "u2"]


def test_an_upsertion_replaces_the_users_credential_for_that_mechanism_only(store: ScramCredentialStore) -> None:
    store.alter([], [upsert("alice", SHA256, password="one")])
    store.alter([], [upsert("alice", SHA512, password="one")])
    sha512 = store.lookup("alice", SCRAM_SHA_512)
    store.alter([], [upsert("alice", SHA256, 9000, password="two")])
    assert store.lookup("alice", SCRAM_SHA_256).iterations == 9000  # type: ignore[union-attr]
    assert store.lookup("alice", SCRAM_SHA_512) == sha512


# -- Describe -----------------------------------------------------------------------------------


def test_describe_all_lists_every_user_with_a_credential(store: ScramCredentialStore) -> None:
    assert store.describe() == store.describe([]) == []
    store.alter([], [upsert("zed", SHA512, 8192)])
    store.alter([], [upsert("amy", SHA512, 4096)])
    store.alter([], [upsert("amy", SHA256, 5000)])
    both = (CredentialInfo(SCRAM_SHA_256, 5000), CredentialInfo(SCRAM_SHA_512, 4096))
    expected = [UserDescription("amy", credentials=both), UserDescription("zed", credentials=(CredentialInfo(SCRAM_SHA_512, 8192),))]
    assert store.describe() == store.describe(None) == store.describe([]) == expected


def test_describe_named_users(store: ScramCredentialStore) -> None:
    store.alter([], [upsert("user1"), upsert("user2", SHA512)])
    assert store.describe(["user2", "unknownUser", "user1", "user2", ""]) == [
        UserDescription("user2", ErrorCode.duplicate_resource,
                        "Cannot describe SCRAM credentials for the same user twice in a single request: user2"),
        UserDescription("unknownUser", ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: unknownUser"),
        UserDescription("user1", credentials=(CredentialInfo(SCRAM_SHA_256, 4096),)),
        UserDescription("", ErrorCode.resource_not_found, "Attempt to describe a user credential that does not exist: "),
    ]


def test_a_user_whose_last_credential_is_deleted_is_gone(store: ScramCredentialStore, tmp_path: Path) -> None:
    store.alter([], [upsert("alice")])
    assert store.alter([ScramDeletion("alice", SHA256)], []) == ok("alice")
    assert store.describe(["alice"])[0].error == ErrorCode.resource_not_found
    assert json.loads((tmp_path / FILE_NAME).read_text())["users"] == {}
    assert ScramCredentialStore(tmp_path).describe() == []


def test_mechanism_codes_are_kips() -> None:
    assert [(m.name, m.code, m.min_iterations, m.max_iterations) for m in (SCRAM_SHA_256, SCRAM_SHA_512)] == [
        ("SCRAM-SHA-256", 1, 4096, 16384), ("SCRAM-SHA-512", 2, 4096, 16384)]
    assert isinstance(SCRAM_SHA_256, ScramMechanism)


def test_add_scram_takes_kafka_storages_form(tmp_path: Path) -> None:
    from onceflow.security.credentials import add_users, parse_add_scram
    from onceflow.security.scram import SCRAM_SHA_256, SCRAM_SHA_512, make_credential

    first = parse_add_scram('SCRAM-SHA-256=[name=alice,password=alice-secret]')
    assert (first.user, first.mechanism, first.iterations, len(first.salt)) == ("alice", 1, 4096, 32)
    salted = parse_add_scram('scram-sha-512=[name="bob",password="b0b, with a comma",iterations=8192,salt="c2FsdHk="]')
    assert (salted.user, salted.mechanism, salted.iterations, salted.salt) == ("bob", 2, 8192, b"salty")
    assert add_users(tmp_path, [first, salted]) == ["alice/SCRAM-SHA-256", "bob/SCRAM-SHA-512"]
    store = ScramCredentialStore(tmp_path)
    assert store.lookup("bob", SCRAM_SHA_512) == make_credential(SCRAM_SHA_512, "b0b, with a comma", b"salty", 8192)
    assert store.lookup("alice", SCRAM_SHA_256) is not None and "alice-secret" not in store.path.read_text()
    for bad, message in (("alice:Secret1", "expected SCRAM-SHA-256"), ("SCRAM-SHA256=[name=a,password=Secret1]", "expected"),
                         ("SCRAM-SHA-256=[name=a]", "password are required"),
                         ("SCRAM-SHA-256=[name=a,password=Secret1,colour=red]", "unknown: colour"),
                         ("SCRAM-SHA-256=[name=a,password=Secret1,name=admin]", "name is given twice"),
                         ("SCRAM-SHA-256=[name=a,password=Secret1,Secret2]", "expected key=value"),
                         ("SCRAM-SHA-256=[name=a,password=Secret1,iterations=many]", "must be a number"),
                         ("SCRAM-SHA-256=[name=a,password=Secret1,salt=!!]", "salt base64")):
        with pytest.raises(ValueError, match=message) as refused:
            parse_add_scram(bad)
        assert "Secret" not in str(refused.value), "a password is never quoted back"
    with pytest.raises(ValueError, match="--add-scram a"):
        add_users(tmp_path, [parse_add_scram("SCRAM-SHA-256=[name=a,password=b,iterations=100]")])


def test_add_scram_at_a_later_start_keeps_a_password_changed_since(tmp_path: Path) -> None:
    """kafka-storage format --add-scram runs once: the start-up users must not undo a rotation."""
    from onceflow.security.credentials import add_users, parse_add_scram, upsertion
    from onceflow.security.scram import SCRAM_SHA_256

    add_users(tmp_path, [parse_add_scram("SCRAM-SHA-256=[name=alice,password=old-leaked]")])
    ScramCredentialStore(tmp_path).alter((), [upsertion(SCRAM_SHA_256, "alice", "rotated-new")])
    rotated = ScramCredentialStore(tmp_path).lookup("alice", SCRAM_SHA_256)
    assert add_users(tmp_path, [parse_add_scram("SCRAM-SHA-256=[name=alice,password=old-leaked]")]) == []
    assert ScramCredentialStore(tmp_path).lookup("alice", SCRAM_SHA_256) == rotated
