"""Listeners: the ports the broker serves, each with its security protocol.

Theory of operation (Kafka's ``listeners``, ``listener.security.protocol.map``
and ``advertised.listeners``, KIP-103): ``listeners`` names each endpoint,
``NAME://HOST:PORT``; the map says which protocol a name speaks (PLAINTEXT,
SSL, SASL_PLAINTEXT or SASL_SSL); ``advertised.listeners`` says, per name,
where clients of that listener are told to connect.  Metadata, FindCoordinator
and DescribeCluster answer each connection with the address advertised for
the listener it came in on, so an internal and an external client each get
an address they can reach.

Without ``listeners`` the broker serves one PLAINTEXT listener on the
address given to it (``onceflow broker --listen``, ``EmbeddedBroker(host,
port)``), as before.  Port 0 binds a free port; the listener then
advertises the port it got, unless ``advertised.listeners`` names one.
Everything is checked here, at start-up, with one line naming the setting.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from ..config import (
    ADVERTISED_LISTENERS,
    LISTENER_SECURITY_PROTOCOL_MAP,
    LISTENERS,
    BrokerConfig,
    ConfigError,
    parse_endpoints,
)

PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL = "PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"


@dataclass(slots=True)
class Listener:
    name: str
    protocol: str
    host: str
    port: int
    #: ``advertised.listeners``' entry for this name, None: advertise the bound address.
    advertised: tuple[str, int] | None = None

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SSL, SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SASL_PLAINTEXT, SASL_SSL)

    def advertised_address(self) -> tuple[str, int]:
        return self.advertised or (self.host or "127.0.0.1", self.port)

    def __str__(self) -> str:
        return f"{self.name}://{self.host}:{self.port}"


def resolve(config: BrokerConfig, default_host: str, default_port: int) -> list[Listener]:
    """The listeners to serve, in the order configured; raises ConfigError naming the setting."""
    protocols: dict[str, str] = {}
    protocol_map: list[str] = config[LISTENER_SECURITY_PROTOCOL_MAP]
    for pair in protocol_map:
        listener_name, _, security_protocol = pair.partition(":")
        protocols[listener_name.strip().upper()] = security_protocol.strip().upper()
    configured: list[str] | None = config[LISTENERS]
    endpoints = parse_endpoints(configured) if configured else {PLAINTEXT: (default_host, default_port)}
    announced: list[str] | None = config[ADVERTISED_LISTENERS]
    advertised = parse_endpoints(announced or [])
    listeners = []
    for name, (host, port) in endpoints.items():
        protocol = protocols.get(name)
        if protocol is None:
            raise ConfigError(f"listeners: no security protocol for listener {name} in "
                              f"{LISTENER_SECURITY_PROTOCOL_MAP.name} ({','.join(protocol_map)})")
        listeners.append(Listener(name, protocol, host, port, advertised.get(name)))
    for name, (host, port) in advertised.items():
        if name not in endpoints:
            raise ConfigError(f"{ADVERTISED_LISTENERS.name}: listener {name} is not in listeners "
                              f"({','.join(endpoints)})")
        if not host or port == 0:
            raise ConfigError(f"{ADVERTISED_LISTENERS.name}: {name} must name a host and a port other than 0")
    ports = [lst.port for lst in listeners if lst.port != 0]
    if len(ports) != len(set(ports)):
        raise ConfigError(f"{LISTENERS.name}: two listeners on one port ({','.join(map(str, listeners))})")
    return listeners


def is_loopback(host: str) -> bool:
    """Whether a listener bound to ``host`` is reachable from this machine only."""
    if host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # "" (every address) or a host name
