"""Client settings: what a user says about reaching a cluster, made into client configurations.

Theory of operation
-------------------
Everything in Onceflow that reaches a broker does so through a real Kafka
client: confluent-kafka (librdkafka) for the tools, the benchmarks, chaos,
the demos and the Spark connector, and kafka-python for the KIP-664
transaction tools.  Users describe a secured cluster in two vocabularies,
often mixed:

* librdkafka's names (``security.protocol``, ``sasl.username``,
  ``ssl.ca.location``...), as ``kcat -X`` and ``rpk -X`` take them;
* the Java client's names, as in a ``--command-config`` file for Kafka's
  shell tools or in Spark's ``kafka.*`` options (``sasl.jaas.config``,
  ``ssl.truststore.location``, ``ssl.keystore.*``).

``translate`` turns one flat string map into ``ClientSettings``: the
librdkafka configuration, and for each of its keys the setting the user
wrote, so that an error names what the user can fix.  Its rules:

1. A Java name that librdkafka lacks is translated: the JAAS text
   (``_jaas_settings``), the trust store (``_truststore_settings``) and the
   key store (``_keystore_settings``); or, where librdkafka cannot do what
   it asks (a JKS store, ``ssl.enabled.protocols``), refused in one line
   that names it (``JAVA_ONLY``).
2. Every other name passes through unchanged, and librdkafka's own checks
   decide: ``ClientSettings.check`` makes a client offline (no bootstrap
   servers, so nothing connects) and drops it, so that an unknown name or a
   bad value is refused before any data moves.
3. A secret (a password, a private key, the JAAS text) is never quoted: not
   in an error, not in a ``repr``; ``redacted`` is the map to show.

``ClientSettings.kafka_python`` maps the same configuration to kafka-python's
keyword arguments, building an ``ssl.SSLContext`` where the settings hold
PEM text and kafka-python takes only files.

``read_properties`` reads a Java ``.properties`` file (``javaproperties``:
Java's escapes and continuation lines).  ``add_options`` and
``from_options`` give every command ``-X key=value`` (repeatable) and
``--command-config FILE``: the file first, then each ``-X`` over it.

This module imports nothing from the broker's side: the Spark connector and
every tool use it (``tests/unit/test_layering.py``).
"""

from __future__ import annotations

import argparse
import os
import ssl
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "NO_SETTINGS",
    "ClientSettings",
    "SettingError",
    "add_options",
    "from_options",
    "is_secret",
    "parse_assignment",
    "parse_jaas",
    "read_properties",
    "redacted",
    "settings_from",
    "translate",
]

HIDDEN = "[hidden]"


class SettingError(ValueError):
    """A client setting that cannot be used.  The message names it and never quotes a secret."""

    def __init__(self, message: str, setting: str | None = None) -> None:
        super().__init__(message)
        #: The setting at fault, as the user wrote it, when there is one.
        self.setting = setting

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.setting))


# -- secrets ---------------------------------------------------------------------------------

#: Settings whose values are secrets (beside every name with "password" or "secret" in it).
_SECRET_NAMES = frozenset({"sasl.jaas.config", "ssl.key.pem", "ssl.keystore.key", "sasl.oauthbearer.config",
                           "ssl_key.pem"})


def is_secret(name: str) -> bool:
    """Whether the setting's value is a secret, never to be shown."""
    folded = name.lower()
    if folded.startswith("kafka."):  # Spark's spelling
        folded = folded[len("kafka."):]
    return folded in _SECRET_NAMES or "password" in folded or "secret" in folded


def redacted(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` with every secret's value replaced by ``[hidden]``: what may be logged or shown."""
    return {key: HIDDEN if is_secret(key) else value for key, value in settings.items()}


# -- the translated settings -----------------------------------------------------------------


@dataclass(frozen=True)
class ClientSettings:
    """A user's client settings, checked and translated.  Never shows a secret in its ``repr``."""

    #: librdkafka's configuration (confluent-kafka), without ``bootstrap.servers`` unless given.
    config: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: For each key of ``config``, the setting the user wrote (a Java name, or the same key).
    origins: Mapping[str, str] = field(default_factory=dict, repr=False)
    #: The settings as the user gave them (for a client that takes Kafka's names, e.g. Spark's own).
    given: Mapping[str, str] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"ClientSettings({redacted(self.config)!r})"

    def __bool__(self) -> bool:
        return bool(self.given)

    def origin(self, key: str) -> str:
        """The setting the user wrote that ``key`` of ``config`` comes from."""
        return self.origins.get(key, key)

    def librdkafka(self, bootstrap_servers: str | None = None, **extra: Any) -> dict[str, Any]:
        """A confluent-kafka configuration: ``extra`` (a client's own defaults) under the user's
        settings, and ``bootstrap_servers`` when given."""
        config: dict[str, Any] = {**extra, **self.config}
        if bootstrap_servers is not None:
            config["bootstrap.servers"] = bootstrap_servers
        return config

    def check(self) -> None:
        """librdkafka's verdict on the settings, offline: a producer and a consumer are made
        without bootstrap servers (so nothing connects) and dropped.  Its refusal is a
        ``SettingError`` naming the user's setting."""
        base = {key: value for key, value in self.config.items() if key != "bootstrap.servers"}
        for kind in ("producer", "consumer"):
            problem = _refusal(kind, base)
            if problem is not None:
                raise SettingError(*self._blame(kind, problem, base))

    def _blame(self, kind: str, problem: str, base: Mapping[str, str]) -> tuple[str, str | None]:
        """librdkafka's ``problem`` as one line naming the user's setting (the one it comes from, when
        librdkafka names a translated key), and that setting."""
        text = problem.removeprefix(f"Failed to create {kind}: ")
        for key, value in base.items():  # librdkafka quotes values it refuses: never a secret
            if is_secret(key) and len(value) >= 3:
                text = text.replace(value, HIDDEN)
        for alias, key in _LIBRDKAFKA_ALIASES.items():  # librdkafka names a setting by its canonical name
            if f'"{alias}"' in text and key in base and alias not in base:
                text = text.replace(f'"{alias}"', f'"{key}"')
        named = sorted((key for key in base if key in text), key=len, reverse=True)
        if not named:
            return f"the client settings: {text}", None
        origin = self.origin(named[0])
        return (text if origin in text else f"{origin}: {text}"), origin

    def kafka_python(self) -> dict[str, Any]:
        """The same settings as kafka-python keyword arguments (its ``KafkaAdminClient``).  A setting
        kafka-python has no counterpart for is a ``SettingError`` naming it."""
        return _kafka_python(self)


NO_SETTINGS = ClientSettings()

#: librdkafka's canonical names of settings a user usually writes by their alias (CONFIGURATION.md):
#: its errors use the canonical one.
_LIBRDKAFKA_ALIASES = {
    "queue.buffering.max.ms": "linger.ms",
    "message.send.max.retries": "retries",
    "request.required.acks": "acks",
    "compression.codec": "compression.type",
    "sasl.mechanisms": "sasl.mechanism",
    "max.in.flight.requests.per.connection": "max.in.flight",
}


class _Silent:
    """A librdkafka logger that drops every line (the offline check's "no bootstrap servers")."""

    def log(self, *_args: Any) -> None:
        pass


def _refusal(kind: str, config: Mapping[str, str]) -> str | None:
    """What librdkafka says against a ``kind`` client (producer, consumer) made with ``config`` and no
    bootstrap servers, or None.  The client is dropped at once; it never connects."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

    settings: dict[str, Any] = {**config, "log_level": 0, "logger": _Silent()}
    try:
        if kind == "producer":
            Producer(settings)
        else:
            # Its own group id: an empty one aborts librdkafka's process (the callers check group ids).
            Consumer({**settings, "group.id": "onceflow-settings-check"})
    except (KafkaException, ValueError, TypeError) as exc:
        error = exc.args[0] if exc.args else exc
        return error.str() if isinstance(error, KafkaError) else str(error)
    return None


# -- translation ---------------------------------------------------------------------------

#: Java client settings librdkafka has nothing for, and what to do instead.
JAVA_ONLY = {
    "ssl.protocol": "librdkafka negotiates TLS itself (1.2 or 1.3, as OpenSSL allows); leave it out",
    "ssl.enabled.protocols": "librdkafka negotiates TLS itself (1.2 or 1.3, as OpenSSL allows); leave it out",
    "ssl.keymanager.algorithm": "a Java security setting; leave it out",
    "ssl.trustmanager.algorithm": "a Java security setting; leave it out",
    "ssl.secure.random.implementation": "a Java security setting; leave it out",
    "ssl.engine.factory.class": "a Java class; leave it out",
    "security.providers": "a Java class list; leave it out",
    "sasl.login.class": "a Java class; leave it out",
    "sasl.login.callback.handler.class": "a Java class; leave it out (OAUTHBEARER: sasl.oauthbearer.* settings)",
    "sasl.client.callback.handler.class": "a Java class; leave it out",
    "ssl.keystore.certificate.type": "a Java setting; leave it out",
}

_PLAIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
_SCRAM_MODULE = "org.apache.kafka.common.security.scram.ScramLoginModule"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
_OAUTH_MODULE_OLD = "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginModule"
_KRB5_MODULE = "com.sun.security.auth.module.Krb5LoginModule"
#: Login module -> the SASL mechanisms it serves.
_MODULE_MECHANISMS = {
    _PLAIN_MODULE: ("PLAIN",),
    _SCRAM_MODULE: ("SCRAM-SHA-256", "SCRAM-SHA-512"),
    _OAUTH_MODULE: ("OAUTHBEARER",),
    _OAUTH_MODULE_OLD: ("OAUTHBEARER",),
    _KRB5_MODULE: ("GSSAPI",),
}

_TRUSTSTORE = ("ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.certificates")
_KEYSTORE = ("ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.key",
             "ssl.keystore.certificate.chain")


def translate(settings: Mapping[str, str]) -> ClientSettings:
    """``settings`` (librdkafka's names, Java's, or both) as a ``ClientSettings``; a setting that
    cannot be used is a ``SettingError`` naming it.  Files a store setting names are read, to learn
    their format (PEM, PKCS#12, JKS) and to check a PEM key store holds a key and a certificate."""
    given = {str(k).strip(): str(v) for k, v in settings.items()}
    for key in given:
        if not key:
            raise SettingError("a client setting has an empty name", key)
        if key in JAVA_ONLY:
            raise SettingError(f"{key}: a Java client setting librdkafka has no equivalent for: {JAVA_ONLY[key]}", key)
    if "sasl.mechanism" in given and "sasl.mechanisms" in given:
        raise SettingError("sasl.mechanism and sasl.mechanisms are the same setting: give one", "sasl.mechanisms")
    config: dict[str, str] = {}
    origins: dict[str, str] = {}

    def put(key: str, value: str, origin: str) -> None:
        if key in given and key != origin:
            raise SettingError(f"{origin} and {key} say the same thing: give one", origin)
        if key in config and origins[key] != origin:
            raise SettingError(f"{origin} and {origins[key]} say the same thing: give one", origin)
        config[key] = value
        origins[key] = origin

    special = {"sasl.jaas.config", "ssl.endpoint.identification.algorithm", *_TRUSTSTORE, *_KEYSTORE}
    for key, value in given.items():
        if key not in special:
            put(key, value, key)
    if "ssl.endpoint.identification.algorithm" in given:
        value = given["ssl.endpoint.identification.algorithm"].strip().lower()
        # Java's empty value turns the check off; librdkafka says "none".
        put("ssl.endpoint.identification.algorithm", value or "none", "ssl.endpoint.identification.algorithm")
    if "sasl.jaas.config" in given:
        for key, value in _jaas_settings(given["sasl.jaas.config"], _mechanism(given)).items():
            put(key, value, "sasl.jaas.config")
    for key, (value, origin) in _truststore_settings(given).items():
        put(key, value, origin)
    for key, (value, origin) in _keystore_settings(given).items():
        put(key, value, origin)
    return ClientSettings(config, origins, given)


def _mechanism(settings: Mapping[str, str]) -> str:
    return (settings.get("sasl.mechanism") or settings.get("sasl.mechanisms") or "GSSAPI").strip().upper()


def _jaas_settings(text: str, mechanism: str) -> dict[str, str]:
    """librdkafka's settings for the one login module of ``sasl.jaas.config``."""
    module, options = parse_jaas(text)
    mechanisms = _MODULE_MECHANISMS.get(module)
    if mechanisms is None:
        known = ", ".join(m.rsplit(".", 1)[-1] for m in _MODULE_MECHANISMS if m != _OAUTH_MODULE_OLD)
        raise SettingError(f"sasl.jaas.config: login module {module} has no librdkafka equivalent (known: {known})",
                           "sasl.jaas.config")
    if mechanism not in mechanisms:
        raise SettingError(f"sasl.jaas.config: {module.rsplit('.', 1)[-1]} serves SASL mechanism "
                           f"{' or '.join(mechanisms)}, but sasl.mechanism is {mechanism}"
                           f"{' (the default)' if mechanism == 'GSSAPI' else ''}: set sasl.mechanism", "sasl.jaas.config")
    if module in (_PLAIN_MODULE, _SCRAM_MODULE):
        allowed = {"username": "sasl.username", "password": "sasl.password"}
        required: tuple[str, ...] = ("username", "password")
    elif module == _KRB5_MODULE:
        allowed = {"principal": "sasl.kerberos.principal", "keyTab": "sasl.kerberos.keytab",
                   "serviceName": "sasl.kerberos.service.name"}
        required = ()
        options = {k: v for k, v in options.items() if k not in ("useKeyTab", "storeKey", "useTicketCache", "debug")}
    else:  # OAUTHBEARER with OIDC client credentials (KIP-768)
        allowed = {"clientId": "sasl.oauthbearer.client.id", "clientSecret": "sasl.oauthbearer.client.secret",
                   "scope": "sasl.oauthbearer.scope", "extension_logicalCluster": "sasl.oauthbearer.extensions"}
        required = ("clientId", "clientSecret")
    for name in options:
        if name not in allowed:
            raise SettingError(f"sasl.jaas.config: option {name!r} of {module.rsplit('.', 1)[-1]} has no librdkafka "
                               f"equivalent (it takes {', '.join(allowed)})", "sasl.jaas.config")
    missing = [name for name in required if name not in options]
    if missing:
        raise SettingError(f"sasl.jaas.config: {module.rsplit('.', 1)[-1]} needs {' and '.join(missing)}",
                           "sasl.jaas.config")
    out = {allowed[name]: value for name, value in options.items()}
    if "sasl.oauthbearer.extensions" in out:
        out["sasl.oauthbearer.extensions"] = f"logicalCluster={out['sasl.oauthbearer.extensions']}"
    if module in (_OAUTH_MODULE, _OAUTH_MODULE_OLD):
        out["sasl.oauthbearer.method"] = "oidc"
    return out


def parse_jaas(text: str) -> tuple[str, dict[str, str]]:
    """``sasl.jaas.config``'s one login module: its class and options.

    The grammar is Kafka's ``JaasConfig``: ``<LoginModule> <flag> (<name>=<value>)* ;``, tokenized
    as Java's ``StreamTokenizer`` does there: whitespace separates words, ``"`` and ``'`` quote a
    value (``\\n``, ``\\t``... and octal escapes; any other escaped character stands for itself),
    ``//``, ``/* */`` and a lone ``/`` start comments.  Stricter than Java: a quote left open is
    an error, not the end of the value.  Errors name positions and option names, never values."""
    tokens = _jaas_tokens(text)
    if not tokens:
        raise SettingError("sasl.jaas.config: no login module", "sasl.jaas.config")
    position = 0

    def take() -> tuple[str, str, int]:
        nonlocal position
        if position >= len(tokens):
            raise SettingError("sasl.jaas.config: the entry is not terminated by ';'", "sasl.jaas.config")
        token = tokens[position]
        position += 1
        return token

    kind, module, at = take()
    if kind != "word":
        raise SettingError(f"sasl.jaas.config: expected a login module class at character {at + 1}", "sasl.jaas.config")
    kind, flag, at = take()
    if kind != "word" or flag.upper() not in ("REQUIRED", "REQUISITE", "SUFFICIENT", "OPTIONAL"):
        raise SettingError(f"sasl.jaas.config: expected a control flag (required, requisite, sufficient or optional) "
                           f"after {module} at character {at + 1}", "sasl.jaas.config")
    options: dict[str, str] = {}
    while True:
        kind, name, at = take()
        if kind == ";":
            break
        if kind not in ("word", "quoted"):
            raise SettingError(f"sasl.jaas.config: expected an option name or ';' at character {at + 1}",
                               "sasl.jaas.config")
        kind, _, at = take()
        if kind != "=":
            # The name is not quoted back: it may be half of a password with a space in it.
            raise SettingError(f"sasl.jaas.config: expected '=' after an option name at character {at + 1} "
                               "(a value with spaces must be quoted)", "sasl.jaas.config")
        kind, value, at = take()
        if kind not in ("word", "quoted"):
            raise SettingError(f"sasl.jaas.config: no value for option {name!r}", "sasl.jaas.config")
        if name in options:
            raise SettingError(f"sasl.jaas.config: option {name!r} is given twice", "sasl.jaas.config")
        options[name] = value
    if position < len(tokens):
        raise SettingError("sasl.jaas.config: more than one login module (librdkafka, as Kafka, takes one)",
                           "sasl.jaas.config")
    return module, options


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def _jaas_tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) tokens: kind is "word", "quoted", ";" or "="."""
    tokens: list[tuple[str, str, int]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c <= " ":
            i += 1
        elif c == "/":
            if text.startswith("/*", i):
                end = text.find("*/", i + 2)
                if end < 0:
                    raise SettingError(f"sasl.jaas.config: the comment at character {i + 1} is not closed",
                                       "sasl.jaas.config")
                i = end + 2
            else:  # "//" and a lone "/": the rest of the line
                while i < n and text[i] not in "\r\n":
                    i += 1
        elif c in ";=":
            tokens.append((c, c, i))
            i += 1
        elif c in "\"'":
            start, i = i, i + 1
            chars: list[str] = []
            while True:
                if i >= n or text[i] in "\r\n":
                    raise SettingError(f"sasl.jaas.config: the quoted value at character {start + 1} is not closed",
                                       "sasl.jaas.config")
                ch = text[i]
                if ch == c:
                    i += 1
                    break
                if ch == "\\" and i + 1 < n:
                    nxt = text[i + 1]
                    if nxt in "01234567":  # up to three octal digits, the first at most 3 for three
                        digits = nxt
                        limit = 3 if nxt <= "3" else 2
                        j = i + 2
                        while len(digits) < limit and j < n and text[j] in "01234567":
                            digits += text[j]
                            j += 1
                        chars.append(chr(int(digits, 8)))
                        i = j
                        continue
                    chars.append(_ESCAPES.get(nxt, nxt))
                    i += 2
                    continue
                chars.append(ch)
                i += 1
            tokens.append(("quoted", "".join(chars), start))
        else:
            start = i
            while i < n and text[i] > " " and text[i] not in ";=/\"'":
                i += 1
            tokens.append(("word", text[start:i], start))
    return tokens


# -- stores -----------------------------------------------------------------------------------

_JKS_MAGIC = b"\xfe\xed\xfe\xed"
_JCEKS_MAGIC = b"\xce\xce\xce\xce"


def _store_format(path: str, setting: str) -> str:
    """"PEM", "PKCS12" or "JKS", from the file's first bytes."""
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as exc:
        raise SettingError(f"{setting}: cannot read {path}: {exc.strerror or exc}", setting) from None
    if head.startswith((_JKS_MAGIC, _JCEKS_MAGIC)):
        return "JKS"
    if head.lstrip().startswith(b"-----BEGIN") or b"-----BEGIN" in head:
        return "PEM"
    if head[:1] == b"\x30":  # an ASN.1 SEQUENCE: PKCS#12's PFX
        return "PKCS12"
    raise SettingError(f"{setting}: {path} is neither PEM, PKCS#12 nor JKS", setting)


def _store_type(settings: Mapping[str, str], type_key: str, location_key: str) -> str | None:
    """The store's type: as given (upper-cased), else the format of the file it names, else None."""
    given = settings.get(type_key)
    if given is not None and given.strip():
        kind = given.strip().upper()
        if kind not in ("PEM", "PKCS12", "JKS"):
            raise SettingError(f"{type_key} must be PEM, PKCS12 or JKS, got {given.strip()!r}", type_key)
        return kind
    location = settings.get(location_key)
    return _store_format(location, location_key) if location else None


def _jks_refusal(setting: str, what: str) -> SettingError:
    return SettingError(f"{setting}: librdkafka cannot read a JKS {what}; convert it to "
                        + ("PEM (keytool -exportcert -rfc -keystore IT -alias ALIAS > ca.pem) and set "
                           "ssl.truststore.type=PEM" if what == "trust store" else
                           "PKCS#12 (keytool -importkeystore -srckeystore IT -destkeystore client.p12 -deststoretype "
                           "PKCS12) and set ssl.keystore.type=PKCS12"), setting)


def _truststore_settings(settings: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    location = settings.get("ssl.truststore.location")
    certificates = settings.get("ssl.truststore.certificates")
    if location is None and certificates is None:
        for key in ("ssl.truststore.password", "ssl.truststore.type"):
            if settings.get(key):
                raise SettingError(f"{key} is set but no trust store is (ssl.truststore.location)", key)
        return {}
    if location is not None and certificates is not None:
        raise SettingError("ssl.truststore.location and ssl.truststore.certificates are both set: give one",
                           "ssl.truststore.certificates")
    if certificates is not None:
        kind = (settings.get("ssl.truststore.type") or "PEM").strip().upper()
        if kind != "PEM":
            raise SettingError(f"ssl.truststore.certificates needs ssl.truststore.type=PEM, not {kind}",
                               "ssl.truststore.type")
        if "-----BEGIN CERTIFICATE-----" not in certificates:
            raise SettingError("ssl.truststore.certificates holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                               "ssl.truststore.certificates")
        _no_store_password(settings, "ssl.truststore.password", "trust store")
        return {"ssl.ca.pem": (certificates, "ssl.truststore.certificates")}
    assert location is not None
    store = _store_type(settings, "ssl.truststore.type", "ssl.truststore.location")
    if store == "JKS":
        raise _jks_refusal("ssl.truststore.location", "trust store")
    if store == "PKCS12":
        raise SettingError("ssl.truststore.location: librdkafka cannot read a PKCS#12 trust store; convert it to PEM "
                           "(openssl pkcs12 -in IT -nokeys -out ca.pem) and set ssl.truststore.type=PEM",
                           "ssl.truststore.location")
    _no_store_password(settings, "ssl.truststore.password", "trust store")
    return {"ssl.ca.location": (location, "ssl.truststore.location")}


def _no_store_password(settings: Mapping[str, str], key: str, what: str) -> None:
    if settings.get(key):
        raise SettingError(f"{key}: a PEM {what} has no password (Kafka refuses one too); leave it out", key)


def _keystore_settings(settings: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    location = settings.get("ssl.keystore.location")
    key = settings.get("ssl.keystore.key")
    chain = settings.get("ssl.keystore.certificate.chain")
    if location is None and key is None and chain is None:
        for name in ("ssl.keystore.password", "ssl.keystore.type"):
            if settings.get(name):
                raise SettingError(f"{name} is set but no key store is (ssl.keystore.location)", name)
        return {}
    if key is not None or chain is not None:
        if location is not None:
            raise SettingError("ssl.keystore.location and ssl.keystore.key are both set: give one", "ssl.keystore.key")
        if key is None or chain is None:
            missing = "ssl.keystore.key" if key is None else "ssl.keystore.certificate.chain"
            raise SettingError(f"{missing} must be set too (a PEM key store in settings is a key and its chain)", missing)
        kind = (settings.get("ssl.keystore.type") or "PEM").strip().upper()
        if kind != "PEM":
            raise SettingError(f"ssl.keystore.key needs ssl.keystore.type=PEM, not {kind}", "ssl.keystore.type")
        if "PRIVATE KEY-----" not in key:
            raise SettingError("ssl.keystore.key holds no PEM private key (-----BEGIN PRIVATE KEY-----)", "ssl.keystore.key")
        if "-----BEGIN CERTIFICATE-----" not in chain:
            raise SettingError("ssl.keystore.certificate.chain holds no PEM certificate", "ssl.keystore.certificate.chain")
        _no_store_password(settings, "ssl.keystore.password", "key store")
        return {"ssl.key.pem": (key, "ssl.keystore.key"), "ssl.certificate.pem": (chain, "ssl.keystore.certificate.chain")}
    assert location is not None
    store = _store_type(settings, "ssl.keystore.type", "ssl.keystore.location")
    if store == "JKS":
        raise _jks_refusal("ssl.keystore.location", "key store")
    if store == "PKCS12":  # librdkafka reads PKCS#12 itself, with its password
        password = settings.get("ssl.keystore.password")
        if not password:
            raise SettingError("ssl.keystore.password must be set for a PKCS#12 key store", "ssl.keystore.password")
        return {"ssl.keystore.location": (location, "ssl.keystore.location"),
                "ssl.keystore.password": (password, "ssl.keystore.password")}
    _no_store_password(settings, "ssl.keystore.password", "key store (its key's password is ssl.key.password)")
    try:
        text = Path(location).read_text(errors="replace")
    except OSError as exc:
        raise SettingError(f"ssl.keystore.location: cannot read {location}: {exc.strerror or exc}",
                           "ssl.keystore.location") from None
    if "PRIVATE KEY-----" not in text or "-----BEGIN CERTIFICATE-----" not in text:
        raise SettingError(f"ssl.keystore.location: the PEM key store {location} must hold the private key and the "
                           "certificate chain", "ssl.keystore.location")
    # Both from the one file: OpenSSL reads the certificates and the key out of it, skipping the rest.
    return {"ssl.certificate.location": (location, "ssl.keystore.location"),
            "ssl.key.location": (location, "ssl.keystore.location")}


# -- kafka-python ------------------------------------------------------------------------------

#: librdkafka's name -> kafka-python's keyword, for settings that mean the same.
_KAFKA_PYTHON = {
    "client.id": "client_id",
    "security.protocol": "security_protocol",
    "sasl.mechanism": "sasl_mechanism",
    "sasl.mechanisms": "sasl_mechanism",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
    "sasl.kerberos.service.name": "sasl_kerberos_service_name",
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "ssl.crl.location": "ssl_crlfile",
    "metadata.max.age.ms": "metadata_max_age_ms",
    "reconnect.backoff.ms": "reconnect_backoff_ms",
    "reconnect.backoff.max.ms": "reconnect_backoff_max_ms",
    "connections.max.idle.ms": "connections_max_idle_ms",
    "retry.backoff.ms": "retry_backoff_ms",
    "socket.send.buffer.bytes": "send_buffer_bytes",
    "socket.receive.buffer.bytes": "receive_buffer_bytes",
}
_INTEGER_KEYWORDS = {"metadata_max_age_ms", "reconnect_backoff_ms", "reconnect_backoff_max_ms", "connections_max_idle_ms",
                     "retry_backoff_ms", "send_buffer_bytes", "receive_buffer_bytes"}
#: librdkafka settings about its own logging and debugging: nothing to carry over.
_KAFKA_PYTHON_IGNORED = {"log_level", "debug", "log.connection.close", "log.queue", "log.thread.name"}
#: Settings kafka-python cannot take as text, but an ``ssl.SSLContext`` built here can.
_PEM_TEXT = ("ssl.ca.pem", "ssl.certificate.pem", "ssl.key.pem")


def _kafka_python(settings: ClientSettings) -> dict[str, Any]:
    config = settings.config
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in _KAFKA_PYTHON_IGNORED or key == "bootstrap.servers" or key in _PEM_TEXT:
            continue
        if key in ("ssl.keystore.location", "ssl.keystore.password"):
            raise SettingError(f"{settings.origin(key)}: the transaction tools' client (kafka-python) cannot read a "
                               "PKCS#12 key store; convert it to PEM (openssl pkcs12 -in IT -out client.pem -nodes) and "
                               "set ssl.keystore.type=PEM", settings.origin(key))
        if key == "ssl.endpoint.identification.algorithm":
            out["ssl_check_hostname"] = value.strip().lower() != "none"
            continue
        keyword = _KAFKA_PYTHON.get(key)
        if keyword is None:
            raise SettingError(f"{settings.origin(key)}: the transaction tools' client (kafka-python) has no such "
                               "setting", settings.origin(key))
        if keyword in ("security_protocol", "sasl_mechanism"):
            out[keyword] = value.strip().upper()
        elif keyword in _INTEGER_KEYWORDS:
            try:
                out[keyword] = int(value)
            except ValueError:
                raise SettingError(f"{settings.origin(key)} must be a whole number, got {value!r}",
                                   settings.origin(key)) from None
        else:
            out[keyword] = value
    cafile = out.get("ssl_cafile")
    if any(key in config for key in _PEM_TEXT) or (cafile is not None and os.path.isdir(cafile)):
        out["ssl_context"] = _ssl_context(config, out)
    return out


def _ssl_context(config: Mapping[str, str], kwargs: Mapping[str, Any]) -> ssl.SSLContext:
    """kafka-python's own context (``kafka.net.transport``), plus what it cannot take: PEM text and
    a directory of CA certificates."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = bool(kwargs.get("ssl_check_hostname", True))
    try:
        cafile = kwargs.get("ssl_cafile")
        if "ssl.ca.pem" in config:
            context.load_verify_locations(cadata=config["ssl.ca.pem"])
        elif cafile is not None:
            context.load_verify_locations(capath=cafile) if os.path.isdir(cafile) else context.load_verify_locations(cafile)
        else:
            context.load_default_certs()
        certificate = config.get("ssl.certificate.pem")
        key = config.get("ssl.key.pem")
        password = kwargs.get("ssl_password")
        if certificate is not None or key is not None:
            with tempfile.TemporaryDirectory(prefix="onceflow-ssl-") as directory:  # load_cert_chain takes files only
                certfile = _private_file(directory, "certificate.pem", certificate) if certificate is not None else kwargs.get("ssl_certfile")
                keyfile = _private_file(directory, "key.pem", key) if key is not None else kwargs.get("ssl_keyfile")
                if certfile is None:
                    raise SettingError("ssl.key.pem is set without a certificate (ssl.certificate.pem)", "ssl.key.pem")
                context.load_cert_chain(certfile, keyfile, password)
        elif kwargs.get("ssl_certfile") is not None:
            context.load_cert_chain(kwargs["ssl_certfile"], kwargs.get("ssl_keyfile"), password)
    except (ssl.SSLError, OSError) as exc:
        raise SettingError(f"the TLS settings: {exc}") from None
    return context


def _private_file(directory: str, name: str, text: str) -> str:
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


# -- where settings come from -------------------------------------------------------------------


def parse_assignment(text: str) -> tuple[str, str]:
    """``key=value`` (``-X``): the key trimmed, the value as given (it may hold ``=``)."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"expected key=value, got {text!r}" if not is_secret(key) else "expected key=value")
    return key.strip(), value


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Java ``.properties`` file as ``Properties.load`` reads it (escapes, ``\\uXXXX``, continuation
    lines, ``#``/``!`` comments; the last of a repeated key wins).  Bytes are UTF-8, or ISO-8859-1
    where they are not (Java's ``PropertyResourceBundle`` does the same)."""
    import javaproperties

    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise SettingError(f"--command-config: cannot read {os.fspath(path)}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    try:
        return dict(javaproperties.loads(text))
    except javaproperties.InvalidUEscapeError as exc:
        raise SettingError(f"--command-config: {os.fspath(path)}: invalid \\u escape {exc.escape!r}") from None


def settings_from(pairs: Iterable[tuple[str, str]] = (), command_config: str | os.PathLike[str] | None = None) -> ClientSettings:
    """The file's settings, then each ``key=value`` over them, translated."""
    merged: dict[str, str] = dict(read_properties(command_config)) if command_config is not None else {}
    for key, value in pairs:
        merged[key] = value
    return translate(merged)


def _assignment(text: str) -> tuple[str, str]:
    try:
        return parse_assignment(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_options(parser: argparse.ArgumentParser, *, suppress: bool = False, dest_suffix: str = "") -> None:
    """``-X key=value`` (repeatable) and ``--command-config FILE`` on ``parser``.  ``suppress``: no
    defaults (a sub-command's copy of its family's options); ``dest_suffix`` keeps two levels' ``-X``
    lists apart (argparse would let the sub-command's replace the family's)."""
    default_list: Any = argparse.SUPPRESS if suppress else []
    default_file: Any = argparse.SUPPRESS if suppress else None
    parser.add_argument("-X", dest=f"client_settings{dest_suffix}", action="append", type=_assignment,
                        default=default_list, metavar="KEY=VALUE",
                        help="a client setting (librdkafka's or Kafka's Java name, e.g. security.protocol=SASL_SSL), "
                             "repeatable; over --command-config")
    parser.add_argument("--command-config", dest="command_config", default=default_file, metavar="FILE",
                        help="client settings in a Java .properties file, as Kafka's tools take them "
                             "(sasl.jaas.config, ssl.truststore.location...)")


def from_options(args: argparse.Namespace, suffixes: Sequence[str] = ("",)) -> ClientSettings:
    """The settings ``add_options`` collected (each level's ``-X``, in the order of ``suffixes``, over
    ``--command-config``), translated, and checked offline by librdkafka.  ``bootstrap.servers`` is
    refused: the commands take it as ``--bootstrap-servers``.  Raises ``SettingError``."""
    pairs: list[tuple[str, str]] = []
    for suffix in suffixes:
        pairs += getattr(args, f"client_settings{suffix}", None) or []
    settings = settings_from(pairs, getattr(args, "command_config", None))
    if "bootstrap.servers" in settings.config:
        raise SettingError("bootstrap.servers: give the brokers with --bootstrap-servers", "bootstrap.servers")
    settings.check()
    return settings
