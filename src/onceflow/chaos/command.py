"""The ``onceflow chaos`` command line: its options, checked, then a campaign (``campaign.run``).

Kept apart from the campaign so that building the ``onceflow`` parser imports no client library.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from ..clientconfig import SettingError, add_options, from_options


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=120.0, help="how long the workload runs under faults (default 120)")
    parser.add_argument("--kills", type=int, default=None,
                        help="broker SIGKILLs, each followed by a restart (default 10; 0 with --bootstrap-servers)")
    parser.add_argument("--pauses", type=int, default=0, help="broker SIGSTOP pauses of --pause-seconds (default 0)")
    parser.add_argument("--pause-seconds", type=float, default=12.0,
                        help="length of a pause; longer than the transaction timeout (10 s) by default")
    parser.add_argument("--resets", type=int, default=0, help="resets of every client connection, through a TCP proxy")
    parser.add_argument("--crash-rolls", type=int, default=0, help="crashes inside a segment roll")
    parser.add_argument("--crash-compactions", type=int, default=0, help="crashes inside the cleaner's segment swap")
    parser.add_argument("--disk-fulls", type=int, default=0, help="full-disk episodes (needs --disk-mib)")
    parser.add_argument("--disk-mib", type=int, default=None, help="put the data directory on a tmpfs this big (root); leave room: "
                        "every partition being written holds up to 4 MiB preallocated, and a broker cannot "
                        "start on a disk its own data filled (128 is enough for a 100 s run)")
    parser.add_argument("--seed", type=int, default=1, help="seeds the workload and the fault schedule (default 1)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the history, report and broker data go")
    parser.add_argument("--broker", default="onceflow", choices=["onceflow", "kafka"],
                        help="the broker the campaign starts: onceflow, or Apache Kafka (the reference; kills and pauses)")
    parser.add_argument("--bootstrap-servers", default=None,
                        help="run the workload and the checker against this broker instead, without faults")
    parser.add_argument("--producers", type=int, default=3, help="transactional producers (default 3)")
    parser.add_argument("--partitions", type=int, default=3, help="partitions per topic (default 3)")
    parser.add_argument("--ctp-group", default="assign", choices=["assign", "classic", "consumer"],
                        help="how the consume-transform-produce copiers get their partitions: assign (one copier, every "
                             "partition; default), or two copiers subscribed as members of a classic or a KIP-848 "
                             "consumer-protocol group")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    add_options(parser)


def main(args: argparse.Namespace) -> int:
    kills = args.kills if args.kills is not None else (0 if args.bootstrap_servers else 10)
    faults = {"kill": kills, "pause": args.pauses, "reset": args.resets, "crash-roll": args.crash_rolls,
              "crash-compaction": args.crash_compactions, "disk-full": args.disk_fulls}
    problem = next((f"--{option} must be 0 or more, not {n}" for option, n in
                    (("kills", kills), ("pauses", args.pauses), ("resets", args.resets), ("crash-rolls", args.crash_rolls),
                     ("crash-compactions", args.crash_compactions), ("disk-fulls", args.disk_fulls)) if n < 0), None)
    problem = problem or next((f"--{option} must be at least 1, not {n}" for option, n in
                               (("producers", args.producers), ("partitions", args.partitions), ("seconds", args.seconds))
                               if n < 1), None)
    if args.disk_fulls and not args.disk_mib:
        problem = problem or "--disk-fulls needs --disk-mib (the data directory on a small tmpfs)"
    if args.bootstrap_servers and any(faults.values()):
        problem = problem or "faults need a broker the campaign starts itself; leave out --bootstrap-servers"
    if problem:
        print(f"onceflow chaos: {problem}", file=sys.stderr)
        return 2
    try:
        client = from_options(args)
    except SettingError as exc:
        print(f"onceflow chaos: {exc}", file=sys.stderr)
        return 2
    from .campaign import Options, run
    from .workload import Plan

    options = Options(seconds=args.seconds, faults={k: v for k, v in faults.items() if v}, seed=args.seed,
                      workdir=args.workdir, bootstrap_servers=args.bootstrap_servers, broker=args.broker,
                      disk_mib=args.disk_mib, client=client,
                      pause_s=args.pause_seconds, plan=Plan(producers=args.producers, partitions=args.partitions,
                                ctp_group_protocol=None if args.ctp_group == "assign" else args.ctp_group))
    try:
        outcome = run(options, progress=lambda line: print(line, file=sys.stderr, flush=True))
    except (RuntimeError, ValueError) as exc:
        print(f"onceflow chaos: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**outcome.report.to_json(), "faults": outcome.faults, "errors": outcome.errors}, indent=1))
    else:
        print(outcome.summary())
    if args.workdir is None and outcome.passed:
        shutil.rmtree(outcome.workdir, ignore_errors=True)
    return 0 if outcome.passed else 1
