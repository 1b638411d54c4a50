"""What every SASL mechanism's server is: the ``SaslServer`` Protocol and its one failure.

Theory of operation: a mechanism's server is sans-I/O.  The authenticator
(KIP-152: SaslHandshake, then SaslAuthenticate) hands it each client token,
``evaluate(token)``, and sends back what it returns, until ``complete``; then
``authorization_id`` is who the client is.  Wrong credentials, or a token that
does not parse, raise ``SaslAuthenticationFailed``, which the authenticator
answers with SASL_AUTHENTICATION_FAILED and ``client_message()``; a server
that failed stays failed.

Kafka tells a client one of two kinds of message (``SaslServerAuthenticator``,
``handleSaslToken``): a mechanism's ``SaslAuthenticationException`` goes to the
client as it is ("Authentication failed: Invalid username or password"), while
a ``SaslException`` (SCRAM's unknown user, bad proof, garbled message) is
hidden behind "Authentication failed during authentication due to invalid
credentials with SASL mechanism SCRAM-SHA-256", so that nothing about the user
leaks; its own text is for the broker's log only.  ``invalid_credentials``
builds the second kind; ``reason`` is always the text worth logging.

This module exists apart from ``mechanisms`` so that ``plain`` and ``scram``
can import it while ``mechanisms`` imports them; ``mechanisms`` re-exports it.
"""

from __future__ import annotations

from typing import Protocol


class SaslAuthenticationFailed(Exception):
    """The client's credentials or token are wrong: SASL_AUTHENTICATION_FAILED with this message."""

    def __init__(self, message: str, *, reason: str | None = None, mechanism: str | None = None) -> None:
        super().__init__(message)
        #: What the client is told (``str(exc)`` is the same text).
        self.message = message
        #: Why, for the broker's log; may name the user, never the password.
        self.reason = reason if reason is not None else message
        #: Set when Kafka hides the reason behind its generic text (``invalid_credentials``).
        self.mechanism = mechanism

    @classmethod
    def invalid_credentials(cls, mechanism: str, reason: str) -> SaslAuthenticationFailed:
        """Kafka's answer to a mechanism's ``SaslException``: the client learns only that the
        credentials were wrong (not whether the user exists); ``reason`` is logged."""
        return cls(_generic(mechanism, reauthenticating=False), reason=reason, mechanism=mechanism)

    def client_message(self, reauthenticating: bool = False) -> str:
        """The error message of the SaslAuthenticate response; Kafka says "re-authentication"
        in its generic text when the connection was re-authenticating (KIP-368)."""
        if self.mechanism is None:
            return self.message
        return _generic(self.mechanism, reauthenticating)


class IllegalSaslState(SaslAuthenticationFailed):
    """A token after the exchange completed or failed (Kafka's IllegalSaslStateException: the
    authenticator closes the connection rather than answer; ILLEGAL_SASL_STATE if it answers)."""


def _generic(mechanism: str, reauthenticating: bool) -> str:
    during = "re-authentication" if reauthenticating else "authentication"
    return f"Authentication failed during {during} due to invalid credentials with SASL mechanism {mechanism}"


class SaslServer(Protocol):
    """One client's exchange with one mechanism (a new server per authentication)."""

    mechanism: str

    def evaluate(self, token: bytes) -> bytes:
        """Consume a client token, return the server's reply (b"" if none); raises SaslAuthenticationFailed."""
        ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str:
        """The authenticated user name, once complete (RuntimeError before)."""
        ...
