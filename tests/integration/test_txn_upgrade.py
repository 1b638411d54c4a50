"""Upgrade to transactions v2 (issue 21): a data directory written by a broker at
``transaction.version=0`` (version-0 ``__transaction_state`` records, v1 transactions, a classic
group's offsets) and killed with a transaction open loads at the default ``transaction.version=2``
and keeps working: the open transaction is aborted by the producer's next instance, nothing
acknowledged is lost, nothing aborted becomes visible, the group's offsets are there, and new
transactions commit (written as version-1 records from then on)."""

from __future__ import annotations

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.kafka import make_topic, read_all
from tests.support.txn_state import read_transaction_log

TIMEOUT = 30


def _commit(bs: str, tid: str, values: list[bytes]) -> Producer:
    producer = Producer({"bootstrap.servers": bs, "transactional.id": tid})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for value in values:
        producer.produce("upgraded", value, partition=0)
    producer.commit_transaction(TIMEOUT)
    return producer


def test_a_data_directory_of_transaction_version_0_loads_and_keeps_working(make_broker_process) -> None:  # type: ignore[no-untyped-def]
    old = make_broker_process(**{"transaction.version": "0"})
    bs = old.bootstrap_servers
    make_topic(bs, "upgraded", 1)
    _commit(bs, "kept", [b"committed-1"])
    left_open = Producer({"bootstrap.servers": bs, "transactional.id": "left-open"})
    left_open.init_transactions(TIMEOUT)
    left_open.begin_transaction()
    left_open.produce("upgraded", b"never-committed", partition=0)
    left_open.flush(TIMEOUT)
    group = Consumer({"bootstrap.servers": bs, "group.id": "g", "enable.auto.commit": False})
    group.commit(offsets=[TopicPartition("upgraded", 0, 1)], asynchronous=False)
    group.close()
    assert read_transaction_log(bs).value_versions == {0}
    old.kill()

    old.overrides.pop("transaction.version")
    new = old.start()  # the same data directory, transaction.version at its default, 2
    assert read_all(bs, "upgraded", [0], "read_committed") == [b"committed-1"]  # the open transaction holds the LSO
    _commit(bs, "left-open", [b"committed-2"])  # its next instance aborts what the old one left open
    _commit(bs, "kept", [b"committed-3"])
    assert read_all(bs, "upgraded", [0], "read_committed") == [b"committed-1", b"committed-2", b"committed-3"]
    reader = Consumer({"bootstrap.servers": bs, "group.id": "g"})
    [offset] = reader.committed([TopicPartition("upgraded", 0)], timeout=TIMEOUT)
    reader.close()
    assert offset.offset == 1
    assert read_transaction_log(new.bootstrap_servers).value_versions == {0, 1}
