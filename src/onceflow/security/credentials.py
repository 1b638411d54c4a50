"""SCRAM credentials, durable in the data directory (KIP-554: Describe/AlterUserScramCredentials).

Theory of operation: for each (user, mechanism) the store keeps what Kafka's
controller keeps (``UserScramCredentialRecord``): the salt, StoredKey,
ServerKey and iteration count, never the password nor the salted password
(``scram.py`` explains the fields).  They live in memory and in one file,
``<data dir>/scram-credentials.json`` (base64 fields, mode 0600), loaded when
the store is made, so credentials survive a restart.

A change is made prepare, write, apply (as the transaction coordinator's
transitions are): ``alter`` checks the whole request and builds the new
table without touching the current one, writes it with ``fileio.atomic_write``
(fsynced, renamed), and only then makes it current.  A write that fails
changes nothing, and each user that would have changed is told
KAFKA_STORAGE_ERROR.  Lookups made during authentication see the table of
the last completed change, so a new credential serves the next login.

The outcomes are Kafka 4's (``ScramControlManager.alterCredentials`` and
``ScramImage.describe``), as values:

* Alter: a user named twice in one request, in deletions or upsertions,
  whatever the mechanisms, is DUPLICATE_RESOURCE (Kafka 4 keys alterations by
  user, stricter than KIP-554's ZooKeeper-era (user, mechanism)); an empty
  user or iterations outside 4096..16384 is UNACCEPTABLE_CREDENTIAL; a
  mechanism code other than 1 (SCRAM-SHA-256) or 2 (SCRAM-SHA-512) is
  UNSUPPORTED_SASL_MECHANISM; deleting a credential that does not exist is
  RESOURCE_NOT_FOUND.  A user's first error stands; later mentions of that user
  are not looked at.  Other users of the same request still change.  Results:
  the deletions made, the upsertions made, then the errors.
* Describe: no names (null or empty) describes every user that has a
  credential; a name given twice is DUPLICATE_RESOURCE, a name without any
  credential RESOURCE_NOT_FOUND.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import secrets
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..fileio import atomic_write
from ..protocol.errors import ErrorCode
from .scram import (
    BY_CODE,
    BY_NAME,
    MECHANISMS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
    salted_password,
)

log = logging.getLogger(__name__)

FILE_NAME = "scram-credentials.json"
_FORMAT_VERSION = 1
_TMP_SUFFIX = ".tmp"

DUPLICATE_ALTERATION = "A user credential cannot be altered twice in the same request"
DUPLICATE_DESCRIBE = "Cannot describe SCRAM credentials for the same user twice in a single request: "
DESCRIBE_MISSING = "Attempt to describe a user credential that does not exist: "
DELETE_MISSING = "Attempt to delete a user credential that does not exist"


@dataclass(frozen=True, slots=True)
class ScramDeletion:
    """AlterUserScramCredentials' ``ScramCredentialDeletion``; ``mechanism`` is the wire code."""

    user: str
    mechanism: int


@dataclass(frozen=True, slots=True)
class ScramUpsertion:
    """AlterUserScramCredentials' ``ScramCredentialUpsertion``: the client salted the password."""

    user: str
    mechanism: int
    iterations: int
    salt: bytes = field(repr=False)
    salted_password: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class AlterResult:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None


@dataclass(frozen=True, slots=True)
class CredentialInfo:
    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True, slots=True)
class UserDescription:
    user: str
    error: ErrorCode = ErrorCode.none
    message: str | None = None
    credentials: tuple[CredentialInfo, ...] = ()


#: user -> mechanism name -> credential
_Table = dict[str, dict[str, ScramCredential]]


class ScramCredentialStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / FILE_NAME
        self._users: _Table = self._load()

    # -- reading ------------------------------------------------------------------

    def lookup(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        """The user's credential for the mechanism, None if it has none (authentication's question)."""
        return self._users.get(user, {}).get(mechanism.name)

    def describe(self, users: Sequence[str] | None = None) -> list[UserDescription]:
        """DescribeUserScramCredentials: every user with a credential (sorted) when ``users`` is
        None or empty, else each name given, in the order first given."""
        if not users:
            return [self._describe_one(user) for user in sorted(self._users)]
        counts = Counter(users)
        out = []
        for user in dict.fromkeys(users):
            if counts[user] > 1:
                out.append(UserDescription(user, ErrorCode.duplicate_resource, DUPLICATE_DESCRIBE + user))
            elif user not in self._users:
                out.append(UserDescription(user, ErrorCode.resource_not_found, DESCRIBE_MISSING + user))
            else:
                out.append(self._describe_one(user))
        return out

    def _describe_one(self, user: str) -> UserDescription:
        held = self._users[user]
        infos = tuple(CredentialInfo(BY_NAME[name], held[name].iterations) for name in sorted(held, key=lambda n: BY_NAME[n].code))
        return UserDescription(user, credentials=infos)

    # -- changing -----------------------------------------------------------------

    def alter(self, deletions: Sequence[ScramDeletion], upsertions: Sequence[ScramUpsertion]) -> list[AlterResult]:
        """AlterUserScramCredentials, all of it: checked, written, then applied (module docstring)."""
        to_delete: dict[str, ScramDeletion] = {}
        to_upsert: dict[str, ScramUpsertion] = {}
        errors: dict[str, AlterResult] = {}
        for deletion in deletions:
            if deletion.user in errors:
                continue
            if to_delete.pop(deletion.user, None) is not None:
                errors[deletion.user] = AlterResult(deletion.user, ErrorCode.duplicate_resource, DUPLICATE_ALTERATION)
            elif (refused := self._check_deletion(deletion)) is not None:
                errors[deletion.user] = refused
            else:
                to_delete[deletion.user] = deletion
        for upsertion in upsertions:
            if upsertion.user in errors:
                continue
            if to_delete.pop(upsertion.user, None) is not None or to_upsert.pop(upsertion.user, None) is not None:
                errors[upsertion.user] = AlterResult(upsertion.user, ErrorCode.duplicate_resource, DUPLICATE_ALTERATION)
            elif (refused := _check_upsertion(upsertion)) is not None:
                errors[upsertion.user] = refused
            else:
                to_upsert[upsertion.user] = upsertion
        if not to_delete and not to_upsert:
            return list(errors.values())
        table = self._prepare(to_delete.values(), to_upsert.values())
        changed = [*to_delete, *to_upsert]
        try:
            self._write(table)
        except OSError as exc:
            log.error("AlterUserScramCredentials: writing %s failed, nothing changed: %s", self.path, exc)
            message = f"The credentials could not be written: {exc.strerror or exc}"
            return [AlterResult(user, ErrorCode.kafka_storage_error, message) for user in changed] + list(errors.values())
        self._users = table
        log.info("SCRAM credentials changed: deleted %s, upserted %s",
                 sorted(f"{d.user}/{BY_CODE[d.mechanism].name}" for d in to_delete.values()),
                 sorted(f"{u.user}/{BY_CODE[u.mechanism].name}" for u in to_upsert.values()))
        return [AlterResult(user) for user in changed] + list(errors.values())

    def _check_deletion(self, deletion: ScramDeletion) -> AlterResult | None:
        refused = _check_user_and_mechanism(deletion.user, deletion.mechanism)
        if refused is None and self.lookup(deletion.user, BY_CODE[deletion.mechanism]) is None:
            refused = AlterResult(deletion.user, ErrorCode.resource_not_found, DELETE_MISSING)
        return refused

    def _prepare(self, deletions: Iterable[ScramDeletion], upsertions: Iterable[ScramUpsertion]) -> _Table:
        """The table after the change; the current one is not touched."""
        table = {user: dict(held) for user, held in self._users.items()}
        for deletion in deletions:
            held = table[deletion.user]
            del held[BY_CODE[deletion.mechanism].name]
            if not held:
                del table[deletion.user]
        for upsertion in upsertions:
            mechanism = BY_CODE[upsertion.mechanism]
            table.setdefault(upsertion.user, {})[mechanism.name] = credential_from_salted_password(
                mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations)
        return table

    # -- the file -----------------------------------------------------------------

    def _write(self, table: _Table) -> None:
        document = {"version": _FORMAT_VERSION, "users": {
            user: {name: _encode(credential) for name, credential in sorted(held.items())} for user, held in sorted(table.items())}}
        atomic_write(self.path, json.dumps(document, indent=1) + "\n", tmp_suffix=_TMP_SUFFIX, mode=0o600)

    def _load(self) -> _Table:
        self.path.with_name(self.path.name + _TMP_SUFFIX).unlink(missing_ok=True)  # a write a crash interrupted
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(text)
            if document.get("version") != _FORMAT_VERSION:
                raise ValueError(f"version {document.get('version')!r}, expected {_FORMAT_VERSION}")
            table: _Table = {}
            for user, held in document["users"].items():
                if not held or not all(name in BY_NAME for name in held):
                    raise ValueError(f"user {user!r}: mechanisms {sorted(held)}")
                table[str(user)] = {name: _decode(fields) for name, fields in held.items()}
        except (ValueError, KeyError, TypeError, AttributeError, binascii.Error) as exc:
            raise RuntimeError(f"{self.path} is damaged ({exc}); refusing to start without the SCRAM credentials it holds") from exc
        return table


def _check_user_and_mechanism(user: str, mechanism: int) -> AlterResult | None:
    if not user:
        return AlterResult(user, ErrorCode.unacceptable_credential, "Username must not be empty")
    if mechanism not in BY_CODE:
        return AlterResult(user, ErrorCode.unsupported_sasl_mechanism, "Unknown SCRAM mechanism")
    return None


def _check_upsertion(upsertion: ScramUpsertion) -> AlterResult | None:
    refused = _check_user_and_mechanism(upsertion.user, upsertion.mechanism)
    if refused is not None:
        return refused
    mechanism = BY_CODE[upsertion.mechanism]
    if upsertion.iterations < mechanism.min_iterations:
        return AlterResult(upsertion.user, ErrorCode.unacceptable_credential, "Too few iterations")
    if upsertion.iterations > mechanism.max_iterations:
        return AlterResult(upsertion.user, ErrorCode.unacceptable_credential, "Too many iterations")
    if not upsertion.salted_password:
        # Kafka fails here too, by accident (an HMAC with an empty key: UNKNOWN_SERVER_ERROR).
        return AlterResult(upsertion.user, ErrorCode.unacceptable_credential, "Salted password must not be empty")
    return None


def _encode(credential: ScramCredential) -> dict[str, Any]:
    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    return {"salt": b64(credential.salt), "stored_key": b64(credential.stored_key), "server_key": b64(credential.server_key),
            "iterations": credential.iterations}


def _decode(fields: Mapping[str, Any]) -> ScramCredential:
    def raw(name: str) -> bytes:
        return base64.b64decode(str(fields[name]), validate=True)

    iterations = fields["iterations"]
    if not isinstance(iterations, int) or iterations <= 0:
        raise ValueError(f"iterations {iterations!r}")
    return ScramCredential(raw("salt"), raw("stored_key"), raw("server_key"), iterations)


# -- the first users (Kafka's ``kafka-storage format --add-scram``) -----------------------------------

#: kafka-storage's iterations when --add-scram names none.
DEFAULT_ITERATIONS = 4096
_ADD_SCRAM = re.compile(r"^\s*(SCRAM-SHA-256|SCRAM-SHA-512)\s*=\s*\[(.*)\]\s*$", re.IGNORECASE | re.DOTALL)
#: One ``key=value`` of the list: the value bare (no comma) or in double quotes (anything but a quote).
_FIELD = re.compile(r'\s*([A-Za-z]+)\s*=\s*(?:"([^"]*)"|([^,"]*?))\s*(?:,|$)')


def upsertion(mechanism: ScramMechanism, name: str, password: str, iterations: int = DEFAULT_ITERATIONS,
              salt: bytes | None = None) -> ScramUpsertion:
    """A credential for ``name`` as AlterUserScramCredentials carries it (the password salted here)."""
    salt = secrets.token_bytes(32) if salt is None else salt
    return ScramUpsertion(name, mechanism.code, iterations, salt, salted_password(mechanism, password, salt, iterations))


def parse_add_scram(spec: str) -> ScramUpsertion:
    """``SCRAM-SHA-256=[name=alice,password=alice-secret]`` (optionally ``iterations=8192`` and a
    base64 ``salt=...``), the form ``kafka-storage format --add-scram`` takes; a value with a comma
    goes in double quotes.  Raises ValueError naming what is wrong, never quoting a value back (it
    may be the password)."""
    match = _ADD_SCRAM.match(spec)
    if match is None:
        raise ValueError("--add-scram: expected SCRAM-SHA-256=[name=USER,password=PASSWORD] (or SCRAM-SHA-512)")
    mechanism = next(m for m in MECHANISMS if m.name == match.group(1).upper())
    body, fields, pos = match.group(2), {}, 0
    while pos < len(body):
        field_match = _FIELD.match(body, pos)
        if field_match is None or field_match.end() == pos:
            raise ValueError(f"--add-scram {mechanism.name}: expected key=value or key=\"value\" at character {pos + 1}")
        key = field_match.group(1)
        if key in fields:
            raise ValueError(f"--add-scram {mechanism.name}: {key} is given twice")
        fields[key] = field_match.group(2) if field_match.group(2) is not None else field_match.group(3)
        pos = field_match.end()
    unknown = set(fields) - {"name", "password", "iterations", "salt"}
    if unknown or not fields.get("name") or "password" not in fields:
        raise ValueError(f"--add-scram {mechanism.name}: name and password are required; iterations and salt "
                         f"are optional{'; unknown: ' + ', '.join(sorted(unknown)) if unknown else ''}")
    try:
        iterations = int(fields.get("iterations", DEFAULT_ITERATIONS))
        salt = base64.b64decode(fields["salt"], validate=True) if "salt" in fields else None
    except (ValueError, binascii.Error):
        raise ValueError(f"--add-scram {mechanism.name}: iterations must be a number and salt base64") from None
    return upsertion(mechanism, fields["name"], fields["password"], iterations, salt)


def add_users(data_dir: str | Path, upsertions: Sequence[ScramUpsertion]) -> list[str]:
    """Store the first users' credentials before the broker starts, so that a cluster whose every
    listener needs SASL can be reached at all.  As ``kafka-storage format --add-scram`` runs once, a
    user who already has a credential for the mechanism keeps it (a password changed since with
    ``onceflow users add`` is not turned back at the next start); returns the ``user/mechanism``
    pairs stored.  Raises ValueError on one AlterUserScramCredentials would refuse."""
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    store = ScramCredentialStore(Path(data_dir))
    stored = []
    for item in upsertions:  # one at a time: a user may have both mechanisms
        mechanism = BY_CODE[item.mechanism]
        if store.lookup(item.user, mechanism) is not None:
            log.info("--add-scram: %s already has a %s credential; keeping it", item.user, mechanism.name)
            continue
        for result in store.alter((), [item]):
            if result.error is not ErrorCode.none:
                raise ValueError(f"--add-scram {result.user}: {result.message or result.error.name}")
        stored.append(f"{item.user}/{mechanism.name}")
    return stored
