"""``onceflow bench``: what a broker sustains, measured with confluent-kafka.

    onceflow bench produce          [--acks all|1|0] [--idempotent] [--seconds 10]
    onceflow bench txn-produce      [--commit-interval-ms 100] [--seconds 10]
    onceflow bench commit-latency   [--transactions 1000] [--records-per-txn 10]
    onceflow bench txn-rate         [--records-per-txn 1,10,100] [--producers 1,4] [--seconds 10]
    onceflow bench consume          [--records 1000000] [--isolation read_uncommitted|read_committed]
    onceflow bench read-committed   [--records 200000] [--records-per-txn 100]
    onceflow bench recovery         [--log-mib 2048] [--segment-mib 64]   (no broker: one partition's log)
    onceflow bench restart          [--log-mib 1024] [--partitions 6]     (the broker process, clean and SIGKILLed)
    onceflow bench pipeline         [--payments 200000] [--master local[2,4]] [--baseline at-least-once|spark-kafka]
                                    [--rounds 1]
    onceflow bench source           [--records 1000000] [--master local[2]] [--baseline spark-kafka] [--rounds 1]
    onceflow bench compare          [--brokers onceflow,kafka,kafka-fsync]        (side by side with Apache Kafka)

Common options: ``--bootstrap-servers HOST:PORT`` (else the benchmark starts
``--broker onceflow|kafka|kafka-fsync`` as a separate process on a free loopback
port with a temporary data directory; the Kafka ones are Apache Kafka from the
reference Maven project, with its defaults or fsyncing every write),
``--partitions 6``, ``--record-size 1024``, ``--topic NAME``, ``--json``, and
``-X key=value`` / ``--command-config FILE``: client settings (a secured
cluster's, say: :mod:`onceflow.clientconfig`) for every client the
one-broker workloads make.
``--scrape-every SECONDS`` (the broker the benchmark starts, Onceflow only)
turns the broker's metrics port on and GETs ``/metrics`` that often for the
whole run, as Prometheus would; the scrapes' count and median time go to
stderr at the end (and into ``--json``).  With a broker it started, ``--json``
also gives ``broker_cpu_s``: the broker process's CPU time over the workload.

Every numeric option is checked by the parser (``cliargs``): a bad value is a usage error
(exit status 2) before any broker starts or any topic is created.  With ``--bootstrap-servers``
the cluster is first checked to answer within ``--timeout`` (``longcommand.Session.reach``), and
the topic the benchmark created is deleted at the end, after a failure or Ctrl-C too, unless
``--keep``.  A failure is one line on stderr (exit status 1), Ctrl-C the line ``interrupted``
(130); on a terminal a progress line is drawn on stderr, and nothing when it is piped.

Figures are record values (payload bytes) per second.  ``read-committed``
fills a topic with transactions of which every other one is aborted, then
reads the whole log once with read_uncommitted and once with read_committed,
and reports both as log offsets covered per second: the aborted half is
fetched but filtered out (by the client, using the broker's aborted list).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import uuid
from dataclasses import asdict

from ..cliargs import bootstrap_servers, non_negative_int, positive_int, positive_seconds
from ..clientconfig import ClientSettings, SettingError, add_options, from_options
from ..longcommand import Session, UsageError
from ..longcommand import add_options as add_session_options
from .recovery import bench_recovery, bench_restart
from .workloads import (
    BROKERS,
    DEFAULT_PARTITIONS,
    DEFAULT_RECORD_SIZE,
    TXN_RATE_PRODUCERS,
    TXN_RATE_RECORDS,
    BenchBroker,
    Result,
    Scraper,
    bench_commit_latency,
    bench_consume,
    bench_produce,
    bench_read_committed,
    bench_txn_produce,
    bench_txn_rate,
    count_records,
    create_topic,
    started_broker,
)

__all__ = ["add_arguments", "run_bench"]

WORKLOADS = ["produce", "txn-produce", "commit-latency", "txn-rate", "consume", "read-committed", "recovery", "restart", "pipeline", "source",
             "compare"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workload", choices=WORKLOADS, help="what to measure: " + ", ".join(WORKLOADS))
    parser.add_argument("--bootstrap-servers", type=bootstrap_servers, metavar="HOST:PORT",
                        help="benchmark this cluster (HOST:PORT[,HOST:PORT...]) instead of starting a broker; its topic "
                             "is deleted at the end unless --keep")
    parser.add_argument("--broker", default="onceflow", choices=list(BROKERS),
                        help="the broker to start when --bootstrap-servers is not given (default onceflow)")
    parser.add_argument("--brokers", default=",".join(BROKERS),
                        help=f"compare: the brokers to run side by side (default {','.join(BROKERS)})")
    parser.add_argument("--topic", help="the topic to use (default: a fresh one, bench-XXXXXXXX); one that already "
                                        "exists is used as it is, and never deleted")
    parser.add_argument("--partitions", type=positive_int, default=DEFAULT_PARTITIONS,
                        help=f"partitions of the topic the benchmark creates (default {DEFAULT_PARTITIONS})")
    parser.add_argument("--record-size", type=positive_int, default=DEFAULT_RECORD_SIZE, metavar="BYTES",
                        help=f"each record's value, in bytes (default {DEFAULT_RECORD_SIZE})")
    parser.add_argument("--seconds", type=positive_seconds, default=10.0,
                        help="produce, txn-produce, txn-rate (each shape), compare: how long to produce (default 10; "
                             "500ms, 30s, 5m also work)")
    parser.add_argument("--records", type=positive_int, default=None,
                        help="consume, source, compare: records to read (default 1000000); read-committed: records to "
                             "write (default 200000)")
    parser.add_argument("--acks", default="all", choices=["all", "1", "0"], help="produce: the producer's acks (default all)")
    parser.add_argument("--idempotent", action="store_true", help="produce: enable.idempotence=true (default off)")
    parser.add_argument("--linger-ms", type=non_negative_int, default=5, help="the producers' linger.ms (default 5)")
    parser.add_argument("--commit-interval-ms", type=positive_int, default=100,
                        help="txn-produce, compare: commit this often, in milliseconds (default 100)")
    parser.add_argument("--transactions", type=positive_int, default=1000,
                        help="commit-latency, compare: how many transactions (default 1000)")
    parser.add_argument("--records-per-txn", type=_counts, default=None,
                        help="commit-latency (default 10), read-committed (default 100), txn-rate (default 1,10,100: "
                             "a comma-separated list)")
    parser.add_argument("--producers", type=_counts, default=None,
                        help="txn-rate: concurrent transactional producers (default 1,4: a comma-separated list)")
    parser.add_argument("--isolation", default="read_uncommitted", choices=["read_uncommitted", "read_committed"],
                        help="consume: the consumer's isolation.level (default read_uncommitted)")
    parser.add_argument("--log-mib", type=positive_int, default=2048,
                        help="recovery, restart: size of the log to recover, in MiB (default 2048)")
    parser.add_argument("--payments", type=positive_int, default=200_000, help="pipeline: payments to generate (default 200000)")
    parser.add_argument("--baseline", default=None, choices=["at-least-once", "spark-kafka"],
                        help="pipeline: what exactly-once is compared with: onceflow's sink at-least-once (the "
                             "default), or Spark's own Kafka connector at both ends (spark-sql-kafka-0-10, from the "
                             "reference Maven project); source: spark-kafka reads with Spark's Kafka source too")
    parser.add_argument("--rounds", type=positive_int, default=1,
                        help="pipeline, source: runs of each side, interleaved; medians are reported (default 1)")
    parser.add_argument("--master", default=None,
                        help="pipeline (default local[2,4]), source (default local[2]): the Spark master")
    parser.add_argument("--segment-mib", type=positive_int, default=64,
                        help="recovery, restart: segment.bytes, in MiB (default 64)")
    parser.add_argument("--json", action="store_true", help="print each result as a line of JSON (default: text)")
    parser.add_argument("--scrape-every", type=positive_seconds, default=None, metavar="SECONDS",
                        help="the broker the benchmark starts (onceflow): turn its metrics port on and GET /metrics "
                             "this often during the run; the scrapes' count and median time are reported (default off)")
    parser.add_argument("-o", dest="override", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker setting for the broker the benchmark starts, repeatable (default none)")
    add_session_options(parser, "with --bootstrap-servers: keep the topic the benchmark created (by default it is "
                                "deleted at the end, after a failure or Ctrl-C too)")
    add_options(parser)


def _counts(text: str) -> list[int]:
    """A comma-separated list of positive counts (``--records-per-txn 1,10,100``)."""
    try:
        counts = [positive_int(part) for part in text.split(",") if part.strip()]
    except argparse.ArgumentTypeError:
        counts = []
    if not counts:
        raise argparse.ArgumentTypeError(f"expected positive whole numbers separated by commas, got {text!r}")
    return counts


#: The workloads that run against one broker ``run_bench`` starts (or is given).
BROKER_WORKLOADS = ("produce", "txn-produce", "commit-latency", "txn-rate", "consume", "read-committed")


def _scrape_refusal(args: argparse.Namespace) -> str | None:
    """Why ``--scrape-every`` cannot be honoured with these options, or None."""
    if args.workload not in BROKER_WORKLOADS:
        return f"--scrape-every applies to {', '.join(BROKER_WORKLOADS)}, not {args.workload}"
    if args.bootstrap_servers:
        return "--scrape-every needs the broker the benchmark starts, not --bootstrap-servers"
    if args.broker != "onceflow":
        return f"--scrape-every needs --broker onceflow (the metrics port is Onceflow's), not {args.broker}"
    return None


def _one(counts: list[int] | None, default: int, option: str) -> int:
    if counts is None:
        return default
    if len(counts) != 1:
        raise UsageError(f"{option} takes one number for this workload, not {','.join(map(str, counts))}")
    return counts[0]


def run_bench(args: argparse.Namespace) -> int:
    name = f"onceflow bench {args.workload}"
    try:
        client = from_options(args)
    except SettingError as exc:
        print(f"{name}: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    return Session(name, args, client).run(lambda session: _bench(args, session, bool(client)))


def _bench(args: argparse.Namespace, session: Session, settings_given: bool) -> int:
    scrape = args.scrape_every is not None
    if scrape and (refusal := _scrape_refusal(args)) is not None:
        raise UsageError(refusal)
    if settings_given and args.workload not in BROKER_WORKLOADS:
        raise UsageError(f"-X and --command-config apply to {', '.join(BROKER_WORKLOADS)}, not {args.workload} "
                         "(it starts its own brokers)")
    if args.workload == "source" and args.baseline == "at-least-once":
        raise UsageError("--baseline takes spark-kafka (the source has no at-least-once mode)")
    scraper: Scraper | None = None
    #: --json figures about the whole run, beside each result's.
    extra: dict[str, float] = {}
    if args.workload == "recovery":
        results = [bench_recovery(args.log_mib, args.segment_mib, args.record_size)]
    elif args.workload == "restart":
        results = bench_restart(args.log_mib, args.partitions, args.record_size, args.segment_mib)
    elif args.workload == "pipeline":
        from .pipeline import bench_pipeline

        results = bench_pipeline(args.payments, args.master or "local[2,4]", args.override,
                                 args.baseline or "at-least-once", args.rounds)
    elif args.workload == "compare":
        return _compare(args, session)
    elif args.workload == "source":
        from .pipeline import bench_source

        results = bench_source(args.records or 1_000_000, args.record_size, args.partitions, args.master or "local[2]",
                               args.override, args.baseline, args.rounds)
    else:
        topic = args.topic or f"bench-{uuid.uuid4().hex[:8]}"
        broker: BenchBroker | None = None
        client = session.client
        with contextlib.ExitStack() as stack:
            if args.bootstrap_servers:
                bootstrap = args.bootstrap_servers
                session.reach(bootstrap)
            else:
                broker = stack.enter_context(started_broker(args.broker, args.override, metrics=scrape))
                bootstrap = broker.bootstrap
                if broker.metrics_url is not None:
                    scraper = stack.enter_context(Scraper(broker.metrics_url, args.scrape_every))
            if create_topic(bootstrap, topic, args.partitions, client, session.timeout) and args.bootstrap_servers:
                session.made(bootstrap, [topic])
            cpu = broker.cpu_seconds() if broker is not None else 0.0
            results = _run(args, bootstrap, topic, client, session)
            if broker is not None:  # the broker's CPU time over the workload (all of its results)
                extra["broker_cpu_s"] = round(broker.cpu_seconds() - cpu, 3)
    session.clear()
    scraped = scraper.summary() if scraper is not None else {}
    if scraper is not None:
        print(scraper.line(), file=sys.stderr)
    for result in results:
        if args.json:
            print(json.dumps({**asdict(result), "records_per_s": result.records_per_s, "mb_per_s": result.mb_per_s,
                              **extra, **scraped}))
        else:
            print(result.line())
    return 0


def _run(args: argparse.Namespace, bootstrap: str, topic: str, client: ClientSettings, session: Session) -> list[Result]:
    status = session.status
    if args.workload == "produce":
        return [bench_produce(bootstrap, topic, args.record_size, args.seconds, args.acks, args.linger_ms, args.idempotent,
                              client, status)]
    if args.workload == "txn-produce":
        return [bench_txn_produce(bootstrap, topic, args.record_size, args.seconds, args.commit_interval_ms, args.linger_ms,
                                  client, status)]
    if args.workload == "commit-latency":
        return [bench_commit_latency(bootstrap, topic, args.record_size, args.transactions,
                                     _one(args.records_per_txn, 10, "--records-per-txn"), client, status)]
    if args.workload == "txn-rate":
        return [bench_txn_rate(bootstrap, topic, args.record_size, args.seconds, records, producers, args.partitions, client,
                               status)
                for producers in args.producers or TXN_RATE_PRODUCERS
                for records in args.records_per_txn or TXN_RATE_RECORDS]
    if args.workload == "read-committed":
        return bench_read_committed(bootstrap, topic, args.record_size, args.records or 200_000,
                                    _one(args.records_per_txn, 100, "--records-per-txn"), client, status)
    wanted = args.records or 1_000_000
    available = count_records(bootstrap, topic, client)
    while available < wanted:  # fill the topic first if it holds too few records
        fill_seconds = max(1.0, (wanted - available) * args.record_size / 200e6)
        filled = bench_produce(bootstrap, topic, args.record_size, fill_seconds, "1", args.linger_ms, client=client,
                               progress=lambda text: status(f"filling the topic: {text}"))
        session.say(f"(filled the topic: {filled.line()})")
        available = count_records(bootstrap, topic, client)
    return [bench_consume(bootstrap, topic, wanted, args.isolation, client, status)]


def _compare(args: argparse.Namespace, session: Session) -> int:
    from .compare import as_json, compare, table

    brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    unknown = [b for b in brokers if b not in BROKERS]
    if unknown:
        raise UsageError(f"--brokers: unknown {', '.join(unknown)} (choose from {', '.join(BROKERS)})")
    rows = compare(brokers, args.override, args.partitions, args.record_size, args.seconds, args.records or 1_000_000,
                   args.transactions, _one(args.records_per_txn, 10, "--records-per-txn"), args.commit_interval_ms, args.linger_ms,
                   session.say)
    print(as_json(rows) if args.json else table(rows))
    return 0
