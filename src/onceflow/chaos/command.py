"""The ``onceflow chaos`` command line: its options, checked, then a campaign (``campaign.run``).

Kept apart from the campaign so that building the ``onceflow`` parser imports no client library.
Every count and duration is checked by the parser (``cliargs``: a usage error, exit status 2,
before anything starts); the campaign runs in a ``longcommand.Session`` (one-line failures, exit
status 1; Ctrl-C ``interrupted``, 130; the clients' logs kept; what it created on a cluster named
by ``--bootstrap-servers`` deleted at the end unless ``--keep``).  A temporary work directory is
removed when the run passes or does not finish, and kept (and named) when it fails its checks.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from ..cliargs import bootstrap_servers, non_negative_int, positive_int, positive_seconds
from ..clientconfig import SettingError, add_options, from_options
from ..longcommand import Session
from ..longcommand import add_options as add_session_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=positive_seconds, default=120.0,
                        help="how long the workload runs under faults (default 120; 90s, 5m also work)")
    parser.add_argument("--kills", type=non_negative_int, default=None,
                        help="broker SIGKILLs, each followed by a restart (default 10; 0 with --bootstrap-servers)")
    parser.add_argument("--pauses", type=non_negative_int, default=0,
                        help="broker SIGSTOP pauses of --pause-seconds (default 0)")
    parser.add_argument("--pause-seconds", type=positive_seconds, default=12.0,
                        help="length of a pause (default 12: longer than the transaction timeout, 10 s)")
    parser.add_argument("--resets", type=non_negative_int, default=0,
                        help="resets of every client connection, through a TCP proxy (default 0)")
    parser.add_argument("--crash-rolls", type=non_negative_int, default=0, help="crashes inside a segment roll (default 0)")
    parser.add_argument("--crash-compactions", type=non_negative_int, default=0,
                        help="crashes inside the cleaner's segment swap (default 0)")
    parser.add_argument("--disk-fulls", type=non_negative_int, default=0, help="full-disk episodes (needs --disk-mib; default 0)")
    parser.add_argument("--disk-mib", type=positive_int, default=None,
                        help="put the data directory on a tmpfs this big (root); leave room: every partition being "
                             "written holds up to 4 MiB preallocated, and a broker cannot start on a disk its own data "
                             "filled (128 is enough for a 100 s run; default: no tmpfs)")
    parser.add_argument("--seed", type=non_negative_int, default=1, help="seeds the workload and the fault schedule (default 1)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the history, report and broker data go, kept (default: a temporary directory, "
                             "removed when the run passes or is interrupted)")
    parser.add_argument("--broker", default="onceflow", choices=["onceflow", "kafka"],
                        help="the broker the campaign starts: onceflow (default), or Apache Kafka (the reference; kills "
                             "and pauses)")
    parser.add_argument("--bootstrap-servers", type=bootstrap_servers, default=None, metavar="HOST:PORT",
                        help="run the workload and the checker against this cluster instead, without faults; its topics "
                             "are deleted at the end unless --keep")
    parser.add_argument("--producers", type=positive_int, default=3, help="transactional producers (default 3)")
    parser.add_argument("--partitions", type=positive_int, default=3, help="partitions per topic (default 3)")
    parser.add_argument("--ctp-group", default="assign", choices=["assign", "classic", "consumer"],
                        help="how the consume-transform-produce copiers get their partitions: assign (one copier, every "
                             "partition; default), or two copiers subscribed as members of a classic or a KIP-848 "
                             "consumer-protocol group")
    parser.add_argument("--json", action="store_true", help="print the report as JSON (default: a summary)")
    add_session_options(parser, "keep the work directory even when the run passes, and with --bootstrap-servers the "
                                "topics and the copiers' group the workload created (by default they are deleted at "
                                "the end, after a failure or Ctrl-C too)")
    add_options(parser)


def main(args: argparse.Namespace) -> int:
    kills = args.kills if args.kills is not None else (0 if args.bootstrap_servers else 10)
    faults = {"kill": kills, "pause": args.pauses, "reset": args.resets, "crash-roll": args.crash_rolls,
              "crash-compaction": args.crash_compactions, "disk-full": args.disk_fulls}
    problem = None
    if args.disk_fulls and not args.disk_mib:
        problem = "--disk-fulls needs --disk-mib (the data directory on a small tmpfs)"
    if args.bootstrap_servers and any(faults.values()):
        problem = problem or "faults need a broker the campaign starts itself; leave out --bootstrap-servers"
    if problem:
        print(f"onceflow chaos: {problem}", file=sys.stderr)
        return 2
    try:
        client = from_options(args)
    except SettingError as exc:
        print(f"onceflow chaos: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return Session("onceflow chaos", args, client).run(lambda session: _campaign(args, session, faults))


def _campaign(args: argparse.Namespace, session: Session, faults: dict[str, int]) -> int:
    from .campaign import Options, Outcome, run
    from .workload import Plan

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="onceflow-chaos-"))
    ended: list[Outcome] = []

    def kept() -> bool:
        """A temporary work directory goes, unless --keep or the run failed its checks."""
        return args.workdir is not None or args.keep or (bool(ended) and not ended[0].passed)

    def tidy() -> None:
        if not kept():
            shutil.rmtree(workdir, ignore_errors=True)
        elif args.workdir is None and not ended:  # --keep, and no summary said where
            session.say(f"onceflow chaos: the work directory is {workdir}")

    session.at_end(tidy)
    options = Options(seconds=args.seconds, faults={k: v for k, v in faults.items() if v}, seed=args.seed,
                      workdir=workdir, bootstrap_servers=args.bootstrap_servers, broker=args.broker,
                      disk_mib=args.disk_mib, client=session.client,
                      pause_s=args.pause_seconds, plan=Plan(producers=args.producers, partitions=args.partitions,
                                ctp_group_protocol=None if args.ctp_group == "assign" else args.ctp_group))
    outcome = run(options, session)
    ended.append(outcome)
    session.clear()
    if args.json:
        print(json.dumps({**outcome.report.to_json(), "faults": outcome.faults, "errors": outcome.errors}, indent=1))
    else:
        print(outcome.summary(kept()))
    return 0 if outcome.passed else 1
