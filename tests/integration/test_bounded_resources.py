"""Bounded resources under load (issue 11, section 5): a thousand transactions open at once over
two thousand connections, held by the real broker process; its memory per open transaction
stays small, other clients are served meanwhile, and every transaction then ends as its
producer asked: the committed ones visible to read_committed, the aborted ones not, no
transaction left open, the last stable offset back at the high watermark."""

from __future__ import annotations

import socket

from kio.schema.errors import ErrorCode

from tests.integration.test_connection_memory import api_versions_round_trip, open_idle_connections, rss_bytes
from tests.support.broker import BrokerProcess
from tests.support.txn_wire import (
    READ_COMMITTED,
    add_partitions,
    end_txn,
    hw_and_lso,
    init_transactional,
    list_transactions,
    make_ready_topic,
    produce,
    txn_batch,
    visible_values,
)
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

OPEN_TRANSACTIONS = 1000
IDLE_CONNECTIONS = 1000
PARTITIONS = 4
#: An open transaction holds its coordinator metadata, producer state on its partition, and a
#: connection (a few KiB, see test_connection_memory): well under this.
MAX_GROWTH_PER_TRANSACTION = 64 << 10


def test_a_thousand_open_transactions_over_two_thousand_connections(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    pid = broker_process.proc.pid  # type: ignore[union-attr]
    make_ready_topic(bs, "many", PARTITIONS)
    with WireClient(bs) as warm:  # one transaction end to end: __transaction_state exists, code paths are warm
        producer_id, epoch = init_transactional(warm, "many-warm-up")
        add_partitions(warm, "many-warm-up", producer_id, epoch, "many", list(range(PARTITIONS)))
        end_txn(warm, "many-warm-up", producer_id, epoch, commit=True)
    rss_before = rss_bytes(pid)

    idle: list[socket.socket] = open_idle_connections(broker_process.port, IDLE_CONNECTIONS)
    clients: list[tuple[WireClient, str, int, int]] = []
    try:
        for i in range(OPEN_TRANSACTIONS):
            client = WireClient(bs)
            tid = f"many-{i}"
            producer_id, epoch = init_transactional(client, tid, timeout_ms=900_000)
            clients.append((client, tid, producer_id, epoch))
            assert add_partitions(client, tid, producer_id, epoch, "many", [i % PARTITIONS]) == {i % PARTITIONS: ErrorCode.none}
            error, _ = produce(client, "many", i % PARTITIONS, txn_batch(producer_id, epoch, 0, [f"v{i}".encode()]), tid)
            assert error == ErrorCode.none
        rss_open = rss_bytes(pid)
        with WireClient(bs) as probe:
            ongoing = list_transactions(probe, states=("Ongoing",)).transaction_states
            assert len([t for t in ongoing if t.transactional_id.startswith("many-") and t.transactional_id != "many-warm-up"]) \
                == OPEN_TRANSACTIONS
            marks = [hw_and_lso(probe, "many", p) for p in range(PARTITIONS)]
            assert all(lso < hw for hw, lso in marks), f"every partition's LSO is held by an open transaction: {marks}"
        latency = api_versions_round_trip(broker_process.port)
        per_transaction = (rss_open - rss_before) / OPEN_TRANSACTIONS
        print(f"\nbroker RSS {rss_before / 2**20:.1f} -> {rss_open / 2**20:.1f} MiB with {OPEN_TRANSACTIONS} open transactions "
              f"and {OPEN_TRANSACTIONS + IDLE_CONNECTIONS} connections: {per_transaction / 1024:.1f} KiB per transaction "
              f"(its connection included); another client's ApiVersions took {latency * 1000:.2f} ms")
        assert per_transaction < MAX_GROWTH_PER_TRANSACTION

        for i, (client, tid, producer_id, epoch) in enumerate(clients):
            assert end_txn(client, tid, producer_id, epoch, commit=i % 2 == 0) == ErrorCode.none
    finally:
        for client, *_ in clients:
            client.close()
        for sock in idle:
            sock.close()

    with WireClient(bs) as probe:
        wait_for(lambda: all(hw == lso for hw, lso in (hw_and_lso(probe, "many", p) for p in range(PARTITIONS))),
                 timeout=120, interval=0.1, what="every marker written: the LSO back at the high watermark")
        assert not list_transactions(probe, states=("Ongoing", "PrepareCommit", "PrepareAbort")).transaction_states
        visible = sorted(v for p in range(PARTITIONS) for v in visible_values(probe, "many", p, READ_COMMITTED))
    assert visible == sorted(f"v{i}".encode() for i in range(0, OPEN_TRANSACTIONS, 2)), "the committed half, once each"
