"""The SASL mechanisms' interface (placeholder until the mechanisms land)."""

from __future__ import annotations

from typing import Protocol


class SaslAuthenticationFailed(Exception):
    """The client's credentials or token are wrong: SASL_AUTHENTICATION_FAILED with this message."""


class SaslServer(Protocol):
    mechanism: str

    def evaluate(self, token: bytes) -> bytes: ...

    @property
    def complete(self) -> bool: ...

    @property
    def authorization_id(self) -> str: ...
