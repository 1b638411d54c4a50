"""Log compaction end to end: the broker process with a fast cleaner, confluent-kafka clients.

A compacted user topic keeps the latest value per key; ``__consumer_offsets`` stays small
however many commits it has seen (so start-up replay does not grow with the broker's age);
a transactional compacted topic never exposes aborted records to read_committed readers and
keeps every survivor at its original offset."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from onceflow.log.compaction import read_checkpoint
from onceflow.records.batch import scan
from onceflow.records.records import iter_records
from tests.support.broker import cleaned_through, partition_dir, segment_sizes
from tests.support.kafka import make_topic, produce, produce_keyed, txn_producer
from tests.support.waiting import wait_for

TIMEOUT = 30
FAST_CLEANER = {"log.cleaner.backoff.ms": "200"}


def disk_bytes(directory: Path) -> int:
    return sum(segment_sizes(directory))


def disk_records(directory: Path) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every data record in the partition's files (read by the test itself)."""
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        for pos, header in scan(data, verify_crc=True):
            if not header.is_control:
                out += [(r.offset, r.key, r.value) for r in iter_records(data[pos : pos + header.size], header)]
    return out


def active_base(directory: Path) -> int:
    return max(int(p.stem) for p in directory.glob("*.log"))


def fully_cleaned(directory: Path) -> bool:
    """Everything below the active segment is clean."""
    return read_checkpoint(directory) == active_base(directory)


def read_partition(bootstrap: str, topic: str, isolation: str = "read_uncommitted") -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of everything readable in partition 0, up to end-of-partition."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4()}", "isolation.level": isolation,
                         "enable.auto.commit": False, "enable.partition.eof": True})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []

    def at_the_end() -> bool:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is not None:
            assert msg.error().code() == KafkaError._PARTITION_EOF, msg.error()
            return True
        if msg is not None:
            got.append((msg.offset(), msg.key(), msg.value()))
        return False

    try:
        wait_for(at_the_end, timeout=TIMEOUT, interval=0, what=f"end-of-partition in {topic}")
    finally:
        consumer.close()
    return got


def test_compacted_topic_keeps_the_latest_value_per_key(make_broker_process: Any) -> None:
    broker = make_broker_process(**FAST_CLEANER)
    bs = broker.bootstrap_servers
    make_topic(bs, "profiles", 1, **{"cleanup.policy": "compact", "segment.bytes": "8192"})
    keys = [f"user-{i}".encode() for i in range(10)]
    pad = b"." * 100
    updates = [(k, f"{r}:".encode() + pad) for r in range(150) for k in keys]
    updates += [(keys[9], None)]  # a tombstone: kept until its delete horizon (a day by default)
    updates += [(f"filler-{i}".encode(), pad) for i in range(200)]  # unique keys: nothing to compact in the tail
    produced = sum(len(k) + len(v or b"") for k, v in updates)
    last = produce_keyed(bs, "profiles", updates)
    directory = partition_dir(broker, "profiles")

    wait_for(lambda: cleaned_through(directory, last[keys[9]]), what="the cleaner to pass the last update")
    wait_for(lambda: disk_bytes(directory) < produced // 4, what="the partition to shrink on disk")

    seen = read_partition(bs, "profiles")
    by_key: dict[bytes | None, list[tuple[int, bytes | None]]] = {}
    for offset, key, value in seen:
        by_key.setdefault(key, []).append((offset, value))
    assert all(len(v) == 1 for v in by_key.values()), "one record per key is left"
    for key in keys[:9]:
        assert by_key[key] == [(last[key], b"149:" + pad)]
    assert by_key[keys[9]] == [(last[keys[9]], None)], "the tombstone is still there"
    assert len(by_key) == 10 + 200
    assert [o for o, _, _ in seen] == sorted(o for o, _, _ in seen)
    probe = Consumer({"bootstrap.servers": bs, "group.id": "wm"})
    watermarks = probe.get_watermark_offsets(TopicPartition("profiles", 0), timeout=TIMEOUT)
    probe.close()
    assert watermarks == (0, len(updates)), "the log start and end do not move; survivors keep their offsets"


def commit_many(bootstrap: str, group: str, topic: str, commits: int) -> int:
    """Commit offsets 1..commits for the group (pipelined), then return the last one committed."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    window = 50
    for start in range(1, commits + 1, window):
        futures = [
            admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, offset)])])
            for offset in range(start, min(start + window, commits + 1))
        ]
        for fut in futures:
            for result in fut.values():
                result.result(TIMEOUT)
    final = commits + 1_000_000  # a distinctive last value, committed alone
    for result in admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, final)])]
    ).values():
        result.result(TIMEOUT)
    return final


def committed(bootstrap: str, group: str, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    [fut] = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0)])]).values()
    return int(fut.result(TIMEOUT).topic_partitions[0].offset)


def test_consumer_offsets_stays_small_so_start_up_stays_flat(make_broker_process: Any) -> None:
    segment_bytes = 4096
    sizes = {}
    for commits in (150, 1500):
        broker = make_broker_process(**FAST_CLEANER, **{"offsets.topic.num.partitions": "1",
                                                        "offsets.topic.segment.bytes": str(segment_bytes)})
        bs = broker.bootstrap_servers
        make_topic(bs, "source", 1)
        final = commit_many(bs, "ledger-readers", "source", commits)
        directory = partition_dir(broker, "__consumer_offsets")
        wait_for(lambda d=directory: fully_cleaned(d), what="__consumer_offsets to be cleaned")  # type: ignore[misc]
        broker.restart()
        assert committed(bs, "ledger-readers", "source") == final, "the last committed offset survives compaction"
        on_disk = disk_records(directory)
        sizes[commits] = (disk_bytes(directory), len(on_disk))
        # What is left: at most the active segment's worth of commits, plus the newest per key.
        assert sizes[commits][0] < 3 * segment_bytes, sizes
        broker.stop()
    (small_bytes, small_records), (big_bytes, big_records) = sizes[150], sizes[1500]
    assert big_bytes < small_bytes + 2 * segment_bytes and big_records < small_records + 2 * segment_bytes // 60, sizes


def test_transactional_topic_compacts_without_exposing_aborted_records(make_broker_process: Any) -> None:
    broker = make_broker_process(**FAST_CLEANER)
    bs = broker.bootstrap_servers
    make_topic(bs, "accounts", 1, **{"cleanup.policy": "compact", "segment.bytes": "4096"})
    producer = txn_producer(bs, **{"batch.num.messages": 4})
    keys = [f"acct-{i}".encode() for i in range(5)]
    delivered: dict[int, tuple[bytes, bytes]] = {}

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        delivered[msg.offset()] = (msg.key(), msg.value())

    committed_values: dict[bytes, bytes] = {}
    aborted_values: set[bytes] = set()
    for t in range(40):
        producer.begin_transaction()
        for r in range(3):
            for key in keys:
                value = f"t{t}-r{r}-{key.decode()}".encode() + b"#" * 40
                producer.produce("accounts", value, key=key, partition=0, on_delivery=report)
                if t % 3 == 2:
                    aborted_values.add(value)
                else:
                    committed_values[key] = value
        producer.flush(TIMEOUT)
        if t % 3 == 2:
            producer.abort_transaction(TIMEOUT)
        else:
            producer.commit_transaction(TIMEOUT)
    filler = produce(bs, "accounts", [f"filler-{i}".encode() + b"#" * 60 for i in range(120)], partition=0,
                     **{"batch.num.messages": 10})
    first_filler = min(offset for _, offset, _ in filler)
    directory = partition_dir(broker, "accounts")
    wait_for(lambda: cleaned_through(directory, first_filler), what="the cleaner to pass the transactions")
    assert not any(v in aborted_values for _, _, v in disk_records(directory)), "aborted records are gone from disk"

    rc = read_partition(bs, "accounts", "read_committed")
    ru = read_partition(bs, "accounts", "read_uncommitted")
    for seen in (rc, ru):
        txn_part = [(o, k, v) for o, k, v in seen if o < first_filler]
        assert not any(v in aborted_values for _, _, v in seen)
        assert {k: v for _, k, v in txn_part} == committed_values and len(txn_part) == len(keys)
        for offset, key, value in txn_part:
            assert delivered[offset] == (key, value), "survivors keep their original offsets"
        assert [o for o, _, _ in seen] == sorted(o for o, _, _ in seen)
        assert [v for o, _, v in seen if o >= first_filler] == [v for _, _, v in filler]
    # The producer's state came through compaction: it can keep writing transactions.
    producer.begin_transaction()
    producer.produce("accounts", b"after", key=keys[0], partition=0)
    producer.commit_transaction(TIMEOUT)
    assert read_partition(bs, "accounts", "read_committed")[-1][2] == b"after"


def test_a_committed_value_survives_an_aborted_one_whose_abort_is_segments_later(make_broker_process: Any) -> None:
    """Issue 7, defect 1 under compaction, end to end: K's committed value, then an aborted value
    of K whose ABORT marker lands several 1 KiB segments later, while another transaction holds
    the LSO between them.  The cleaner must know K's second value was aborted: K keeps its
    committed value through every pass."""
    broker = make_broker_process(**FAST_CLEANER)
    bs = broker.bootstrap_servers
    make_topic(bs, "balances", 1, **{"cleanup.policy": "compact", "segment.bytes": "1024", "delete.retention.ms": "0",
                                      "min.cleanable.dirty.ratio": "0.01"})
    one_per_batch = {"batch.num.messages": 1}
    committed_at = produce_keyed(bs, "balances", [(b"K", b"committed")])[b"K"]
    aborting, holding = txn_producer(bs), txn_producer(bs)
    aborting.begin_transaction()
    aborting.produce("balances", b"aborted", key=b"K", partition=0)
    aborting.flush(TIMEOUT)
    produce_keyed(bs, "balances", [(f"a-{i}".encode(), b"x" * 100) for i in range(12)], **one_per_batch)
    holding.begin_transaction()
    holding.produce("balances", b"held", key=b"L", partition=0)
    holding.flush(TIMEOUT)
    produce_keyed(bs, "balances", [(f"b-{i}".encode(), b"x" * 100) for i in range(24)], **one_per_batch)
    aborting.abort_transaction(TIMEOUT)
    directory = partition_dir(broker, "balances")
    wait_for(lambda: cleaned_through(directory, committed_at + 1), what="the cleaner to pass K's two values")

    def value_of_k() -> list[bytes | None]:
        return [v for _, k, v in read_partition(bs, "balances", "read_committed") if k == b"K"]

    assert value_of_k() == [b"committed"]
    holding.commit_transaction(TIMEOUT)
    last = produce_keyed(bs, "balances", [(f"c-{i}".encode(), b"x" * 100) for i in range(24)], **one_per_batch)
    wait_for(lambda: cleaned_through(directory, min(last.values())), what="the cleaner to pass the ABORT marker")
    assert value_of_k() == [b"committed"]
    assert b"aborted" not in [v for _, _, v in disk_records(directory)]


@pytest.mark.parametrize("fault", ["compaction-swap", "compaction-delete"])
def test_a_crash_inside_the_cleaners_swap_recovers_every_latest_value(make_broker_process: Any, fault: str) -> None:
    """The broker dies between the steps of swapping a cleaned segment in (``.swap`` written,
    then old segments deleted): the restart finishes the swap, and every key still reads its
    latest value, once, at its original offset."""
    broker = make_broker_process(**{**FAST_CLEANER, "log.cleaner.enable": "false"})
    bs = broker.bootstrap_servers
    make_topic(bs, "swapped", 1, **{"cleanup.policy": "compact", "segment.bytes": "4096"})
    keys = [f"k{i}".encode() for i in range(8)]
    updates = [(k, f"{r}:".encode() + b"." * 80) for r in range(60) for k in keys]
    last = produce_keyed(bs, "swapped", updates)
    broker.overrides["log.cleaner.enable"] = "true"  # the cleaner's first pass dies at the crash point
    broker.env = {"ONCEFLOW_FAULT": fault}
    broker.restart()
    assert broker.wait_exit() == 137, "the broker died at the crash point"
    assert f"crashing at {fault}" in broker.log()

    broker.env = {}
    broker.start()
    directory = partition_dir(broker, "swapped")
    assert not list(directory.glob("*.swap")) and not list(directory.glob("*.cleaned")), "the swap was finished or undone"
    seen = read_partition(bs, "swapped")
    offsets = [o for o, _, _ in seen]
    assert offsets == sorted(set(offsets)), "offsets increase, none twice"
    latest = {key: (offset, value) for offset, key, value in seen}
    assert latest == {k: (last[k], b"59:" + b"." * 80) for k in keys}, "every key's latest value, at its offset"
    produce_keyed(bs, "swapped", [(f"filler-{i}".encode(), b"." * 80) for i in range(100)])  # roll past the updates
    wait_for(lambda: cleaned_through(directory, max(last.values())), what="the cleaner to finish after the restart")
    survivors = sorted((k, o) for o, k, _ in read_partition(bs, "swapped") if k in last)
    assert survivors == sorted((k, last[k]) for k in keys), "after the cleaner's next pass, one record per key"
