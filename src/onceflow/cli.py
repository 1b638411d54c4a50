# PYTHON_ARGCOMPLETE_OK
"""The ``onceflow`` command.

    onceflow [--log-level L] [--log-format text|json] broker [--data-dir DIR] [--listen HOST:PORT]
             [--config server.properties] [-o key=value ...] [--metrics-port PORT]
    onceflow demo [payments|broker-crash] [--payments N] [--no-faults] [--keep] [--bootstrap-servers HOST:PORT]
                  [-X key=value ...] [--command-config FILE]
    onceflow bench produce|consume [...]
    onceflow chaos [--seconds S] [--kills N] [--pauses N] [--resets N] [--crash-rolls N] [...]
    onceflow topics list|describe|create|delete|delete-records [...]
    onceflow groups list|describe [...]
    onceflow txn list|describe|producers|find-hanging|abort [...]
    onceflow acls list|add|remove [...]
    onceflow users list|add|remove [...]

Every family that reaches a cluster takes ``-X key=value`` (repeatable) and
``--command-config FILE`` for the clients it makes (:mod:`onceflow.clientconfig`).

The operator commands (``topics``, ``groups``, ``txn``, ``acls``, ``users``) live in
:mod:`onceflow.tools`; they use only real Kafka client libraries, so they work
against an Apache Kafka cluster too.

Theory of operation
-------------------
Start-up is kept cheap (``onceflow --version`` and ``onceflow topics --help`` import no
client library, rich, Spark or asyncio): a family's options are defined, and its modules
imported, only when it is the family that runs (``_Families``).  Shell completion
(argcomplete, imported only when the shell asks, ``_ARGCOMPLETE`` set) fills every family
first, so that sub-commands and options complete as well as family names.

Every parser is a ``cliargs.OnceflowParser``: a usage error is one line,
``onceflow FAMILY COMMAND: message (see ... --help)``, exit status 2.  ``--log-level`` and
``--log-format`` are accepted before the family, after it and after the command (the last
one given wins).  Whatever a family's code raises is one line too (issue 24):
``onceflow FAMILY: message``, exit status 1, its traceback logged only with
``--log-level DEBUG``; Ctrl-C is ``interrupted``, exit status 130; a closed pipe
(``onceflow topics list | head -1``) ends it quietly, exit status 141 as a shell's SIGPIPE.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from . import __version__
from .cliargs import OnceflowParser, bootstrap_servers, host_port, log_level, port

log = logging.getLogger("onceflow")


def _setup_logging(level: str, log_format: str = "text") -> None:
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        from .logformat import JsonFormatter

        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), handlers=[handler])


def cmd_broker(args: argparse.Namespace) -> int:
    import asyncio

    from .broker.broker import Broker, tune_process_allocator, tune_process_gc
    from .config import BrokerConfig, ConfigError

    overrides = list(args.override)
    if args.metrics_port is not None:
        overrides.append(f"metrics.port={args.metrics_port}")
    try:
        config = BrokerConfig.load(args.config, overrides)
    except (ConfigError, OSError) as exc:
        print(f"onceflow broker: {exc}", file=sys.stderr)
        return 2
    host, port = args.listen
    if args.add_scram:
        from .security.credentials import add_users, parse_add_scram

        try:
            add_users(args.data_dir, [parse_add_scram(spec) for spec in args.add_scram])
        except ValueError as exc:
            print(f"onceflow broker: {exc}", file=sys.stderr)
            return 2
    tune_process_allocator()

    async def run() -> None:
        broker = Broker(config, args.data_dir, host, port)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await broker.start()
        tune_process_gc()
        print(f"onceflow broker ready on {broker.host}:{broker.port}", flush=True)
        if broker.metrics is not None:
            print(f"metrics and console on http://{broker.metrics.host}:{broker.metrics.port}/", flush=True)
        await stop.wait()
        log.info("shutting down")
        await broker.stop()

    try:
        asyncio.run(run())
    except OSError as exc:  # the port taken, the data directory unreadable, no space left for recovery
        hint = f"; free space under {args.data_dir} and start it again" if exc.errno == errno.ENOSPC else ""
        log.error("onceflow broker cannot run: %s%s", exc, hint)
        log.debug("where it failed", exc_info=exc)
        return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .clientconfig import SettingError, from_options

    try:
        args.client = from_options(args)
    except SettingError as exc:
        print(f"onceflow demo: {exc}", file=sys.stderr)
        return 2
    if args.client and args.bootstrap_servers is None:
        print("onceflow demo: -X and --command-config are for a cluster named by --bootstrap-servers "
              "(the broker the demo starts needs none)", file=sys.stderr)
        return 2
    if args.example == "broker-crash":
        from .demos.broker_crash import run_demo

        return run_demo(args.bootstrap_servers, args.client, args)  # with --timeout, --keep, --log-level
    if (refusal := missing_extra("onceflow demo")) is not None:
        print(refusal, file=sys.stderr)
        return 2
    from .demos.payments import run

    return run(args)


def cmd_bench(args: argparse.Namespace) -> int:
    if args.workload in {"pipeline", "source"} and (refusal := missing_extra(f"onceflow bench {args.workload}")) is not None:
        print(refusal, file=sys.stderr)
        return 2
    from .bench import run_bench

    return run_bench(args)


def cmd_chaos(args: argparse.Namespace) -> int:
    from .chaos.command import main as chaos_main

    return chaos_main(args)


def missing_extra(command: str, also: Sequence[str] = ()) -> str | None:
    """One line saying what ``command`` lacks of the ``spark`` extra, or None when it is all installed."""
    from .spark import missing_modules

    missing = missing_modules(also)
    if not missing:
        return None
    return f"{command}: needs {', '.join(missing)} (the spark extra): pip install 'onceflow[spark]'"


LOG_FORMATS = ("text", "json")


def _log_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """``--log-level`` and ``--log-format``: with defaults on the top parser, and on every family and
    command parser without (argparse.SUPPRESS), so that they are accepted anywhere and the last one
    given wins."""
    if "--log-level" in parser._option_string_actions:
        return
    level = parser.add_argument("--log-level", type=log_level, default="INFO" if top else argparse.SUPPRESS, metavar="LEVEL",
                                help="DEBUG, INFO, WARNING or ERROR (default INFO); DEBUG also logs a failure's traceback "
                                     "and the client libraries' own log lines")
    setattr(level, "completer", _complete_levels)  # noqa: B010 - argcomplete's attribute, not argparse's
    parser.add_argument("--log-format", choices=LOG_FORMATS, default="text" if top else argparse.SUPPRESS,
                        help="text (default) or json: one JSON object per line, with fields such as transactional_id")


def _complete_levels(**_: Any) -> list[str]:
    return ["DEBUG", "INFO", "WARNING", "ERROR"]


def _parsers_below(parser: argparse.ArgumentParser) -> Iterable[argparse.ArgumentParser]:
    """``parser`` and every sub-command parser under it."""
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action._name_parser_map.values()):  # aliases map to the same parser
                yield from _parsers_below(sub)


class _Families(argparse._SubParsersAction):  # type: ignore[type-arg]
    """``onceflow``'s command families, each filled in (its options defined, its modules imported)
    only when it is the one that runs.  ``onceflow --version`` and ``onceflow broker`` import no
    Spark, pyarrow or benchmark code, so a base install (no extras) runs them, and quickly."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fillers: dict[str, Callable[[argparse.ArgumentParser], None]] = {}

    def add_family(self, name: str, help_text: str, fill: Callable[[argparse.ArgumentParser], None],
                   description: str | None = None) -> None:
        self.add_parser(name, help=help_text, description=description or help_text)
        self._fillers[name] = fill

    def fill(self, name: str) -> argparse.ArgumentParser:
        """The family's parser, its options defined (once), ``--log-level`` and ``--log-format`` on it
        and on each of its commands."""
        parser: argparse.ArgumentParser = self._name_parser_map[name]
        if (fill := self._fillers.pop(name, None)) is not None:
            fill(parser)
            for below in _parsers_below(parser):
                _log_options(below, top=False)
        return parser

    def fill_all(self) -> None:
        """Every family filled (shell completion walks them all).  A family whose modules cannot be
        imported here (an extra not installed) completes without its options."""
        for name in list(self._fillers):
            try:
                self.fill(name)
            except ImportError:
                continue

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        if values and values[0] in self._name_parser_map:
            self.fill(values[0])
        super().__call__(parser, namespace, values, option_string)


def _broker_options(b: argparse.ArgumentParser) -> None:
    b.add_argument("--data-dir", default="./.onceflow/data", metavar="DIR",
                   help="where logs and metadata live (default ./.onceflow/data)")
    b.add_argument("--listen", type=host_port, default=("127.0.0.1", 9092), metavar="HOST:PORT",
                   help="the address to serve (default 127.0.0.1:9092; port 0: any free port); also advertised, unless "
                        "advertised.listeners says otherwise")
    b.add_argument("--config", metavar="FILE", help="a Kafka server.properties file")
    b.add_argument("-o", dest="override", action="append", default=[], metavar="KEY=VALUE",
                   help="a broker setting (Kafka's names), over --config; repeatable")
    b.add_argument("--add-scram", action="append", default=[], metavar="SPEC",
                   help="store a SCRAM user before starting, as kafka-storage format --add-scram: "
                        "'SCRAM-SHA-256=[name=alice,password=alice-secret]' (repeatable; the first users of a "
                        "cluster every listener of which needs SASL; a user who has a credential for the "
                        "mechanism keeps it)")
    b.add_argument("--metrics-port", type=port, default=None, metavar="PORT",
                   help="serve Prometheus metrics at /metrics and the console at / on this port (metrics.port; 0: any free port)")
    b.set_defaults(func=cmd_broker)


def _demo_options(d: argparse.ArgumentParser) -> None:
    from .demos.payments import add_arguments

    d.add_argument("example", nargs="?", default="payments", choices=["payments", "broker-crash"],
                   help="payments (default): two chained exactly-once Spark queries; broker-crash: a consumer "
                        "group across a broker killed with SIGKILL")
    d.add_argument("--bootstrap-servers", type=bootstrap_servers, metavar="HOST:PORT[,...]",
                   help="use this Kafka cluster instead of starting `onceflow broker`")
    add_arguments(d)
    from .clientconfig import add_options

    add_options(d)
    d.set_defaults(func=cmd_demo)


def _bench_options(parser: argparse.ArgumentParser) -> None:
    from .bench import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=cmd_bench)


def _chaos_options(parser: argparse.ArgumentParser) -> None:
    from .chaos.command import add_arguments

    add_arguments(parser)
    parser.set_defaults(func=cmd_chaos)


def _tool_options(module: str) -> Callable[[argparse.ArgumentParser], None]:
    def fill(parser: argparse.ArgumentParser) -> None:
        importlib.import_module(f"onceflow.tools.{module}").fill(parser)

    return fill


#: Each family: its name, its one-line help, and what defines its options (run only when it is chosen).
FAMILIES: list[tuple[str, str, Callable[[argparse.ArgumentParser], None]]] = [
    ("broker", "run the broker", _broker_options),
    ("demo", "the payments pipeline on Spark, exactly-once under faults, verified", _demo_options),
    ("bench", "throughput benchmarks (confluent-kafka as the load generator)", _bench_options),
    ("chaos", "a workload under faults (kills, pauses, resets, crash points, full disk), "
              "its history checked for lost, duplicated, aborted and torn data", _chaos_options),
    ("topics", "list, describe, create and delete topics, delete records (confluent-kafka AdminClient)",
     _tool_options("topics")),
    ("groups", "list and describe consumer groups (confluent-kafka AdminClient)", _tool_options("groups")),
    ("txn", "inspect transactions and abort hanging ones (KIP-664, kafka-python admin client)", _tool_options("txn")),
    ("acls", "list, add and remove ACLs (confluent-kafka AdminClient)", _tool_options("acls")),
    ("users", "list, add and remove SASL/SCRAM users (confluent-kafka AdminClient)", _tool_options("users")),
    ("cluster", "cluster id, controller, brokers and their API versions (confluent-kafka, kafka-python)", _tool_options("cluster")),
]

#: A family's ``--help`` text where its one line is not enough.
DESCRIPTIONS = {
    "broker": "Run an Onceflow broker: a single-node, Kafka-wire-compatible broker with transactions "
              "(exactly-once), consumer groups (classic and KIP-848), ACLs and SASL/TLS listeners. It "
              "serves until SIGTERM or Ctrl-C, then shuts down cleanly; its data under --data-dir survives "
              "a restart, a crash too. Settings are Kafka's names: a server.properties file (--config) and "
              "-o KEY=VALUE over it.",
    "demo": "Show exactly-once end to end. payments (the default): two chained exactly-once Spark queries "
            "over Onceflow, with a task failure, a Spark driver SIGKILL and a broker SIGKILL injected, then "
            "every total verified (needs the spark extra: pip install 'onceflow[spark]'). broker-crash: "
            "orders produced idempotently and read by a consumer group while the broker is SIGKILLed and "
            "restarted, then checked for exactly-once delivery. Each starts its own broker unless "
            "--bootstrap-servers names a cluster.",
}


def build_parser() -> argparse.ArgumentParser:
    parser = OnceflowParser(prog="onceflow", description="Exactly-once streaming: a Kafka-compatible broker and tools.")
    parser.add_argument("--version", action="version", version=f"onceflow {__version__}")
    _log_options(parser, top=True)
    families = parser.add_subparsers(dest="command", required=True, action=_Families, metavar="FAMILY")
    assert isinstance(families, _Families)
    for name, help_text, fill in FAMILIES:
        families.add_family(name, help_text, fill, DESCRIPTIONS.get(name))
    return parser


def _families(parser: argparse.ArgumentParser) -> _Families:
    return next(a for a in parser._actions if isinstance(a, _Families))


def _complete(parser: argparse.ArgumentParser) -> None:
    """Answer the shell's completion request and exit (argcomplete's protocol: ``_ARGCOMPLETE``,
    ``COMP_LINE``, ``COMP_POINT``); with every family filled, so that sub-commands and options complete."""
    import argcomplete

    _families(parser).fill_all()
    argcomplete.autocomplete(parser)


def _error_line(exc: BaseException) -> str:
    try:
        from .clienterrors import error_line
    except ImportError:  # the client library itself is what failed to import
        return " ".join(f"{type(exc).__name__}: {exc}".split())
    return error_line(exc)


def _stdout_closed() -> bool:
    """Whether standard output's reader went away (``| head``); if so, what is left to write goes nowhere
    (the interpreter flushes stdout again at exit)."""
    from .tools.common import stdout_gone

    if not stdout_gone():
        return False
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return True


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``onceflow`` command; its exit status (0 done, 1 failed, 2 usage, 130 interrupted)."""
    name = "onceflow"
    try:
        parser = build_parser()
        if "_ARGCOMPLETE" in os.environ:
            _complete(parser)
        args, extra = parser.parse_known_args(argv)
        if extra:  # argparse leaves them to the top parser: blame the command that was given them
            _leaf(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
        name = " ".join(["onceflow", args.command, *([args.action] if isinstance(getattr(args, "action", None), str) else [])])
        _setup_logging(args.log_level, args.log_format)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError as exc:
        if _stdout_closed():
            return 128 + signal.SIGPIPE
        return _failed(name, exc)
    except Exception as exc:  # noqa: BLE001 - a failure the family did not turn into a line: one line still
        return _failed(name, exc)


def _leaf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The parser of the command ``args`` ran (``onceflow topics list``), for its usage errors."""
    for key in ("command", "action"):
        chosen = getattr(args, key, None)
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not isinstance(chosen, str) or not subs or chosen not in subs[0].choices:
            break
        parser = subs[0].choices[chosen]
    return parser


def _failed(name: str, exc: Exception) -> int:
    log.debug("%s failed", name, exc_info=exc)
    print(f"{name}: {_error_line(exc)}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    raise SystemExit(main())
