"""``onceflow users list|add|remove``: SASL/SCRAM credentials, through confluent-kafka's AdminClient.

Theory of operation
-------------------
A SCRAM user is a name with a credential per mechanism (SCRAM-SHA-256,
SCRAM-SHA-512): a salt, an iteration count and keys derived from the
password (RFC 5802).  The brokers keep only those; the password itself is
never stored, and this tool never prints it.

* ``list``: DescribeUserScramCredentials, every user or the ones named:
  one row per user and mechanism with its iteration count.
* ``add``: AlterUserScramCredentials with an upsertion, as
  ``kafka-configs.sh --alter --add-config 'SCRAM-SHA-256=[iterations=4096,password=...]'``
  does: the user is created, or its credential for that mechanism replaced.
  The password comes from ``--password`` (seen by anyone who can list the
  machine's processes), or with ``--password-stdin`` from standard input: a
  prompt without echo on a terminal (asked twice), else its first line.
  The salt is the client's (librdkafka draws a random one).
* ``remove``: AlterUserScramCredentials with a deletion per mechanism:
  the one given, or every one the user has.

User names are non-empty UTF-8 and ``--password`` UTF-8 text, checked by
the parser (``cliargs``); a password read from standard input is checked
the same way before it is sent: librdkafka crashes on text that is not.

The iteration count defaults to 4096, ``kafka-configs.sh``'s default and
Kafka's minimum; brokers refuse fewer than 4096 and more than 16384.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import Any

from ..cliargs import name as user_name
from ..cliargs import positive_int
from ..clientconfig import NO_SETTINGS, ClientSettings
from .common import DEFAULT_TIMEOUT_S, ToolError, UsageError, add_command, add_family, confluent_admin, wait

MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: kafka-configs.sh's default, and the least Kafka accepts; Kafka's most is 16384.
DEFAULT_ITERATIONS = 4096
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


def _mechanism(text: str) -> str:
    folded = text.strip().upper().replace("_", "-")
    if folded not in MECHANISMS:
        raise argparse.ArgumentTypeError(f"expected {' or '.join(MECHANISMS)}, got {text!r}")
    return folded


def _password(text: str) -> str:
    """argparse type of ``--password``: UTF-8 text; refused without being repeated (it is a secret)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError("expected UTF-8 text (the password is not shown)") from None
    return text


def _confluent_mechanism(name: str) -> Any:
    from confluent_kafka.admin import ScramMechanism

    return ScramMechanism[name.replace("-", "_")]


def _mechanism_name(mechanism: Any) -> str:
    return str(getattr(mechanism, "name", mechanism)).replace("_", "-")


def list_users(bootstrap: str, users: list[str] | None = None, *, timeout: float = DEFAULT_TIMEOUT_S,
               client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """One row per user and mechanism: its iteration count (DescribeUserScramCredentials)."""
    admin = confluent_admin(bootstrap, client)
    if users:
        futures = admin.describe_user_scram_credentials(list(users), request_timeout=timeout)
        described = {user: wait(future, timeout, f"user {user!r}") for user, future in futures.items()}
    else:
        described = wait(admin.describe_user_scram_credentials(request_timeout=timeout), timeout, "the user list")
    rows = [{"user": user, "mechanism": _mechanism_name(info.mechanism), "iterations": info.iterations}
            for user, description in described.items() for info in description.scram_credential_infos]
    return sorted(rows, key=lambda r: (r["user"], r["mechanism"]))


def add_user(bootstrap: str, user: str, password: str, *, mechanism: str = "SCRAM-SHA-256",
             iterations: int = DEFAULT_ITERATIONS, timeout: float = DEFAULT_TIMEOUT_S,
             client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Create ``user``'s credential for ``mechanism``, or replace it (AlterUserScramCredentials)."""
    from confluent_kafka.admin import ScramCredentialInfo, UserScramCredentialUpsertion

    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise UsageError(f"--iterations must be from {MIN_ITERATIONS} to {MAX_ITERATIONS} (Kafka's limits), got {iterations}")
    if not password:
        raise UsageError("the password is empty")
    if not user:
        raise UsageError("the user name is empty")
    try:
        secret = password.encode()
    except UnicodeEncodeError:
        raise UsageError("the password is not UTF-8 text") from None
    upsertion = UserScramCredentialUpsertion(user, ScramCredentialInfo(_confluent_mechanism(mechanism), iterations),
                                             secret)
    admin = confluent_admin(bootstrap, client)
    futures = admin.alter_user_scram_credentials([upsertion], request_timeout=timeout)
    wait(futures[user], timeout, f"user {user!r}")
    return [{"user": user, "mechanism": mechanism, "iterations": iterations}]


def remove_user(bootstrap: str, user: str, *, mechanism: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                client: ClientSettings = NO_SETTINGS) -> list[dict[str, Any]]:
    """Delete ``user``'s credential for ``mechanism``, or every credential it has (AlterUserScramCredentials)."""
    from confluent_kafka.admin import UserScramCredentialDeletion

    if mechanism is None:
        mechanisms = [row["mechanism"] for row in _credentials(bootstrap, user, timeout, client)]
        if not mechanisms:
            raise ToolError(f"user {user!r} has no SCRAM credentials")
    else:
        mechanisms = [mechanism]
    admin = confluent_admin(bootstrap, client)
    deletions = [UserScramCredentialDeletion(user, _confluent_mechanism(m)) for m in mechanisms]
    futures = admin.alter_user_scram_credentials(deletions, request_timeout=timeout)
    wait(futures[user], timeout, f"user {user!r}")
    return [{"user": user, "mechanism": m, "removed": True} for m in mechanisms]


def _credentials(bootstrap: str, user: str, timeout: float, client: ClientSettings) -> list[dict[str, Any]]:
    from confluent_kafka import KafkaError

    try:
        return list_users(bootstrap, [user], timeout=timeout, client=client)
    except ToolError as exc:
        cause = exc.__cause__
        error = cause.args[0] if cause is not None and cause.args else None
        if isinstance(error, KafkaError) and error.name() == "RESOURCE_NOT_FOUND":
            return []
        raise


# -- the password ----------------------------------------------------------------------------


def read_password(stdin: Any = None) -> str:
    """The password from standard input: prompted for twice without echo on a terminal, else its first line."""
    stream = sys.stdin if stdin is None else stdin
    if stream.isatty():
        first = getpass.getpass("Password: ")
        if getpass.getpass("Password again: ") != first:
            raise UsageError("the two passwords differ")
        return first
    try:
        line: str = stream.readline()
    except UnicodeDecodeError:
        raise UsageError("the password is not UTF-8 text") from None
    return line.removesuffix("\n").removesuffix("\r")


# -- command line ----------------------------------------------------------------------------


def fill(parser: argparse.ArgumentParser) -> None:
    """Define ``onceflow users``'s commands and options on its parser."""
    actions = add_family(parser)

    p = add_command(actions, "list", "SCRAM users and their mechanisms (DescribeUserScramCredentials)", _list,
                    empty="no SCRAM users")
    p.add_argument("users", type=user_name, nargs="*", metavar="USER", help="only these users (default: every one)")

    p = add_command(actions, "add", "create a SCRAM user, or change its password (AlterUserScramCredentials)", _add)
    p.add_argument("user", type=user_name, metavar="USER", help="the user name (its principal is User:USER)")
    p.add_argument("--mechanism", type=_mechanism, default="SCRAM-SHA-256",
                   help="SCRAM-SHA-256 (default) or SCRAM-SHA-512")
    p.add_argument("--iterations", type=positive_int, default=DEFAULT_ITERATIONS,
                   help=f"PBKDF2 iterations, {MIN_ITERATIONS} to {MAX_ITERATIONS} (default {DEFAULT_ITERATIONS}, as kafka-configs.sh)")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--password", type=_password, help="the password (visible to anyone who can list this machine's processes; "
                                          "prefer --password-stdin)")
    given.add_argument("--password-stdin", action="store_true",
                       help="read the password from standard input: a prompt without echo on a terminal, else its first line")

    p = add_command(actions, "remove", "delete a SCRAM user's credentials (AlterUserScramCredentials)", _remove)
    p.add_argument("user", type=user_name, metavar="USER", help="the user name")
    p.add_argument("--mechanism", type=_mechanism, default=None,
                   help="only this mechanism's credential (default: every one the user has)")


def _list(args: argparse.Namespace) -> list[dict[str, Any]]:
    return list_users(args.bootstrap_servers, args.users, timeout=args.timeout, client=args.client)


def _add(args: argparse.Namespace) -> list[dict[str, Any]]:
    password = read_password() if args.password_stdin else args.password
    return add_user(args.bootstrap_servers, args.user, password, mechanism=args.mechanism, iterations=args.iterations,
                    timeout=args.timeout, client=args.client)


def _remove(args: argparse.Namespace) -> list[dict[str, Any]]:
    return remove_user(args.bootstrap_servers, args.user, mechanism=args.mechanism, timeout=args.timeout,
                       client=args.client)


__all__ = ["DEFAULT_ITERATIONS", "MECHANISMS", "add_user", "list_users", "read_password", "remove_user"]
