"""The server side of SASL/PLAIN (RFC 4616): one token, a user name and a password.

Theory of operation: the client sends one message,

    message = [authzid] NUL authcid NUL passwd        (RFC 4616, section 2)

and the server answers with nothing (b"") or fails.  The password is checked
against the listener's users, the ``user_<name>="<password>"`` options of its
PlainLoginModule JAAS entry (``jaas.plain_users``), with a constant-time
comparison; an authzid, if given, must equal the user name, because Kafka
does not let one user act as another.  The checks and their order, and the
messages the client is told, are Kafka's ``PlainSaslServer``: the token must
hold exactly three fields, then the user name and the password must not be
empty, then the password must be right, then the authzid must match.  These
messages go to the client as they are (Kafka's ``SaslAuthenticationException``);
none says whether the user exists.

PLAIN sends the password itself: use it over SASL_SSL.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

from .sasl import IllegalSaslState, SaslAuthenticationFailed

MECHANISM = "PLAIN"



def _digest(password: str) -> bytes:
    """Passwords are compared as digests: equal lengths, so the time taken says nothing of either."""
    return hashlib.sha256(password.encode("utf-8")).digest()


#: Compared against when the user is unknown, so that an unknown user costs what a known one does.
_NO_PASSWORD = b"\x00" * 32


class PlainServer:
    """One PLAIN exchange; ``users`` maps a user name to its password."""

    mechanism = MECHANISM

    def __init__(self, users: Mapping[str, str]) -> None:
        self._users = users
        self._user: str | None = None
        self._used = False

    @property
    def complete(self) -> bool:
        return self._user is not None

    @property
    def authorization_id(self) -> str:
        if self._user is None:
            raise RuntimeError("Authentication exchange has not completed")
        return self._user

    def evaluate(self, token: bytes) -> bytes:
        if self._used:
            state = "COMPLETE" if self.complete else "FAILED"
            raise IllegalSaslState(f"Unexpected challenge in Sasl server state {state}")
        self._used = True
        # Java decodes with replacement characters; so do we, so a bad byte is a wrong password, not a crash.
        fields = token.decode("utf-8", errors="replace").split("\x00")
        if len(fields) != 3:
            # Kafka counts at most four fields (it stops splitting after the fourth).
            raise SaslAuthenticationFailed(f"Invalid SASL/PLAIN response: expected 3 tokens, got {min(len(fields), 4)}")
        authzid, user, password = fields
        if not user:
            raise SaslAuthenticationFailed("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationFailed("Authentication failed: password not specified")
        expected = self._users.get(user)
        matches = hmac.compare_digest(_digest(password), _NO_PASSWORD if expected is None else _digest(expected))
        if expected is None or not matches:
            raise SaslAuthenticationFailed("Authentication failed: Invalid username or password",
                                           reason=f"Authentication failed: Invalid username or password (user {user!r})")
        if authzid and authzid != user:
            raise SaslAuthenticationFailed("Authentication failed: Client requested an authorization id that is different from username")
        self._user = user
        return b""
