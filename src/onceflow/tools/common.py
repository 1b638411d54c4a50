"""What the tool families share: options, client construction, error lines, rendering.

Client libraries only (see :mod:`onceflow.tools`): confluent-kafka for topics,
groups, ACLs and users, kafka-python for the KIP-664 transaction APIs.
kafka-python is imported lazily so that the rest of ``onceflow`` does not need it.

Every command takes ``-X key=value`` and ``--command-config FILE``
(:mod:`onceflow.clientconfig`): ``run`` translates and checks them before the
command runs, a bad one being one line and exit status 2, and every client a
command makes is given them (``confluent_admin``, ``watermark_consumer``,
``kafka_python_admin``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..clientconfig import NO_SETTINGS, ClientSettings, SettingError, add_options, from_options

log = logging.getLogger("onceflow.tools")

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
DEFAULT_TIMEOUT_S = 30.0

#: What a command returns: rows (one table), or a dict of scalars and row lists.
Data = list[dict[str, Any]] | dict[str, Any]


class ToolError(Exception):
    """A failure the command reports as one line on stderr (exit status 1)."""

    one_line = True


class UsageError(ToolError):
    """Options that cannot go together, found before anything is asked of the cluster (exit status 2)."""


# -- options and dispatch ------------------------------------------------------


def _add_common_options(parser: argparse.ArgumentParser, *, leaf: bool) -> None:
    # The options are accepted both after the family (``onceflow topics --json list``)
    # and after the command (``onceflow topics list --json``); on the command they
    # only override what was given earlier (default SUPPRESS).
    def default(value: Any) -> Any:
        return argparse.SUPPRESS if leaf else value

    parser.add_argument("--bootstrap-servers", metavar="HOST:PORT", default=default(DEFAULT_BOOTSTRAP),
                        help=f"a broker to bootstrap from, or several comma-separated (default {DEFAULT_BOOTSTRAP})")
    parser.add_argument("--json", action="store_true", default=default(False), help="print JSON instead of a table")
    parser.add_argument("--timeout", type=float, metavar="SECONDS", default=default(DEFAULT_TIMEOUT_S),
                        help=f"how long to wait for the cluster (default {DEFAULT_TIMEOUT_S:g})")
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


def run(args: argparse.Namespace) -> int:
    """Run ``args.tool``, print its data (table or JSON); one stderr line and status 1 on failure."""
    debug = str(getattr(args, "log_level", "INFO")).upper() == "DEBUG"
    if not debug:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)  # kafka-python's own connection chatter
    name = f"onceflow {args.command} {args.action}"
    try:
        args.client = from_options(args, ("", _COMMAND))
        if getattr(args, "kafka_python", False):
            args.client.kafka_python()  # the transaction tools' client: its words for the same settings
    except SettingError as exc:  # before any data moves, as a usage error
        print(f"{name}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    try:
        data = args.tool(args)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except UsageError as exc:
        print(f"{name}: {error_line(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # every failure becomes one line
        if debug:
            log.exception("%s failed", name)
        print(f"{name}: {error_line(exc)}", file=sys.stderr)
        return 1
    if data is not None:
        sys.stdout.write(to_json(data) if args.json else render(data, empty=args.empty))
        sys.stdout.flush()
    return 0


def error_line(exc: BaseException) -> str:
    """A one-line description of a client library's (or our) exception (``onceflow.clienterrors``)."""
    from ..clienterrors import error_line as line

    return line(exc)


def missing_topic(topic: str) -> ToolError:
    """The one wording of "no such topic", whichever command found it."""
    return ToolError(f"topic {topic!r}: UNKNOWN_TOPIC_OR_PARTITION (code 3): the topic does not exist")


# -- clients -------------------------------------------------------------------


def _librdkafka_settings(bootstrap: str, client: ClientSettings) -> dict[str, Any]:
    debug = logging.getLogger().isEnabledFor(logging.DEBUG)
    # librdkafka logs connection failures to stderr itself; the tool reports the
    # resulting error as its one line instead (all of it with --log-level DEBUG).
    return client.librdkafka(bootstrap, **{"client.id": "onceflow-tools", "log_level": 7 if debug else 0})


def confluent_admin(bootstrap: str, client: ClientSettings = NO_SETTINGS) -> Any:
    """confluent-kafka's AdminClient, with the user's client settings."""
    from confluent_kafka.admin import AdminClient

    return AdminClient(_librdkafka_settings(bootstrap, client))


def watermark_consumer(bootstrap: str, isolation_level: str = "read_uncommitted", client: ClientSettings = NO_SETTINGS) -> Any:
    """A Consumer used only for ``get_watermark_offsets`` (it never subscribes or commits)."""
    from confluent_kafka import Consumer

    return Consumer({
        **_librdkafka_settings(bootstrap, client),
        "group.id": f"onceflow-tools-{uuid.uuid4()}",  # required by the client; never joined
        "enable.auto.commit": False,
        "isolation.level": isolation_level,
    })


def wait(future: Any, timeout: float, what: str) -> Any:
    """The result of a confluent-kafka admin future about ``what`` (e.g. "topic 'x'");
    its failure as a ToolError that names ``what``."""
    from confluent_kafka import KafkaException

    try:
        return future.result(timeout + 5)
    except concurrent.futures.TimeoutError:
        raise ToolError(f"{what}: no answer after {timeout:g}s") from None
    except KafkaException as exc:
        raise ToolError(f"{what}: {error_line(exc)}") from exc


def kafka_python_admin(bootstrap: str, timeout: float, client: ClientSettings = NO_SETTINGS) -> Any:
    """kafka-python's KafkaAdminClient (the only Python client with the KIP-664 APIs), with the user's
    client settings in kafka-python's words (``ClientSettings.kafka_python``)."""
    try:
        from kafka.admin import KafkaAdminClient
    except ImportError:
        raise ToolError("the transaction tools need kafka-python (pip install 'kafka-python>=3.0')") from None
    timeout_ms = max(1, int(timeout * 1000))
    settings = {"client_id": "onceflow-tools", **client.kafka_python()}
    try:
        return KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=timeout_ms,
                                bootstrap_timeout_ms=timeout_ms, **settings)
    except Exception as exc:
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


def table(rows: Iterable[Mapping[str, Any]], empty: str = "(none)") -> str:
    """Rows as an aligned table under upper-case headers; numeric columns right-aligned."""
    rows = list(rows)
    if not rows:
        return empty + "\n"
    columns: list[str] = []
    for row in rows:
        columns += [c for c in row if c not in columns]
    headers = [c.upper().replace("_", "-") for c in columns]
    cells = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(headers)]
    numeric = [all(_is_number(row.get(c)) or row.get(c) is None for row in rows)
               and any(_is_number(row.get(c)) for row in rows) for c in columns]

    def line(values: list[str]) -> str:
        parts = [v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric, strict=True)]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)]) + "\n"


def render(data: Data, empty: str = "(none)") -> str:
    """A list of rows as a table; a dict as ``Key: value`` lines followed by a titled table per row list."""
    if isinstance(data, list):
        return table(data, empty)
    scalars = {k: v for k, v in data.items() if not _is_rows(v)}
    sections = {k: v for k, v in data.items() if _is_rows(v)}
    out = []
    if scalars:
        labels = {k: k.replace("_", " ").capitalize() + ":" for k in scalars}
        width = max(len(label) for label in labels.values())
        out += [f"{labels[k].ljust(width)} {cell(v)}".rstrip() for k, v in scalars.items()]
    for key, rows in sections.items():
        title = key.replace("_", " ").capitalize()
        out.append("")
        out.append(f"{title}:")
        out.append(table(rows, "  (none)").rstrip("\n"))
    text = "\n".join(out).lstrip("\n")
    return text + "\n"


def _is_rows(value: Any) -> bool:
    # An empty list renders as a scalar ("-"): it has no columns to show.
    return isinstance(value, list) and bool(value) and all(isinstance(v, Mapping) for v in value)
