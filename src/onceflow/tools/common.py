"""What the tool families share: options, client construction, failures as one line, rendering.

Theory of operation
-------------------
Client libraries only (see :mod:`onceflow.tools`): confluent-kafka for topics,
groups, ACLs and users, kafka-python for the KIP-664 transaction APIs.
kafka-python and rich are imported lazily, so that the rest of ``onceflow``
(and its start-up) does not pay for them.

Options.  Every command takes ``--bootstrap-servers`` (default:
``$ONCEFLOW_BOOTSTRAP_SERVERS``, else 127.0.0.1:9092), ``--timeout`` (a
duration: 30, 2.5, 500ms, 5m), ``--json``, ``-X key=value`` and
``--command-config FILE`` (:mod:`onceflow.clientconfig`), after the family or
after the command.  Their values are checked by the parser (:mod:`onceflow.cliargs`):
a bad one is one line and exit status 2 before anything connects.

A run (``run``).  The client settings are translated and checked (a bad one:
exit 2).  Before the first client the command makes, the pre-flight the long
commands use (``clienterrors.preflight``): a TCP connection, then a metadata
request answered within ``--timeout``.  A cluster that refuses or is not there
is named with the reason at once (``cannot reach HOST:PORT: connection
refused``), one that takes the connection and never answers within the timeout
(``no answer from HOST:PORT within 2s``), a TLS or SASL handshake refused as
soon as the client gives up, not after its retries.  Every librdkafka client of
the run logs into one ``ClientLog`` instead of stderr, kafka-python's connection
errors are kept too.  Then the command's function returns plain data (rows, or
a dict of scalars and row lists), printed as a table (rich, rpk's style: no
borders, upper-case headers, numbers right-aligned, never wrapped or cut) or as
JSON.

Failures are one line, ``onceflow FAMILY COMMAND: message``, exit status 1
(2 for ``UsageError``): Kafka errors as ``NAME (code N): message`` whichever
library met them (``clienterrors.error_line``); a request the cluster did not
answer in time as ``no answer from HOST:PORT within Ns``, followed by the first
connection error a client reported, if any (``_Run.explain``).  ``--log-level
DEBUG`` logs the traceback and every client log line as well.

Ctrl-C is ``interrupted`` and exit status 130, within a fraction of a second
whatever the command waits on: ``run`` holds ``clienterrors.interruptible()``, the
pre-flight and ``wait`` wait in slices and look for the recorded interrupt after
each, and a failure after Ctrl-C (a client that lost the KeyboardInterrupt in a
callback fails otherwise: ``SystemError``, ``_ALL_BROKERS_DOWN``) is the interruption.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import contextvars
import datetime
import json
import logging
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..cliargs import BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP, bootstrap_servers, default_bootstrap, timeout_seconds
from ..clientconfig import NO_SETTINGS, ClientSettings, SettingError, add_options, from_options
from ..clienterrors import SLICE_S, ClientLog, Unreachable, check_interrupt, interrupted, interruptible, preflight

log = logging.getLogger("onceflow.tools")

DEFAULT_TIMEOUT_S = 30.0
#: Exit status after Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130

__all__ = ["DEFAULT_BOOTSTRAP", "DEFAULT_TIMEOUT_S", "NoAnswer", "ToolError", "UsageError", "add_command", "add_family",
           "confluent_admin", "default_bootstrap", "error_line", "kafka_python_admin", "librdkafka_client", "missing_topic", "render", "run",
           "table", "to_json", "wait", "watermark_consumer"]

#: What a command returns: rows (one table), or a dict of scalars and row lists; None when it wrote its own output.
Data = list[dict[str, Any]] | dict[str, Any]


class ToolError(Exception):
    """A failure the command reports as one line on stderr (exit status 1)."""

    one_line = True


class UsageError(ToolError):
    """Options that cannot go together, found before anything is asked of the cluster (exit status 2)."""


class NoAnswer(ToolError):
    """The cluster did not answer ``what`` within the timeout; ``run`` names the address."""

    def __init__(self, what: str | None, timeout: float) -> None:
        super().__init__(f"{what + ': ' if what else ''}no answer within {timeout:g}s")
        self.what = what


# -- options and dispatch ------------------------------------------------------


def _add_common_options(parser: argparse.ArgumentParser, *, leaf: bool) -> None:
    # The options are accepted both after the family (``onceflow topics --json list``)
    # and after the command (``onceflow topics list --json``); on the command they
    # only override what was given earlier (default SUPPRESS).
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if leaf else value

    now = default_bootstrap(None)
    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT[,...]", type=bootstrap_servers,
                        default=default(default_bootstrap()),
                        help=f"the cluster: a broker to bootstrap from, or several comma-separated (default: "
                             f"${BOOTSTRAP_ENV} when set{f', now {now}' if now else ''}, else {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--json", action="store_true", default=default(False), help="print JSON instead of a table")
    parser.add_argument("--timeout", type=timeout_seconds, metavar="DURATION", default=default(DEFAULT_TIMEOUT_S),
                        help=f"how long to wait for the cluster: seconds (30, 2.5) or with a unit (500ms, 30s, 5m), at most 1h "
                             f"(default {DEFAULT_TIMEOUT_S:g}s)")
    add_options(parser, suppress=leaf, dest_suffix=_COMMAND if leaf else "")


#: The -X list given after the command (argparse would let it replace the one given after the family).
_COMMAND = "_command"


def add_family(parser: argparse.ArgumentParser) -> Any:
    """Fill in a command family's parser (``onceflow NAME ...``); returns its sub-command registry."""
    _add_common_options(parser, leaf=False)
    return parser.add_subparsers(dest="action", required=True, metavar="COMMAND")


def add_command(actions: Any, name: str, help_text: str, tool: Callable[[argparse.Namespace], Data | None],
                empty: str = "(none)") -> argparse.ArgumentParser:
    """A command: ``tool(args)`` returns its data, or None when it wrote its own output (a stream of
    records: ``topics consume``); ``empty`` is the table output for no rows."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help_text, description=help_text)
    _add_common_options(parser, leaf=True)
    parser.set_defaults(func=run, tool=tool, empty=empty)
    return parser


def key_value(text: str) -> tuple[str, str]:
    """argparse type for ``key=value``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected key=value, got {text!r}")
    return key.strip(), value


@dataclass
class _Run:
    """One command's run: where its clients log, its pre-flight, the clients (polled for their
    error callbacks before a failure is reported) and kafka-python's connection errors."""

    bootstrap: str
    timeout: float
    log: ClientLog
    #: The pre-flight (``clienterrors.preflight``): raises ``Unreachable`` naming the address and why.
    reach: Callable[[str], None]
    clients: list[Any] = field(default_factory=list)
    kafka_python_errors: list[str] = field(default_factory=list)
    reached: bool = False

    def preflight(self, bootstrap: str) -> None:
        """Once, before the first client the command makes for its cluster."""
        if not self.reached and bootstrap == self.bootstrap:
            self.reach(bootstrap)
            self.reached = True

    def poll(self) -> None:
        """Serve the clients' queued callbacks: librdkafka hands error_cb its errors only in poll()."""
        for client in self.clients:
            try:
                client.poll(0)
            except Exception:  # noqa: BLE001 - a closed consumer: it has nothing more to say
                continue

    def explain(self, line: str) -> str:
        """``line`` with the first connection error a client met, librdkafka's or kafka-python's."""
        explained = self.log.explain(line)
        if explained == line and self.kafka_python_errors:
            return f"{line} ({self.kafka_python_errors[0]})"
        return explained


class _KafkaPythonErrors(logging.Handler):
    """kafka-python reports a failed connection only in its log ("Connection failed: REASON"): keep
    the first reason, to explain a later timeout as librdkafka's error callback does."""

    def __init__(self, session: _Run) -> None:
        super().__init__(logging.ERROR)
        self.session = session

    def emit(self, record: logging.LogRecord) -> None:
        _, found, reason = record.getMessage().partition("Connection failed: ")
        if found and reason and not self.session.kafka_python_errors:
            self.session.kafka_python_errors.append(" ".join(reason.split()))


_RUN: contextvars.ContextVar[_Run | None] = contextvars.ContextVar("onceflow_tools_run", default=None)


def run(args: argparse.Namespace) -> int:
    """Run ``args.tool``, print its data (table or JSON); one stderr line and status 1 on failure."""
    debug = str(getattr(args, "log_level", "INFO")).upper() == "DEBUG"
    name = f"onceflow {args.command} {args.action}"
    try:
        args.client = from_options(args, ("", _COMMAND))
        if getattr(args, "kafka_python", False):
            args.client.kafka_python()  # the transaction tools' client: its words for the same settings
    except SettingError as exc:  # before any data moves, as a usage error
        print(f"{name}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    client_log = ClientLog(debug)
    settings = args.client

    def reach(bootstrap: str) -> None:
        config = {**settings.librdkafka(bootstrap), **client_log.settings()}
        preflight(bootstrap, args.timeout, config, client_log)

    session = _Run(args.bootstrap_servers, args.timeout, client_log, reach)
    started = time.monotonic()
    try:
        with interruptible():
            try:
                with _running(session, debug):
                    data = args.tool(args)
            except KeyboardInterrupt as exc:
                print(f"{name}: {str(exc) or 'interrupted'}", file=sys.stderr)
                return INTERRUPTED
            except UsageError as exc:
                print(f"{name}: {error_line(exc)}", file=sys.stderr)
                return 2
            except Exception as exc:  # every failure becomes one line
                if isinstance(exc, BrokenPipeError) and stdout_gone():
                    raise  # a command writing its own output into ``| head``: onceflow.cli ends it quietly
                if debug:
                    log.exception("%s failed", name)
                if interrupted():  # the client lost the KeyboardInterrupt, and failed otherwise
                    print(f"{name}: interrupted", file=sys.stderr)
                    return INTERRUPTED
                print(f"{name}: {_failure(exc, session, time.monotonic() - started)}", file=sys.stderr)
                return 1
    except KeyboardInterrupt:  # Ctrl-C just as the handler was put in or taken out
        print(f"{name}: interrupted", file=sys.stderr)
        return INTERRUPTED
    if data is not None:
        color = sys.stdout.isatty()
        sys.stdout.write(to_json(data) if args.json else render(data, empty=args.empty, color=color))
        sys.stdout.flush()
    return 0


@contextlib.contextmanager
def _running(session: _Run, debug: bool) -> Iterator[None]:
    """While the command runs: its clients find ``session``; kafka-python's log is kept, not printed
    (its connection errors explain a failure), unless ``debug``; after it, kafka-python's threads say nothing."""
    kafka_python_log = logging.getLogger("kafka")
    propagate = kafka_python_log.propagate
    capture = _KafkaPythonErrors(session)
    if not debug:
        kafka_python_log.setLevel(logging.ERROR)
        kafka_python_log.propagate = False
    kafka_python_log.addHandler(capture)
    token = _RUN.set(session)
    try:
        yield
    finally:
        _RUN.reset(token)
        kafka_python_log.removeHandler(capture)
        if not debug:
            kafka_python_log.setLevel(logging.CRITICAL)
            kafka_python_log.propagate = propagate


def stdout_gone() -> bool:
    """Whether standard output is a pipe whose reader went away (``| head``): Linux reports POLLERR
    for the writing end of a pipe without readers."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's capture): not a pipe
        return False


def error_line(exc: BaseException) -> str:
    """A one-line description of a client library's (or our) exception (``onceflow.clienterrors``)."""
    from ..clienterrors import error_line as line

    return line(exc)


def missing_topic(topic: str) -> ToolError:
    """The one wording of "no such topic", whichever command found it."""
    return ToolError(f"topic {topic!r}: UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist")


#: Errors that mean "no answer in time", whichever library met them: librdkafka's local timeout,
#: and kafka-python's timeouts (its bootstrap gives up with KafkaTimeoutError).
_TIMEOUT_NAMES = {"_TIMED_OUT", "REQUEST_TIMED_OUT", "KafkaTimeoutError", "RequestTimedOutError", "NoBrokersAvailable"}
_KAFKA_NAME = re.compile(r"(?:^|: )([A-Z_]+|[A-Za-z]+Error) \(code -?\d+\)")


def _failure(exc: BaseException, session: _Run, elapsed: float) -> str:
    """The one line for a failed command: ``error_line``, or "no answer" naming the address for a
    timeout, each followed by the client's first connection error when it reported one."""
    if isinstance(exc, Unreachable):
        return error_line(exc)
    session.poll()
    if _no_answer(exc, elapsed, session.timeout):
        what = exc.what if isinstance(exc, NoAnswer) else None
        line = f"no answer from {session.bootstrap} within {session.timeout:g}s"
        return session.explain(f"{what}: {line}" if what else line)
    return session.explain(error_line(exc))


def _no_answer(exc: BaseException, elapsed: float, timeout: float) -> bool:
    """Whether the failure is the cluster's silence: a timeout error anywhere in the exception's chain,
    or librdkafka's _TRANSPORT once the whole timeout went by (what its metadata call says when no
    broker answered in time)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (NoAnswer, concurrent.futures.TimeoutError, TimeoutError)):
            return True
        if type(current).__name__ in _TIMEOUT_NAMES and type(current).__module__.startswith("kafka"):
            return True
        names = set(_KAFKA_NAME.findall(error_line(current)))
        if names & _TIMEOUT_NAMES or ("_TRANSPORT" in names and elapsed >= 0.9 * timeout):
            return True
        current = current.__cause__ or current.__context__
    return False


# -- clients -------------------------------------------------------------------


def _librdkafka_settings(bootstrap: str, client: ClientSettings, client_log: ClientLog | None) -> dict[str, Any]:
    session = _RUN.get()
    if session is not None:
        session.preflight(bootstrap)
        client_log = client_log or session.log
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    # librdkafka logs connection failures to stderr itself; the tool reports the resulting
    # error as its one line instead (all of it with --log-level DEBUG).  With a ClientLog its
    # log lines and errors are kept there, the first connection error to explain a failure.
    captured = client_log.settings() if client_log is not None else {}
    if debug:  # its log lines as they come (a logger would hold them until the client is polled)
        captured.pop("logger", None)
    return client.librdkafka(bootstrap, **{"client.id": "onceflow-tools", "log_level": 7 if debug else 0, **captured})


def librdkafka_client(bootstrap: str, client: ClientSettings = NO_SETTINGS, **own: Any) -> tuple[dict[str, Any], ClientLog]:
    """The configuration of a librdkafka client a command makes itself (``topics produce``'s Producer,
    ``consume``'s Consumer): ``own`` settings under the user's, after the run's pre-flight, logging into
    the run's ``ClientLog``, which is returned too (its first connection error explains a failure).
    Outside a run (a library call): no pre-flight, a ClientLog of its own."""
    session = _RUN.get()
    client_log = session.log if session is not None else ClientLog(logging.getLogger().isEnabledFor(logging.DEBUG))
    return {**own, **_librdkafka_settings(bootstrap, client, client_log)}, client_log


def _track(client: Any) -> Any:
    session = _RUN.get()
    if session is not None:
        session.clients.append(client)
    return client


def confluent_admin(bootstrap: str, client: ClientSettings = NO_SETTINGS, *, client_log: ClientLog | None = None) -> Any:
    """confluent-kafka's AdminClient, with the user's client settings; its logs and errors go to
    ``client_log`` (default: the running command's)."""
    from confluent_kafka.admin import AdminClient

    return _track(AdminClient(_librdkafka_settings(bootstrap, client, client_log)))


def watermark_consumer(bootstrap: str, isolation_level: str = "read_uncommitted", client: ClientSettings = NO_SETTINGS,
                       *, client_log: ClientLog | None = None) -> Any:
    """A Consumer used only for ``get_watermark_offsets`` (it never subscribes or commits)."""
    from confluent_kafka import Consumer

    return _track(Consumer({
        **_librdkafka_settings(bootstrap, client, client_log),
        "group.id": f"onceflow-tools-{uuid.uuid4()}",  # required by the client; never joined
        "enable.auto.commit": False,
        "isolation.level": isolation_level,
    }))


def wait(future: Any, timeout: float, what: str) -> Any:
    """The result of a confluent-kafka admin future about ``what`` (e.g. "topic 'x'");
    its failure as a ToolError that names ``what`` (``NoAnswer`` when it timed out)."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout + 1  # the request's own timeout (request_timeout) comes first
    try:
        while True:  # in slices, Ctrl-C looked for between them
            try:
                return future.result(max(0.0, min(SLICE_S, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                check_interrupt()
                if time.monotonic() >= deadline:
                    raise
    except concurrent.futures.TimeoutError:
        raise NoAnswer(what, timeout) from None
    except KafkaException as exc:
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT:
            raise NoAnswer(what, timeout) from exc
        raise ToolError(f"{what}: {error_line(exc)}") from exc


def kafka_python_admin(bootstrap: str, timeout: float, client: ClientSettings = NO_SETTINGS) -> Any:
    """kafka-python's KafkaAdminClient (the only Python client with the KIP-664 APIs), with the user's
    client settings in kafka-python's words (``ClientSettings.kafka_python``)."""
    try:
        from kafka.admin import KafkaAdminClient
    except ImportError:
        raise ToolError("the transaction tools need kafka-python (pip install 'kafka-python>=3.0')") from None
    session = _RUN.get()
    if session is not None:
        session.preflight(bootstrap)
    timeout_ms = max(1, int(timeout * 1000))
    settings = {"client_id": "onceflow-tools", **client.kafka_python()}
    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=timeout_ms,
                                bootstrap_timeout_ms=timeout_ms, **settings)
    except Exception as exc:
        if _no_answer(exc, 0.0, timeout):
            raise NoAnswer(None, timeout) from exc
        raise ToolError(f"cannot connect to {bootstrap}: {error_line(exc)}") from exc


def iso_ms(ms: int | None) -> str | None:
    """Epoch milliseconds as an ISO-8601 UTC time; None for "none" (negative)."""
    if ms is None or ms < 0:
        return None
    when = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def partition_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


# -- rendering -----------------------------------------------------------------


def to_json(data: Data) -> str:
    return json.dumps(data, indent=2, default=str) + "\n"


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(cell(v) for v in value) or "-"
    if isinstance(value, Mapping):
        return ",".join(f"{k}={cell(v)}" for k, v in value.items()) or "-"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _print(renderables: list[Any], color: bool) -> str:
    """rich renderables as text: no wrapping or cutting at any width (a line is as long as its
    table), no markup or highlighting of values, colour only when asked (a terminal) and
    ``NO_COLOR`` is not set; trailing blanks dropped."""
    import io

    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=1_000_000, force_terminal=color, no_color=not color, color_system="standard" if color else None,
                      highlight=False, markup=False, emoji=False, soft_wrap=False, legacy_windows=False)
    for renderable in renderables:
        console.print(renderable)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def _table(rows: list[Mapping[str, Any]], color: bool) -> Any:
    from rich.table import Table
    from rich.text import Text

    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    numeric = [all(_is_number(row.get(c)) or row.get(c) is None for row in rows)
               and any(_is_number(row.get(c)) for row in rows) for c in columns]
    grid = Table(box=None, show_edge=False, pad_edge=False, padding=(0, 2, 0, 0), header_style="bold" if color else "")
    justify: list[Any] = ["right" if is_numeric else "left" for is_numeric in numeric]
    for column, side in zip(columns, justify, strict=True):
        grid.add_column(Text(column.upper().replace("_", "-"), justify=side), justify=side, no_wrap=True)
    for row in rows:  # Text, not str: a value is never read as markup ("[bold]") or emoji (":x:")
        grid.add_row(*(Text(cell(row.get(c)), justify=side) for c, side in zip(columns, justify, strict=True)))
    return grid


def table(rows: Iterable[Mapping[str, Any]], empty: str = "(none)", *, color: bool = False) -> str:
    """Rows as a table in rpk's style: no borders, upper-case headers, numeric columns right-aligned."""
    rows = list(rows)
    if not rows:
        return empty + "\n"
    return _print([_table(rows, color)], color)


def render(data: Data, empty: str = "(none)", *, color: bool = False) -> str:
    """A list of rows as a table; a dict as ``Key: value`` lines followed by a titled table per row list."""
    if isinstance(data, list):
        return table(data, empty, color=color)
    from rich.table import Table
    from rich.text import Text

    scalars = {k: v for k, v in data.items() if not _is_rows(v)}
    sections = {k: v for k, v in data.items() if _is_rows(v)}
    parts: list[Any] = []
    if scalars:
        pairs = Table.grid(padding=(0, 1, 0, 0))
        pairs.add_column(no_wrap=True)
        pairs.add_column(no_wrap=True)
        for key, value in scalars.items():
            pairs.add_row(Text(key.replace("_", " ").capitalize() + ":"), Text(cell(value)))
        parts.append(pairs)
    for key, rows in sections.items():
        if parts:
            parts.append(Text(""))
        parts.append(Text(key.replace("_", " ").capitalize() + ":", style="bold" if color else ""))
        parts.append(_table(rows, color))
    return _print(parts, color)


def _is_rows(value: Any) -> bool:
    # An empty list renders as a scalar ("-"): it has no columns to show.
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)
