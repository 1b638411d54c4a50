"""The ``onceflow`` command.

    onceflow broker [--data-dir DIR] [--listen HOST:PORT] [--config server.properties] [-o key=value ...]
    onceflow demo [payments|broker-crash] [--payments N] [--no-faults] [--keep] [--bootstrap-servers HOST:PORT]
    onceflow bench produce|consume [...]
    onceflow chaos [--seconds S] [--kills N] [--pauses N] [--resets N] [--crash-rolls N] [...]
    onceflow topics list|describe|create|delete [...]
    onceflow groups list|describe [...]
    onceflow txn list|describe|producers|find-hanging|abort [...]

The operator commands (``topics``, ``groups``, ``txn``) live in
:mod:`onceflow.tools`; they use only real Kafka client libraries, so they work
against an Apache Kafka cluster too.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import signal
import sys
from collections.abc import Sequence

from . import __version__
from .config import BrokerConfig, ConfigError

log = logging.getLogger("onceflow")


def _listen_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def cmd_broker(args: argparse.Namespace) -> int:
    from .broker.broker import Broker, tune_process_allocator, tune_process_gc

    try:
        config = BrokerConfig.load(args.config, args.override)
    except (ConfigError, OSError) as exc:
        print(f"onceflow broker: {exc}", file=sys.stderr)
        return 2
    host, port = args.listen
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
    if args.example == "broker-crash":
        from .demos.broker_crash import run_demo

        return run_demo(args.bootstrap_servers)
    from .demos.payments import run

    return run(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from .bench import run_bench

    return run_bench(args)


def cmd_chaos(args: argparse.Namespace) -> int:
    from .chaos.command import main as chaos_main

    return chaos_main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="onceflow", description="Exactly-once streaming: a Kafka-compatible broker and tools.")
    parser.add_argument("--version", action="version", version=f"onceflow {__version__}")
    parser.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (default INFO)")
    sub = parser.add_subparsers(dest="command", required=True)

    b = sub.add_parser("broker", help="run the broker")
    b.add_argument("--data-dir", default="./.onceflow/data", help="where logs and metadata live (default ./.onceflow/data)")
    b.add_argument("--listen", type=_listen_address, default=("127.0.0.1", 9092),
                   help="HOST:PORT to serve (default 127.0.0.1:9092); also advertised, unless advertised.listeners says otherwise")
    b.add_argument("--config", help="a Kafka server.properties file")
    b.add_argument("-o", dest="override", action="append", default=[], metavar="KEY=VALUE", help="a broker setting (Kafka's names), repeatable")
    b.set_defaults(func=cmd_broker)

    d = sub.add_parser("demo", help="the payments pipeline on Spark, exactly-once under faults, verified")
    d.add_argument("example", nargs="?", default="payments", choices=["payments", "broker-crash"],
                   help="payments (default): two chained exactly-once Spark queries; broker-crash: a consumer "
                        "group across a broker killed with SIGKILL")
    d.add_argument("--bootstrap-servers", help="use this Kafka cluster instead of starting `onceflow broker`")
    from .demos.payments import add_arguments as add_demo_arguments

    add_demo_arguments(d)
    d.set_defaults(func=cmd_demo)

    from .bench import add_arguments

    add_arguments(sub.add_parser("bench", help="throughput benchmarks (confluent-kafka as the load generator)"))

    from .chaos.command import add_arguments as add_chaos_arguments

    c = sub.add_parser("chaos", help="a workload under faults (kills, pauses, resets, crash points, full disk), "
                                     "its history checked for lost, duplicated, aborted and torn data")
    add_chaos_arguments(c)
    c.set_defaults(func=cmd_chaos)

    from .tools import register

    register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _setup_logging(args.log_level)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
