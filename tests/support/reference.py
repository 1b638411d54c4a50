"""The two brokers the reference suite runs each scenario against: Onceflow and Apache Kafka.

A ``Target`` is what a scenario may know about the broker under test: its name, its bootstrap
servers, and whether it is the reference.  Scenarios are written once and assert the same
observable outcomes on both; a difference is fixed in Onceflow or listed, with its reason, under
"Known differences" in the README.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.support.tcp_proxy import RequestProxy

#: Settings both brokers run the reference suite with: Kafka's defaults, except that the first
#: rebalance of a new group does not wait 3 s, timed-out transactions are looked for every second
#: instead of every 10 s, and members of KIP-848 groups heartbeat every second instead of every 5 s
#: (all only make the suite quicker).  The floor under that interval (5 s by default) comes down
#: with it, on both.
SHARED_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "group.consumer.heartbeat.interval.ms": "1000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
}


@dataclass(frozen=True)
class Target:
    name: str  # "onceflow" or "kafka"
    bootstrap_servers: str
    #: The broker's partition directories (``<topic>-<partition>/``), for tools that read segments.
    log_dir: Path | None = None

    @property
    def is_kafka(self) -> bool:
        return self.name == "kafka"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Proxied:
    """A broker behind a ``RequestProxy`` (``tests.support.tcp_proxy``) that it advertises: clients
    given ``target`` stay on the proxy; ``direct`` is the broker's own address, for checks the
    proxy must not see."""

    target: Target
    proxy: RequestProxy
    direct: str
