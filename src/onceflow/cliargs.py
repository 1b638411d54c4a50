"""Command-line values checked where they are typed.

Every ``onceflow`` option that takes a port, an address, a duration, a count or a time uses
one of these argparse types, so a bad value is refused by the parser, as a usage error
(exit status 2, one line naming the option), before anything connects or any data moves.

``OnceflowParser`` is the parser class of every ``onceflow`` command: its usage errors are
one line, ``onceflow topics list: argument --timeout: ...``, not argparse's usage block.

``default_bootstrap`` is the cluster a command reaches when ``--bootstrap-servers`` is not
given: ``$ONCEFLOW_BOOTSTRAP_SERVERS`` when it is set, else (for the tools) 127.0.0.1:9092.
A bad value there is refused as a usage error that names the variable.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import re
import sys
from collections.abc import Callable
from typing import NoReturn

#: Log levels ``--log-level`` takes (Python's names; WARN as Kafka's tools spell it).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")

#: The environment variable naming the cluster when ``--bootstrap-servers`` is not given.
BOOTSTRAP_ENV = "ONCEFLOW_BOOTSTRAP_SERVERS"
#: The tools' cluster when neither ``--bootstrap-servers`` nor ``$ONCEFLOW_BOOTSTRAP_SERVERS`` names one.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

#: The longest duration any option takes (a year): beyond it, time arithmetic overflows.
MAX_DURATION_S = 365 * 86400.0
#: The longest ``--timeout``: librdkafka's request timeouts go up to an hour (3,600,000 ms).
MAX_TIMEOUT_S = 3600.0
#: The most partitions a topic may be given here: librdkafka's NewTopic/NewPartitions limit.
MAX_PARTITIONS = 100_000
#: Kafka's longest topic name (Topic.MAX_NAME_LENGTH) and its legal characters (Topic.LEGAL_CHARS).
MAX_TOPIC_NAME = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")
#: The latest time ``timestamp_ms`` takes (9999-12-31T23:59:59.999Z).
MAX_TIMESTAMP_MS = 253_402_300_799_999

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")


class OnceflowParser(argparse.ArgumentParser):
    """argparse with one-line usage errors (exit status 2): ``PROG: MESSAGE (see PROG --help)``."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")
        raise SystemExit(2)


def port(text: str) -> int:
    """A TCP port, 0 (any free port) to 65535."""
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"expected a port number from 0 to 65535, got {text!r}")
    return int(text)


def host_port(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9092`` for IPv6); an empty host is 127.0.0.1."""
    host, sep, number = text.rpartition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        value = port(number)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT with a port from 0 to 65535, got {text!r}") from None
    return host.strip("[]") or "127.0.0.1", value


class _FromEnvironment(str):
    """A default read from ``$ONCEFLOW_BOOTSTRAP_SERVERS``: argparse checks a string default with the
    option's type, and a bad one is then blamed on the variable, not on an option nobody typed."""


def default_bootstrap(fallback: str | None = DEFAULT_BOOTSTRAP) -> str | None:
    """``$ONCEFLOW_BOOTSTRAP_SERVERS`` when it is set and not blank, else ``fallback`` (the tools:
    127.0.0.1:9092; a command that starts its own broker without one: None).  Use it as the default
    of ``--bootstrap-servers`` with ``type=bootstrap_servers``."""
    value = os.environ.get(BOOTSTRAP_ENV, "").strip()
    return _FromEnvironment(value) if value else fallback


def bootstrap_servers(text: str) -> str:
    """A comma-separated list of ``HOST:PORT`` (each port 1 to 65535); returned as typed, without blanks."""
    origin = f" (from ${BOOTSTRAP_ENV})" if isinstance(text, _FromEnvironment) else ""
    addresses = [part.strip() for part in text.split(",") if part.strip()]
    if not addresses:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...], got nothing{origin}")
    for address in addresses:
        host, sep, number = address.rpartition(":")
        if not sep or not host or not number.isdigit() or not 1 <= int(number) <= 65535:
            raise argparse.ArgumentTypeError(
                f"expected HOST:PORT[,HOST:PORT...] with ports from 1 to 65535, got {address!r}{origin}")
    return ",".join(addresses)


def _seconds(text: str) -> float:
    """A duration: a number of seconds (``2.5``) or with units (``500ms``, ``30s``, ``5m``, ``1h30m``, ``1d``)."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise argparse.ArgumentTypeError(
                f"expected a duration in seconds (30, 2.5) or with units (500ms, 30s, 5m, 1h), got {text!r}") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds > MAX_DURATION_S:
        raise argparse.ArgumentTypeError(f"expected a duration of at most 365 days, got {text!r}")
    return seconds


def _expect(ok: bool, wanted: str, text: str) -> None:
    """Refuse ``text`` unless ``ok``: ``expected WANTED, got 'TEXT'``."""
    if not ok:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}")


def positive_seconds(text: str) -> float:
    """A duration above zero (timeouts, run lengths)."""
    seconds = _seconds(text)
    _expect(seconds > 0, "a duration above zero", text)
    return seconds


def timeout_seconds(text: str) -> float:
    """``--timeout``: a duration from 1 ms to an hour (the longest request timeout librdkafka takes)."""
    seconds = _seconds(text)
    _expect(0.001 <= seconds <= MAX_TIMEOUT_S, "a timeout from 1ms to 1h", text)
    return seconds


def non_negative_seconds(text: str) -> float:
    """A duration of zero or more (delays, lingers)."""
    seconds = _seconds(text)
    _expect(seconds >= 0, "a duration of zero or more", text)
    return seconds


def _integer(text: str) -> int:
    try:
        value = int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    _expect(-(2**63) <= value < 2**63, "a whole number that fits in 64 bits", text)  # Kafka's offsets, counts, times
    return value


def integer(text: str) -> int:
    """Any whole number that fits Kafka's 64 bits (``--shift-by -5``)."""
    return _integer(text)


def whole_number(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type for a whole number from ``low`` to ``high``, ``what`` naming it in a refusal."""
    def parse(text: str) -> int:
        value = _integer(text)
        _expect(low <= value <= high, f"{what} from {low:,} to {high:,}", text)
        return value

    parse.__name__ = what.removeprefix("a ").replace(" ", "_")
    return parse


#: A topic's partition count: 1 to ``MAX_PARTITIONS``.
partition_count = whole_number(1, MAX_PARTITIONS, "a partition count")


def text_value(text: str) -> str:
    """Text a client sends as UTF-8 (keys, headers, separators, formats): bytes the terminal gave that
    are not UTF-8 are refused here, not in the client library."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise argparse.ArgumentTypeError(f"expected UTF-8 text, got {text!r}") from None
    return text


def name(text: str) -> str:
    """A non-empty UTF-8 name: a consumer group, a transactional id, a config name."""
    if not text_value(text):
        raise argparse.ArgumentTypeError("expected a name, got an empty one")
    return text


def topic_name(text: str) -> str:
    """A topic name as Kafka allows it (``Topic.validate``): 1 to 249 of ``a-z A-Z 0-9 . _ -``,
    not ``.`` or ``..``."""
    if not text or text in (".", "..") or len(text) > MAX_TOPIC_NAME or not _TOPIC_NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"expected a topic name (1 to {MAX_TOPIC_NAME} of a-z, A-Z, 0-9, '.', '_' and '-'), got {text!r}")
    return text


def positive_int(text: str) -> int:
    """A count of one or more."""
    value = _integer(text)
    _expect(value >= 1, "a whole number of 1 or more", text)
    return value


def non_negative_int(text: str) -> int:
    """A count or offset of zero or more."""
    value = _integer(text)
    _expect(value >= 0, "a whole number of 0 or more", text)
    return value


def log_level(text: str) -> str:
    """One of ``LOG_LEVELS``, any case; returned in upper case (WARN as WARNING)."""
    level = text.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"expected one of DEBUG, INFO, WARNING, ERROR, CRITICAL, got {text!r}")
    return "WARNING" if level == "WARN" else level


def timestamp_ms(text: str) -> int:
    """A point in time as epoch milliseconds: ISO-8601 (``2026-11-27``, ``2026-11-27T15:30:00``,
    with ``Z`` or an offset; no zone means the local one, as kafka-consumer-groups' --to-datetime
    reads it), or a number of epoch milliseconds."""
    value = text.strip()
    wrong = argparse.ArgumentTypeError(
        f"expected a time from 1970 to 9999 as ISO-8601 (2026-11-27T15:30:00Z) or epoch milliseconds, got {text!r}")
    if value.lstrip("-").isdigit():
        ms = int(value)
    else:
        try:
            when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
            if when.tzinfo is None:
                when = when.astimezone()  # the local zone
            ms = int(when.timestamp() * 1000)
        except (ValueError, OverflowError, OSError):
            raise wrong from None
    # Negative times are ListOffsets' special values (-1 latest, -2 earliest): never a user's time.
    if not 0 <= ms <= MAX_TIMESTAMP_MS:
        raise wrong
    return ms
