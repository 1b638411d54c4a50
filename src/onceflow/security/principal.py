"""``KafkaPrincipal``: who a connection is, as Kafka writes it (``User:alice``).

A PLAINTEXT connection, and an SSL one without a client certificate, is
``User:ANONYMOUS``; SASL gives ``User:<authenticated name>``; an SSL client
certificate gives ``User:<its subject, mapped by ssl.principal.mapping.rules>``.
ACLs and ``super.users`` name principals in this form.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``Type:name``; raises ValueError without the colon (Kafka's SecurityUtils.parseKafkaPrincipal)."""
        kind, sep, name = text.partition(":")
        if not sep or not kind:
            raise ValueError(f"expected a principal as Type:name, got {text!r}")
        return cls(kind, name)


ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


def user(name: str) -> KafkaPrincipal:
    return KafkaPrincipal("User", name)
