"""The SASL mechanisms the broker serves, and the one place a mechanism's server is made.

Theory of operation: the authenticator (``authenticator.py``, KIP-152) asks
``check_mechanisms`` once per SASL listener at start-up, so that a listener
that could never authenticate anyone refuses to start with a ConfigError
naming the setting: a mechanism this broker does not serve (GSSAPI, Kafka's
default, or OAUTHBEARER), none at all, a malformed JAAS entry, or PLAIN with
no user.  Then, for each SaslHandshake that names a mechanism enabled on the
listener, it calls ``create_server`` and drives the ``SaslServer`` it gets
(``sasl.py``) with the client's SaslAuthenticate tokens.

* PLAIN (RFC 4616, ``plain.py``): users from the listener's JAAS
  (``jaas.py``), read once per configuration.
* SCRAM-SHA-256, SCRAM-SHA-512 (RFC 5802, RFC 7677, ``scram.py``):
  credentials from the ``ScramCredentialStore`` (``credentials.py``), looked
  up when the client names its user, so AlterUserScramCredentials (KIP-554)
  takes effect at the next login.  Unlike Kafka, SCRAM needs no JAAS entry
  on the broker (Kafka's would only name the inter-broker client's login).
"""

from __future__ import annotations

import logging

from ..config import JAVA_SECURITY_AUTH_LOGIN_CONFIG, SASL_ENABLED_MECHANISMS, SASL_JAAS_CONFIG, BrokerConfig, ConfigError
from . import jaas
from .credentials import ScramCredentialStore
from .plain import MECHANISM as PLAIN
from .plain import PlainServer
from .sasl import IllegalSaslState, SaslAuthenticationFailed, SaslServer
from .scram import BY_NAME, ScramServer

__all__ = [
    "SUPPORTED_MECHANISMS",
    "IllegalSaslState",
    "SaslAuthenticationFailed",
    "SaslServer",
    "check_mechanisms",
    "create_server",
]

log = logging.getLogger(__name__)

SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: Mechanisms Kafka has and this broker does not serve, and what they are.
_NOT_SERVED = {
    "GSSAPI": "Kerberos (and Kafka's default for sasl.enabled.mechanisms)",
    "OAUTHBEARER": "OAuth 2 bearer tokens, KIP-255",
}


def create_server(mechanism: str, listener_name: str, config: BrokerConfig, credentials: ScramCredentialStore) -> SaslServer:
    """A new server for one client's exchange.  The caller has checked that the mechanism is
    enabled on the listener (SaslHandshake: UNSUPPORTED_SASL_MECHANISM otherwise); one outside
    SUPPORTED_MECHANISMS is a bug (ValueError)."""
    if mechanism == PLAIN:
        return PlainServer(jaas.plain_users(listener_name, config))
    scram = BY_NAME.get(mechanism)
    if scram is None:
        raise ValueError(f"SASL mechanism {mechanism!r} is not one of {', '.join(SUPPORTED_MECHANISMS)}")
    return ScramServer(scram, lambda user: credentials.lookup(user, scram))


def check_mechanisms(listener_name: str, config: BrokerConfig) -> None:
    """Start-up checks of one SASL listener's mechanisms (module docstring); ConfigError if it
    cannot serve them."""
    enabled = config.for_listener(listener_name, SASL_ENABLED_MECHANISMS)
    setting = f"{SASL_ENABLED_MECHANISMS.name} (listener {listener_name})"
    if not enabled:
        raise ConfigError(f"{setting} is empty: a SASL listener needs at least one of {', '.join(SUPPORTED_MECHANISMS)}")
    for mechanism in enabled:
        if mechanism in _NOT_SERVED:
            raise ConfigError(f"{setting} enables {mechanism}, {_NOT_SERVED[mechanism]}, which Onceflow does not serve; "
                              f"enable {', '.join(SUPPORTED_MECHANISMS)} instead")
        if mechanism not in SUPPORTED_MECHANISMS:
            raise ConfigError(f"{setting} enables {mechanism!r}, not a SASL mechanism Onceflow serves "
                              f"({', '.join(SUPPORTED_MECHANISMS)}; names are case-sensitive)")
        jaas.server_entries(listener_name, mechanism, config)  # a malformed entry fails here, as at Kafka's start
    ignored = jaas.unprefixed_jaas_ignored(listener_name, config)
    if ignored:
        log.warning("Server config %s should be prefixed with SASL mechanism name (listener.name.%s.<mechanism>.%s), "
                    "ignoring config", SASL_JAAS_CONFIG.name, listener_name.lower(), SASL_JAAS_CONFIG.name)
    if PLAIN in enabled and not jaas.plain_users(listener_name, config):
        found = jaas.server_entries(listener_name, PLAIN, config)
        where = (f"{found.source} has no user_<name>=\"<password>\" option of {jaas.PLAIN_LOGIN_MODULE}" if found else
                 f"set {jaas.setting_name(listener_name, PLAIN)} to a {jaas.PLAIN_LOGIN_MODULE} entry with "
                 f"user_<name>=\"<password>\" options, or list them in the {listener_name.lower()}.{jaas.SERVER_SECTION} or "
                 f"{jaas.SERVER_SECTION} section of the {JAVA_SECURITY_AUTH_LOGIN_CONFIG.name} file")
        also = f" ({SASL_JAAS_CONFIG.name} without the mechanism prefix is ignored on a broker, as in Kafka)" if ignored else ""
        raise ConfigError(f"{setting} enables PLAIN but no user is configured for it: {where}{also}")
