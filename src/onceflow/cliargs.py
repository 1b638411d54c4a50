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
from typing import NoReturn

#: Log levels ``--log-level`` takes (Python's names; WARN as Kafka's tools spell it).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL")

#: The environment variable naming the cluster when ``--bootstrap-servers`` is not given.
BOOTSTRAP_ENV = "ONCEFLOW_BOOTSTRAP_SERVERS"
#: The tools' cluster when neither ``--bootstrap-servers`` nor ``$ONCEFLOW_BOOTSTRAP_SERVERS`` names one.
DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

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
    if not math.isfinite(seconds):
        raise argparse.ArgumentTypeError(f"expected a finite duration, got {text!r}")
    return seconds


def positive_seconds(text: str) -> float:
    """A duration above zero (timeouts, run lengths)."""
    seconds = _seconds(text)
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration above zero, got {text!r}")
    return seconds


def non_negative_seconds(text: str) -> float:
    """A duration of zero or more (delays, lingers)."""
    seconds = _seconds(text)
    if seconds < 0:
        raise argparse.ArgumentTypeError(f"expected a duration of zero or more, got {text!r}")
    return seconds


def _integer(text: str) -> int:
    try:
        return int(text.strip().replace("_", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def positive_int(text: str) -> int:
    """A count of one or more."""
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of 1 or more, got {text!r}")
    return value


def non_negative_int(text: str) -> int:
    """A count or offset of zero or more."""
    value = _integer(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of 0 or more, got {text!r}")
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
    if value.lstrip("-").isdigit():
        ms = int(value)
        if ms < 0:
            raise argparse.ArgumentTypeError(f"expected a time (ISO-8601 or epoch milliseconds), got {text!r}")
        return ms
    try:
        when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a time as ISO-8601 (2026-11-27T15:30:00Z) or epoch milliseconds, got {text!r}") from None
    if when.tzinfo is None:
        when = when.astimezone()  # the local zone
    return int(when.timestamp() * 1000)
