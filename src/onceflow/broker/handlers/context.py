"""What a request handler may use: the broker's narrow face, and the connection's.

Handlers are ``handler(broker, request, connection)``.  They are typed
against these Protocols, not against ``Broker`` and ``KafkaProtocol``, so
that the handlers do not import the broker (no import cycle), can be driven
in unit tests by any object with these members, and so that everything a
handler touches is listed in one place.  When security arrives, the
request's principal and the authorizer belong here too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ...clock import Clock
from ...config import BrokerConfig
from ...coordinator.group.coordinator import GroupCoordinator
from ...coordinator.transaction.coordinator import TransactionCoordinator
from ...log.partition_log import PartitionLog
from ...protocol.framing import Request
from ..group_commit import Waiter
from ..partitions import PartitionRegistry, Topic
from ..stores import LocalMarkerWriter


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
    marker_writer: LocalMarkerWriter

    def create_topic(self, name: str, num_partitions: int, overrides: dict[str, Any], internal: bool = False) -> Topic: ...

    def delete_topic(self, name: str) -> None: ...

    def internal_partition(self, topic_name: str, partition: int) -> PartitionLog: ...

    def offsets_partition(self, partition: int) -> PartitionLog: ...

    def on_durable(self, partition: PartitionLog, offset: int, waiter: Waiter) -> None: ...

    def after_append(self, partition: PartitionLog, *, lazy: bool = False) -> None: ...


class Connection(Protocol):
    """The client connection a request came on (``server.KafkaProtocol``)."""

    peer: str
    client_host: str

    def close(self) -> None: ...


#: handler(broker, request, connection) -> response entity | awaitable of one | None (acks=0)
Handler = Callable[[BrokerContext, Request, Connection], Any]
