"""Client failures as one line: Kafka errors, clusters out of reach, client libraries' log floods.

Every ``onceflow`` command that reaches a cluster (the tools, bench, chaos, the demo) reports
a failure the same way, whichever client library met it:

* a Kafka error reads ``NAME (code N): message``: ``UNKNOWN_TOPIC_OR_PARTITION (code 3): ...``
  from confluent-kafka (librdkafka's local errors keep their ``_`` names and negative codes:
  ``_TRANSPORT (code -195)``) and from kafka-python alike (``kafka_error_text``);
* a cluster none of whose bootstrap addresses takes a TCP connection is named with the reason
  the moment that is known (``check_reachable``), instead of after the client's own retries:
  ``cannot reach 127.0.0.1:1: connection refused``; one that takes the connection but does not
  answer a metadata request within the timeout is ``no answer from HOST:PORT within Ns``
  (``preflight``, which every command runs before its first client);
* librdkafka's log lines and error callbacks are captured (``ClientLog``) rather than printed:
  the first error explains a later timeout, and a count of what was hidden is one line.
  ``--log-level DEBUG`` shows them all as they come;
* Ctrl-C (``interruptible``) ends a command promptly, whatever it waits on (next section).

Ctrl-C.  While ``interruptible()`` holds (a tool's run), the SIGINT handler records the interrupt,
then raises ``KeyboardInterrupt`` as Python's own does, unless a client callback of ours is running
(``ClientLog``'s, a delivery report: ``deferring_interrupts``), where it only records it.  The record
is what counts: confluent-kafka loses an exception raised inside any librdkafka callback (the call
runs on, or fails later with "SystemError: ... returned NULL without setting an exception", or with
whatever error it met meanwhile, e.g. ``_ALL_BROKERS_DOWN``), so every wait on a client is made of
short slices (at most ``SLICE_S``; ``sliced``) after each of which ``check_interrupt()`` raises the recorded
interrupt, and a failure after one (``interrupted()``) is reported as the interruption.  A second
Ctrl-C ends the process at once, by the signal, as it would without us.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

#: librdkafka's error codes that mean the cluster could not be reached or talked to.
_CONNECTION_ERRORS = {"_TRANSPORT", "_ALL_BROKERS_DOWN", "_AUTHENTICATION", "_SSL", "_RESOLVE", "_TIMED_OUT",
                      "SASL_AUTHENTICATION_FAILED", "_UNKNOWN_BROKER"}


#: The longest a tool waits on a client call before it looks for a recorded Ctrl-C.
SLICE_S = 0.2

_Call = TypeVar("_Call", bound=Callable[..., Any])


class _Interrupts:
    """The one record of Ctrl-C for the process (see the module's docstring)."""

    def __init__(self) -> None:
        self.seen = 0
        self.deferred = 0  # > 0 while a client callback of ours runs

    def handle(self, _signum: int, _frame: Any) -> None:
        self.seen += 1
        if self.seen > 1:  # insisted: die by the signal
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        if not self.deferred:
            raise KeyboardInterrupt


_INTERRUPTS = _Interrupts()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """While it holds, Ctrl-C is recorded (``interrupted``) and raised as KeyboardInterrupt where that
    is safe.  Off the main thread (where signals cannot be handled) nothing is installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, _INTERRUPTS.handle)
    _INTERRUPTS.seen = 0
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.default_int_handler)
        _INTERRUPTS.seen = 0


def interrupted() -> bool:
    """Whether Ctrl-C came while ``interruptible()`` holds."""
    return _INTERRUPTS.seen > 0


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if Ctrl-C came (its own KeyboardInterrupt may have been lost in a client)."""
    if _INTERRUPTS.seen:
        raise KeyboardInterrupt


def deferring_interrupts(callback: _Call) -> _Call:
    """A client callback during which Ctrl-C is only recorded (raised by the next ``check_interrupt``),
    so that what it counts stays whole."""

    @functools.wraps(callback)
    def deferred(*args: Any, **kwargs: Any) -> Any:
        _INTERRUPTS.deferred += 1
        try:
            return callback(*args, **kwargs)
        finally:
            _INTERRUPTS.deferred -= 1

    return deferred  # type: ignore[return-value]


class Unreachable(Exception):
    """None of the bootstrap addresses could be reached; the message names them and why."""


def kafka_error_text(error: Any) -> str:
    """A client library's Kafka error as ``NAME (code N): message``; None-safe for other objects."""
    name = code = message = None
    if callable(getattr(error, "name", None)) and callable(getattr(error, "code", None)):  # confluent-kafka
        name, code, message = error.name(), error.code(), error.str()
    elif hasattr(error, "errno") and hasattr(error, "message") and hasattr(error, "description"):  # kafka-python
        name, code = error.message, error.errno
        detail = " ".join(str(a) for a in getattr(error, "args", ()) if a)
        message = detail or error.description
    if name is None:
        return " ".join(str(error).split())
    name = _kafka_name(code, name)
    message = " ".join(str(message or "").split())
    message = message.removeprefix("Broker: ")
    return f"{name} (code {code}): {message}" if message else f"{name} (code {code})"


def _kafka_name(code: Any, fallback: str) -> str:
    """Kafka's own name of a broker error code (librdkafka shortens some: UNKNOWN_TOPIC_OR_PART)."""
    if not isinstance(code, int) or code < 0:
        return fallback
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return fallback


def error_line(exc: BaseException) -> str:
    """One line describing any failure a command meets: Kafka errors as ``kafka_error_text``,
    timeouts as such, our own errors by their message, anything else with its type."""
    from confluent_kafka import KafkaError, KafkaException

    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return kafka_error_text(exc.args[0])
    if isinstance(exc, KafkaError):
        return kafka_error_text(exc)
    if isinstance(exc, (concurrent.futures.TimeoutError, TimeoutError)) and not str(exc):
        return "timed out"
    if (type(exc).__module__ or "").startswith("kafka") and hasattr(exc, "errno"):
        return kafka_error_text(exc)
    if isinstance(exc, Unreachable) or getattr(exc, "one_line", False):
        return " ".join(str(exc).split())
    text = str(exc)
    module = type(exc).__module__ or ""
    if module.startswith(("onceflow", "kafka")) and text:
        return " ".join(text.split())
    return " ".join(f"{type(exc).__name__}: {text}".split()) if text else type(exc).__name__


def _addresses(bootstrap: str) -> list[tuple[str, int]]:
    out = []
    for item in bootstrap.split(","):
        item = item.strip()
        for prefix in ("PLAINTEXT://", "SSL://", "SASL_PLAINTEXT://", "SASL_SSL://"):
            if item.upper().startswith(prefix):
                item = item[len(prefix):]
        host, _, port = item.rpartition(":")
        if host and port.isdigit():
            out.append((host.strip("[]"), int(port)))
    return out


def check_reachable(bootstrap: str, timeout: float) -> None:
    """Return once one of ``bootstrap``'s addresses takes a TCP connection; else raise
    ``Unreachable`` naming each address and its reason, within ``timeout`` seconds in all.
    Only a TCP connection is made (and closed at once): what is said on it is the client's."""
    addresses = _addresses(bootstrap)
    if not addresses:
        return  # nothing we can check; the client will say what is wrong
    deadline = time.monotonic() + timeout
    reasons = []
    for host, port in addresses:
        left = deadline - time.monotonic()
        if left <= 0:
            reasons.append(f"{host}:{port}: no answer within {timeout:g}s")
            continue
        try:
            with socket.create_connection((host, port), timeout=left):
                return
        except TimeoutError:
            reasons.append(f"{host}:{port}: no answer within {timeout:g}s")
        except socket.gaierror as exc:
            reasons.append(f"{host}:{port}: unknown host ({exc.strerror})")
        except OSError as exc:
            reasons.append(f"{host}:{port}: {(exc.strerror or str(exc)).lower()}")
    raise Unreachable("cannot reach " + "; ".join(reasons))


#: librdkafka errors after which the pre-flight stops waiting: no bootstrap broker can be talked to.
_GIVE_UP = ("_ALL_BROKERS_DOWN", "_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED", "_SSL")


def sliced(call: Callable[[float], Any], timeout: float, between: Callable[[], None] | None = None) -> Any:
    """``call(seconds)``, a librdkafka request that takes a timeout, within ``timeout`` in all, made again
    in slices of at most ``SLICE_S`` while it times out (_TIMED_OUT, or _TRANSPORT as Metadata says
    it): Ctrl-C is looked for between them, and ``between()`` runs (it may raise).  The last slice's
    failure is raised."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            result = call(max(0.01, min(SLICE_S, deadline - time.monotonic())))
            check_interrupt()
            return result
        except KafkaException as exc:
            check_interrupt()
            error = exc.args[0] if exc.args else None
            again = isinstance(error, KafkaError) and error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT)
            if not again or time.monotonic() >= deadline:
                raise
        if between is not None:
            between()


def preflight(bootstrap: str, timeout: float, config: Mapping[str, Any], log: ClientLog) -> None:
    """Return once the cluster answers a metadata request; else raise ``Unreachable`` naming the
    address and why, within ``timeout``: a TCP connection first (``check_reachable``: a refused or
    unknown address at once), then confluent-kafka's metadata request with ``config`` (the user's
    settings, ``log``'s callbacks in), stopping early when the client reports that no bootstrap
    broker can be talked to (a TLS or SASL handshake refused)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    check_reachable(bootstrap, timeout)
    admin = AdminClient(dict(config))

    def between() -> None:  # the client's errors served and read: no bootstrap broker left, no need to wait
        admin.poll(0)
        check_interrupt()
        if any(e.split(" ", 1)[0] in _GIVE_UP for e in log.errors):
            raise Unreachable(f"cannot reach {bootstrap}: {log.connection_error()}")

    try:
        sliced(lambda seconds: admin.list_topics(timeout=seconds), timeout, between)
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT):
            raise Unreachable(log.explain(f"no answer from {bootstrap} within {timeout:g}s")) from None
        raise Unreachable(log.explain(f"cannot reach {bootstrap}: {error_line(exc)}")) from None


class _Capture(logging.Handler):
    def __init__(self, owner: ClientLog) -> None:
        super().__init__(logging.DEBUG)
        self.owner = owner

    @deferring_interrupts
    def emit(self, record: logging.LogRecord) -> None:
        self.owner.hidden += 1


class ClientLog:
    """What a command's librdkafka clients say, kept rather than printed.

    ``settings()`` goes into each client's configuration: librdkafka's log lines go to a logger
    that counts them (and, with ``debug``, passes them on to stderr), and its error callback
    keeps the errors, the first of which explains a later failure (``explain``)."""

    def __init__(self, debug: bool = False) -> None:
        self.debug = debug
        self.hidden = 0
        self.errors: list[str] = []
        self.logger = logging.getLogger(f"onceflow.client.{id(self):x}")
        self.logger.propagate = debug
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(_Capture(self))

    @deferring_interrupts
    def _error(self, error: Any) -> None:
        text = kafka_error_text(error)
        if len(self.errors) < 100 and text not in self.errors:
            self.errors.append(text)
        if self.debug:
            logging.getLogger("onceflow.client").warning("client error: %s", text)

    def settings(self) -> dict[str, Any]:
        """librdkafka settings that route its logs and errors here."""
        return {"logger": self.logger, "error_cb": self._error}

    def connection_error(self) -> str | None:
        """The first error about reaching or talking to the cluster, if any was reported."""
        for text in self.errors:
            if text.split(" ", 1)[0] in _CONNECTION_ERRORS:
                return text
        return None

    def explain(self, failure: str) -> str:
        """``failure`` with the client's first connection error after it, when there was one."""
        error = self.connection_error()
        return f"{failure} ({error})" if error and error not in failure else failure

    def summary(self) -> str | None:
        """One line on what was hidden, or None."""
        if self.debug or not (self.hidden or self.errors):
            return None
        parts = []
        if self.errors:
            parts.append(f"{len(self.errors)} client error{'s' if len(self.errors) != 1 else ''}")
        if self.hidden:
            parts.append(f"{self.hidden} client log line{'s' if self.hidden != 1 else ''}")
        return f"({' and '.join(parts)} hidden; --log-level DEBUG shows them)"
