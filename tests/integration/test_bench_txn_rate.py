"""``bench txn-rate`` against a real broker: its producers run concurrent transactions, every
one of them commits, and the figures it reports agree with what the topic holds."""

from __future__ import annotations

from onceflow.bench.workloads import TXN_WARMUP, bench_txn_rate, create_topic
from onceflow.broker.embedded import EmbeddedBroker
from tests.support.kafka import read_all


def test_txn_rate_commits_every_transaction_it_counts() -> None:
    with EmbeddedBroker() as broker:
        bs = broker.bootstrap_servers
        create_topic(bs, "rate", 3)
        result = bench_txn_rate(bs, "rate", 100, 0.5, records_per_txn=4, producers=2, partitions=3)
        assert result.records > 0 and result.extra["txn_per_s"] > 0
        assert result.extra["p50_ms"] <= result.extra["p99_ms"] <= result.extra["max_ms"]
        committed = read_all(bs, "rate", [0, 1, 2], "read_committed")
        assert len(committed) == result.records + 2 * TXN_WARMUP * 4, "the warm-up and the counted transactions"
