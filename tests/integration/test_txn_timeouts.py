"""Transactions over time: a producer that goes silent is aborted by the coordinator
(with an epoch bump, so it is fenced), and read_committed consumers move past it."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, Producer

from tests.support.kafka import make_topic, produce, read_all
from tests.support.waiting import wait_for

TIMEOUT = 30


def test_a_silent_producers_transaction_is_aborted_after_its_timeout(make_broker_process) -> None:  # type: ignore[no-untyped-def]
    broker = make_broker_process(**{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    bs = broker.bootstrap_servers
    make_topic(bs, "stalled", 1)
    silent = Producer({"bootstrap.servers": bs, "transactional.id": "goes-silent", "transaction.timeout.ms": 2000})
    silent.init_transactions(TIMEOUT)
    silent.begin_transaction()
    silent.produce("stalled", b"never-committed", partition=0)
    silent.flush(TIMEOUT)
    produce(bs, "stalled", [b"after"], partition=0)  # blocked behind the open transaction for read_committed
    assert read_all(bs, "stalled", [0], "read_committed") == []
    # Within the timeout plus the check interval the coordinator aborts it; the LSO moves on.
    wait_for(lambda: read_all(bs, "stalled", [0], "read_committed") == [b"after"], timeout=20,
             what="the timed-out transaction to be aborted")
    assert "aborting transaction of transactional id 'goes-silent'" in broker.log()
    # The producer that comes back is told it was fenced, never a silent success.
    with pytest.raises(KafkaException) as failure:
        silent.commit_transaction(TIMEOUT)
    error = failure.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert read_all(bs, "stalled", [0], "read_committed") == [b"after"], "the aborted record never becomes visible"


def test_idle_transactional_ids_and_producer_ids_expire(make_broker_process) -> None:  # type: ignore[no-untyped-def]
    from onceflow.tools import txn
    from onceflow.tools.common import ToolError

    broker = make_broker_process(**{
        "transactional.id.expiration.ms": "1500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "200",
        "producer.id.expiration.ms": "1500",
        "producer.id.expiration.check.interval.ms": "200",
    })
    bs = broker.bootstrap_servers
    make_topic(bs, "expiring", 1)
    producer = Producer({"bootstrap.servers": bs, "transactional.id": "short-lived"})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    producer.produce("expiring", b"x", partition=0)
    producer.commit_transaction(TIMEOUT)
    assert txn.describe_transaction(bs, "short-lived")["state"] == "CompleteCommit"
    assert len(txn.describe_producers(bs, "expiring", 0)) == 1

    def forgotten() -> bool:
        try:
            txn.describe_transaction(bs, "short-lived")
        except ToolError:
            return True
        return False

    wait_for(forgotten, timeout=20, what="the idle transactional id to expire (tombstoned)")
    wait_for(lambda: txn.describe_producers(bs, "expiring", 0) == [], timeout=20,
             what="the idle producer id to expire from the partition")
    # A restart does not bring the expired id back: its tombstone is in __transaction_state.
    broker.kill()
    broker.start()
    assert forgotten()
