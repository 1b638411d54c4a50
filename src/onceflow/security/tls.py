"""TLS for SSL and SASL_SSL listeners: Kafka's ``ssl.*`` settings, Python's ``ssl`` module.

Theory of operation: ``server_context`` builds one ``ssl.SSLContext`` per
listener from its settings (each read through ``listener.name.<l>.`` first,
as Kafka does).  Keys and certificates are PEM, Kafka-style: a file
(``ssl.keystore.location`` holding the private key and the certificate
chain) or the PEM text itself (``ssl.keystore.certificate.chain`` and
``ssl.keystore.key``); CA certificates likewise (``ssl.truststore.location``
or ``ssl.truststore.certificates``).  Java keystores (JKS, PKCS12) are
refused at start with one line: convert them to PEM.  No cryptography is
written here; asyncio's TLS transport does the record layer.

``ssl.client.auth`` maps to the context's verify mode (none, requested:
checked when given, required).  The subject of a verified client
certificate, in RFC 2253 form as Java's ``X500Principal.getName()`` writes
it (``CN=alice,OU=eng,O=Acme``; ``1.2.840.113549.1.9.1=#16...`` for an attribute
outside RFC 2253's keywords), becomes the principal's name after
``ssl.principal.mapping.rules`` (KIP-371), Kafka's ``SslPrincipalMapper``:
comma-separated ``RULE:pattern/replacement/[LU]`` entries tried in order,
the first whose pattern matches the whole name wins, ``DEFAULT`` keeps the
name as it is; no rule matching fails the connection.
"""

from __future__ import annotations

import os
import re
import ssl
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

from ..config import (
    SSL_CIPHER_SUITES,
    SSL_CLIENT_AUTH,
    SSL_ENABLED_PROTOCOLS,
    SSL_KEY_PASSWORD,
    SSL_KEYSTORE_CERTIFICATE_CHAIN,
    SSL_KEYSTORE_KEY,
    SSL_KEYSTORE_LOCATION,
    SSL_KEYSTORE_TYPE,
    SSL_PRINCIPAL_MAPPING_RULES,
    SSL_TRUSTSTORE_CERTIFICATES,
    SSL_TRUSTSTORE_LOCATION,
    SSL_TRUSTSTORE_TYPE,
    BrokerConfig,
    ConfigError,
)

_VERIFY_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}


def server_context(config: BrokerConfig, listener: str) -> ssl.SSLContext:
    """The listener's TLS context; raises ConfigError naming the setting that is missing or wrong."""
    def setting(key: object) -> object:
        return config.for_listener(listener, key)  # type: ignore[arg-type]

    for kind in (SSL_KEYSTORE_TYPE, SSL_TRUSTSTORE_TYPE):
        if setting(kind) != "PEM" and (setting(SSL_KEYSTORE_LOCATION) if kind is SSL_KEYSTORE_TYPE
                                       else setting(SSL_TRUSTSTORE_LOCATION)):
            raise ConfigError(f"{kind.name}={setting(kind)}: only PEM is read here; convert the Java keystore to "
                              f"PEM and set {kind.name}=PEM (listener {listener})")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    versions = [_TLS_VERSIONS[v] for v in setting(SSL_ENABLED_PROTOCOLS)]  # type: ignore[attr-defined]
    context.minimum_version, context.maximum_version = min(versions), max(versions)
    suites = setting(SSL_CIPHER_SUITES)
    try:
        if suites:
            context.set_ciphers(":".join(suites))  # type: ignore[arg-type]
        _load_keystore(context, listener, setting)
        _load_truststore(context, listener, setting)
    except ssl.SSLError as exc:
        raise ConfigError(f"listener {listener}: the TLS key, certificates or ciphers cannot be used: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"listener {listener}: {exc.strerror}: {exc.filename}") from None
    context.verify_mode = _VERIFY_MODES[str(setting(SSL_CLIENT_AUTH))]
    if context.verify_mode != ssl.CERT_NONE and not context.get_ca_certs():
        raise ConfigError(f"{SSL_CLIENT_AUTH.name}={setting(SSL_CLIENT_AUTH)} needs CA certificates to check client "
                          f"certificates against: set {SSL_TRUSTSTORE_LOCATION.name} (listener {listener})")
    return context


def _load_keystore(context: ssl.SSLContext, listener: str, setting: Callable[[object], object]) -> None:
    password = setting(SSL_KEY_PASSWORD)
    location, chain, key = setting(SSL_KEYSTORE_LOCATION), setting(SSL_KEYSTORE_CERTIFICATE_CHAIN), setting(SSL_KEYSTORE_KEY)
    if location:
        context.load_cert_chain(str(location), password=str(password) if password else None)
    elif chain and key:
        # The ssl module loads keys from files only: a private file, read and removed at once.
        fd, path = tempfile.mkstemp(prefix="onceflow-key-", suffix=".pem")
        try:
            with os.fdopen(fd, "w") as out:
                out.write(f"{key}\n{chain}\n")
            context.load_cert_chain(path, password=str(password) if password else None)
        finally:
            os.unlink(path)
    else:
        raise ConfigError(f"listener {listener} speaks TLS but has no key: set {SSL_KEYSTORE_LOCATION.name} "
                          f"(a PEM file with the key and the certificate chain), or {SSL_KEYSTORE_CERTIFICATE_CHAIN.name} "
                          f"and {SSL_KEYSTORE_KEY.name}")


def _load_truststore(context: ssl.SSLContext, listener: str, setting: Callable[[object], object]) -> None:
    location, certificates = setting(SSL_TRUSTSTORE_LOCATION), setting(SSL_TRUSTSTORE_CERTIFICATES)
    if location:
        context.load_verify_locations(cafile=str(location))
    elif certificates:
        context.load_verify_locations(cadata=str(certificates))


# -- the principal of a client certificate ---------------------------------------------------


class NoMatchingRule(Exception):
    """No ``ssl.principal.mapping.rules`` entry matches a certificate's subject."""


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, name: str) -> str | None:
        if self.pattern is None:
            return name
        if self.pattern.fullmatch(name) is None:
            return None
        mapped = self.pattern.sub(self.replacement, name)
        return mapped.lower() if self.case == "L" else mapped.upper() if self.case == "U" else mapped


# Kafka's SslPrincipalMapper rule syntax: DEFAULT, or RULE:pattern/replacement/ with an optional
# L or U, "/" escaped as "\/" inside; entries separated by commas or new lines.
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?)|(.*?))\s*(?:[,\n]\s*|$)")


class PrincipalMapper:
    def __init__(self, rules_text: str) -> None:
        self.rules: list[_Rule] = []
        pos = 0
        text = rules_text.strip()
        while pos < len(text):
            match = _RULE.match(text, pos)
            if match is None or match.group(5) or match.end() == pos:
                raise ConfigError(f"{SSL_PRINCIPAL_MAPPING_RULES.name}: invalid rule at {text[pos:]!r}")
            if match.group(1):
                self.rules.append(_Rule(None))
            else:
                pattern = match.group(2).replace("\\/", "/")
                replacement = re.sub(r"\$(\d)", r"\\g<\1>", match.group(3).replace("\\/", "/"))
                try:
                    self.rules.append(_Rule(re.compile(pattern), replacement, match.group(4)))
                except re.error as exc:
                    raise ConfigError(f"{SSL_PRINCIPAL_MAPPING_RULES.name}: invalid pattern {pattern!r}: {exc}") from None
            pos = match.end()
        if not self.rules:
            self.rules.append(_Rule(None))

    def name(self, distinguished_name: str) -> str:
        for rule in self.rules:
            mapped = rule.apply(distinguished_name)
            if mapped is not None:
                return mapped
        raise NoMatchingRule(f"no rule in {SSL_PRINCIPAL_MAPPING_RULES.name} matches {distinguished_name!r}")


def subject_name(der_certificate: bytes) -> str:
    """A certificate's subject as Java's ``X500Principal.getName()`` writes it (RFC 2253): the RDNs
    last first, RFC 2253's keywords (CN, C, L, ST, O, OU, STREET, DC, UID) by name and any other
    attribute (emailAddress, serialNumber, title...) as its OID and ``#`` with the hex of its DER
    value, so that principals in ACLs and ``super.users`` copied from Kafka match."""
    from cryptography import x509

    subject = x509.load_der_x509_certificate(der_certificate).subject
    return ",".join("+".join(_rfc2253_attribute(attribute) for attribute in rdn) for rdn in reversed(subject.rdns))


def _rfc2253_attribute(attribute: object) -> str:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    assert isinstance(attribute, x509.NameAttribute)
    keywords = {NameOID.COMMON_NAME: "CN", NameOID.COUNTRY_NAME: "C", NameOID.LOCALITY_NAME: "L",
                NameOID.STATE_OR_PROVINCE_NAME: "ST", NameOID.ORGANIZATION_NAME: "O",
                NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.STREET_ADDRESS: "STREET",
                NameOID.DOMAIN_COMPONENT: "DC", NameOID.USER_ID: "UID"}
    keyword = keywords.get(attribute.oid)
    if keyword is not None:
        return attribute.rfc4514_string({attribute.oid: keyword})
    return f"{attribute.oid.dotted_string}=#{_der_string(attribute).hex()}"


#: ASN.1 string tags and how their contents are encoded.
_STRING_ENCODINGS = {12: "utf-8", 19: "ascii", 20: "latin-1", 22: "ascii", 28: "utf-32-be", 30: "utf-16-be"}


def _der_string(attribute: object) -> bytes:
    """The DER encoding (tag, length, contents) of a name attribute's value."""
    value = getattr(attribute, "value", b"")
    tag = int(getattr(getattr(attribute, "_type", None), "value", 12))  # cryptography's _ASN1Type: the tag
    contents = value if isinstance(value, bytes) else str(value).encode(_STRING_ENCODINGS.get(tag, "utf-8"))
    length = len(contents)
    if length < 0x80:
        header = bytes([tag, length])
    else:
        size = length.to_bytes((length.bit_length() + 7) // 8, "big")
        header = bytes([tag, 0x80 | len(size)]) + size
    return header + contents
