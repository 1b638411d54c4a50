"""What a request handler may use: the broker's narrow face, and the connection's.

Handlers are ``handler(broker, request, connection)``.  They are typed
against these Protocols, not against ``Broker`` and ``KafkaProtocol``, so
that the handlers do not import the broker (no import cycle), can be driven
in unit tests by any object with these members (``tests/unit/broker`` does,
with a small in-memory context), and so that everything a handler touches
is listed in one place.  Every write goes through ``appender``, the one
owner of durable writes (``broker/appender.py``); markers asked for by
WriteTxnMarkers through ``marker_writer``.  Security: the connection's
``principal`` and ``client_host`` are what ``broker.authorizer`` is asked
about (None: no ``authorizer.class.name``, everything allowed), and Metadata
answers with the address advertised for the connection's ``listener_name``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ...clock import Clock
from ...config import BrokerConfig
from ...coordinator.group.coordinator import GroupCoordinator
from ...coordinator.transaction.coordinator import TransactionCoordinator
from ...coordinator.transaction.types import MarkerWriter
from ...protocol.framing import Request
from ...security.authenticator import Authenticator
from ...security.authorizer import Authorizer
from ...security.credentials import ScramCredentialStore
from ...security.principal import KafkaPrincipal
from ..appender import Appender
from ..partitions import PartitionRegistry, Topic


class BrokerContext(Protocol):
    """The parts of the broker request handlers use (``broker.Broker`` provides them)."""

    registry: PartitionRegistry
    groups: GroupCoordinator
    txns: TransactionCoordinator
    config: BrokerConfig
    clock: Clock
    node_id: int
    advertised_host: str
    advertised_port: int
    appender: Appender
    marker_writer: MarkerWriter
    authorizer: Authorizer | None
    #: SCRAM credentials (KIP-554): Describe/AlterUserScramCredentials, and SCRAM logins.
    scram_credentials: ScramCredentialStore

    def advertised_address(self, listener_name: str) -> tuple[str, int]:
        """Where clients of ``listener_name`` are told to connect (``advertised.listeners``)."""
        ...

    def create_topic(self, name: str, num_partitions: int, overrides: dict[str, Any], internal: bool = False) -> Topic: ...

    def delete_topic(self, name: str) -> None: ...


class Connection(Protocol):
    """The client connection a request came on (``server.KafkaProtocol``)."""

    peer: str
    client_host: str
    #: The listener the connection came in on (``listeners``), upper case: ``SASL_SSL``.
    listener_name: str
    #: Who it is: ``User:ANONYMOUS`` until SASL or a client certificate says otherwise.
    principal: KafkaPrincipal
    #: The SASL exchange of a SASL_* listener's connection, None on other listeners.
    authenticator: Authenticator | None

    def close(self) -> None: ...

    def close_after_response(self) -> None:
        """Close the connection once the response to this request is sent (a refused SASL exchange)."""
        ...

    def on_authenticated(self, principal: KafkaPrincipal) -> None:
        """SASL completed: the connection is ``principal`` from now on."""
        ...


#: handler(broker, request, connection) -> response entity | awaitable of one | None (acks=0)
Handler = Callable[[BrokerContext, Request, Connection], Any]
