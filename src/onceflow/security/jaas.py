"""JAAS configuration as Kafka's broker reads it: where PLAIN's users come from.

Theory of operation: a JAAS *entry* names a login module, a control flag and
options, ending with a semicolon (Kafka's ``JaasConfig``):

    org.apache.kafka.common.security.plain.PlainLoginModule required
        username="admin" password="admin-secret" user_alice="alice-secret";

A JAAS *file* (``java.security.auth.login.config``; Java's ``ConfigFile``
syntax) holds named sections of entries, each ``Name { entries };``.
Kafka's broker finds a listener's entries for a mechanism in this order
(``JaasContext.loadServerContext``):

1. ``listener.name.<listener>.<mechanism>.sasl.jaas.config`` (listener and
   mechanism in lower case), which must hold exactly one entry;
2. the file's ``<listener lower case>.KafkaServer`` section;
3. the file's ``KafkaServer`` section.

A ``sasl.jaas.config`` without the mechanism prefix is ignored on the broker,
with a warning, as Kafka ignores it.  PLAIN's users are the ``user_<name>``
options of the PlainLoginModule entries found (``PlainServerCallbackHandler``
reads no other module's options).

The text is tokenized as Java's ``StreamTokenizer`` would: ``//`` and
``/* */`` comments, values bare or in double or single quotes (a backslash
escapes the next character; ``\\n``, ``\\t``, ``\\r`` are control characters).
Not supported: ``${property}`` expansion in files.  Anything malformed raises
ConfigError naming the setting, never quoting a value (values are secrets).

The file is read once per ``BrokerConfig`` (Kafka reads it once at start-up),
by ``check_mechanisms`` at start or by the first login, and kept beside it.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..config import JAVA_SECURITY_AUTH_LOGIN_CONFIG, LISTENER_PREFIX, SASL_JAAS_CONFIG, BrokerConfig, ConfigError

log = logging.getLogger(__name__)

PLAIN_LOGIN_MODULE = "org.apache.kafka.common.security.plain.PlainLoginModule"
SERVER_SECTION = "KafkaServer"
_FLAGS = ("required", "requisite", "sufficient", "optional")
_USER_PREFIX = "user_"
_PUNCTUATION = "{};="


@dataclass(frozen=True, slots=True)
class LoginModule:
    """One JAAS entry: ``<module> <flag> key=value ...;``."""

    module: str
    flag: str
    options: Mapping[str, str] = field(repr=False)  # secrets


# -- tokens ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # "word", "string" or one of _PUNCTUATION
    text: str
    at: int  # offset in the text, for messages


def _tokens(text: str, setting: str) -> list[_Token]:
    out: list[_Token] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c.isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                raise ConfigError(f"Invalid {setting}: unterminated /* comment at offset {i}")
            i = end + 2
        elif c in _PUNCTUATION:
            out.append(_Token(c, c, i))
            i += 1
        elif c in "\"'":
            value, end = _quoted(text, i, setting)
            out.append(_Token("string", value, i))
            i = end
        else:
            start = i
            while i < n and not (text[i].isspace() or text[i] in _PUNCTUATION or text[i] in "\"'"
                                 or text.startswith("//", i) or text.startswith("/*", i)):
                i += 1
            out.append(_Token("word", text[start:i], start))
    return out


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f"}


def _quoted(text: str, start: int, setting: str) -> tuple[str, int]:
    quote, i = text[start], start + 1
    chars: list[str] = []
    while i < len(text):
        c = text[i]
        if c == quote:
            return "".join(chars), i + 1
        if c == "\\" and i + 1 < len(text):
            chars.append(_ESCAPES.get(text[i + 1], text[i + 1]))
            i += 2
            continue
        chars.append(c)
        i += 1
    raise ConfigError(f"Invalid {setting}: a quoted value opened at offset {start} is not closed")


class _Parser:
    def __init__(self, text: str, setting: str) -> None:
        self.tokens = _tokens(text, setting)
        self.setting = setting
        self.pos = 0

    def peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> _Token | None:
        token = self.peek()
        self.pos += token is not None
        return token

    def fail(self, why: str, token: _Token | None) -> ConfigError:
        where = "at the end" if token is None else f"at offset {token.at}"
        return ConfigError(f"Invalid {self.setting}: {why} ({where})")

    def entry(self) -> LoginModule:
        """``<module> <flag> (key=value)* ;`` (Kafka's ``JaasConfig.parseAppConfigurationEntry``)."""
        module = self.take()
        if module is None or module.kind != "word":
            raise self.fail("expected a login module class name", module)
        flag = self.take()
        if flag is None or flag.kind != "word":
            raise self.fail("login module control flag not specified", flag)
        if flag.text.lower() not in _FLAGS:
            raise self.fail(f"invalid login module control flag {flag.text!r} (required, requisite, sufficient or optional)", flag)
        options: dict[str, str] = {}
        while (token := self.take()) is not None and token.kind != ";":
            if token.kind != "word":
                raise self.fail("expected an option name, or a semicolon to end the entry", token)
            equals, value = self.take(), self.take()
            if equals is None or equals.kind != "=" or value is None or value.kind not in ("word", "string"):
                # The token is not quoted back: it may be half of a password with a space in it.
                raise self.fail("value not specified for an option (a value with spaces must be quoted)", value or equals)
            options[token.text] = value.text
        if token is None:
            raise self.fail("JAAS config entry not terminated by semi-colon", None)
        return LoginModule(module.text, flag.text.lower(), options)


def parse_entries(text: str, setting: str) -> tuple[LoginModule, ...]:
    """The entries of an inline ``sasl.jaas.config``; ``setting`` names it in errors."""
    parser = _Parser(text, setting)
    entries = []
    while parser.peek() is not None:
        entries.append(parser.entry())
    if not entries:
        raise ConfigError(f"Invalid {setting}: login module not specified in JAAS config")
    return tuple(entries)


def parse_file(text: str, setting: str) -> dict[str, tuple[LoginModule, ...]]:
    """The sections of a JAAS file, by name: ``Name { entries };`` each (Java's ConfigFile)."""
    parser = _Parser(text, setting)
    sections: dict[str, tuple[LoginModule, ...]] = {}
    while (name := parser.take()) is not None:
        if name.kind not in ("word", "string"):
            raise parser.fail("expected a section name", name)
        if (brace := parser.take()) is None or brace.kind != "{":
            raise parser.fail(f"expected {{ after section {name.text!r}", brace)
        entries = []
        while (token := parser.peek()) is not None and token.kind != "}":
            entries.append(parser.entry())
        parser.take()
        if token is None:
            raise parser.fail(f"section {name.text!r} is not closed with }}", None)
        if (semicolon := parser.take()) is None or semicolon.kind != ";":
            raise parser.fail(f"expected ; after the }} of section {name.text!r}", semicolon)
        if name.text in sections:
            raise parser.fail(f"can not specify multiple entries for {name.text!r}", name)
        sections[name.text] = tuple(entries)
    return sections


# -- the broker's lookup --------------------------------------------------------


def mechanism_key(mechanism: str) -> str:
    """The per-listener key of a mechanism's inline JAAS: ``scram-sha-256.sasl.jaas.config``."""
    return f"{mechanism.lower()}.{SASL_JAAS_CONFIG.name}"


def setting_name(listener_name: str, mechanism: str) -> str:
    """The full name of that setting: ``listener.name.sasl_ssl.plain.sasl.jaas.config``."""
    return f"{LISTENER_PREFIX}{listener_name.lower()}.{mechanism_key(mechanism)}"


@dataclass(frozen=True, slots=True)
class ServerEntries:
    """What Kafka's ``JaasContext.loadServerContext`` finds for one listener and mechanism."""

    entries: tuple[LoginModule, ...]
    #: Where they came from, for messages: a setting, or ``<file> section <name>``.
    source: str


#: Parsed JAAS files, kept with the configuration that named them (read once per BrokerConfig).
_FILES: weakref.WeakKeyDictionary[BrokerConfig, dict[str, dict[str, tuple[LoginModule, ...]]]] = weakref.WeakKeyDictionary()


def _file_sections(config: BrokerConfig, path: str) -> dict[str, tuple[LoginModule, ...]]:
    cached = _FILES.setdefault(config, {})
    if path not in cached:
        setting = f"{JAVA_SECURITY_AUTH_LOGIN_CONFIG.name} file {path}"
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"Cannot read the JAAS file of {JAVA_SECURITY_AUTH_LOGIN_CONFIG.name} ({path}): {exc}") from None
        cached[path] = parse_file(text, setting)
    return cached[path]


def server_entries(listener_name: str, mechanism: str, config: BrokerConfig) -> ServerEntries | None:
    """The JAAS entries of ``mechanism`` on ``listener_name``, in Kafka's lookup order; None if
    neither the mechanism's inline setting nor a file section names any.  ConfigError if
    malformed, or if the inline setting holds other than one entry."""
    inline = config.for_listener(listener_name, mechanism_key(mechanism))
    if inline is not None:
        setting = setting_name(listener_name, mechanism)
        entries = parse_entries(str(inline), setting)
        if len(entries) != 1:
            raise ConfigError(f"Invalid {setting}: JAAS config property contains {len(entries)} login modules, should be 1 module")
        return ServerEntries(entries, setting)
    path = config[JAVA_SECURITY_AUTH_LOGIN_CONFIG]
    if path is None:
        return None
    sections = _file_sections(config, path)
    for name in (f"{listener_name.lower()}.{SERVER_SECTION}", SERVER_SECTION):
        if name in sections:
            return ServerEntries(sections[name], f"{path} section {name}")
    return None


def unprefixed_jaas_ignored(listener_name: str, config: BrokerConfig) -> bool:
    """Is a ``sasl.jaas.config`` without a mechanism prefix set for this listener?  Kafka's broker
    ignores it ("should be prefixed with SASL mechanism name"); start-up logs that once."""
    return config.for_listener(listener_name, SASL_JAAS_CONFIG) is not None


def plain_users(listener_name: str, config: BrokerConfig) -> dict[str, str]:
    """PLAIN's users on a listener: ``user_<name>="<password>"`` options of its PlainLoginModule
    entries (the first entry naming a user wins, as Kafka's ``configEntryOption``)."""
    found = server_entries(listener_name, "PLAIN", config)
    users: dict[str, str] = {}
    for entry in found.entries if found else ():
        if entry.module != PLAIN_LOGIN_MODULE:
            continue
        for key, value in entry.options.items():
            if key.startswith(_USER_PREFIX):
                users.setdefault(key[len(_USER_PREFIX):], value)
    return users
