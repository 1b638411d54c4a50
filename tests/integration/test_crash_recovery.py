"""Transactions through broker crashes: every transaction ends wholly committed or
wholly aborted, offsets follow the same outcome, read_committed reads do not change
across restarts, and a consume-transform-produce pipeline stays exactly-once while
the broker is killed under it.

Crash points are deterministic (``ONCEFLOW_FAULT``, see ``onceflow.faults``); the
randomized test kills the broker with SIGKILL at a random moment of a concurrent load.
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.support.broker import SEGMENT_SHAPES, SMALL_SEGMENTS, BrokerProcess
from tests.support.ctp import Worker
from tests.support.kafka import make_topic, produce, read_all
from tests.support.waiting import wait_for

TIMEOUT = 30
PARTITIONS = [0, 1, 2]


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return consumer.committed([TopicPartition(topic, 0)], timeout=TIMEOUT)[0].offset
    finally:
        consumer.close()


@pytest.mark.parametrize(
    ("fault", "commit", "broker_process"),
    [
        pytest.param("txn-log:PrepareCommit", True, {}, id="txn-log:PrepareCommit-True"),  # the decision is durable, no marker written yet
        pytest.param("marker@1", True, {}, id="marker@1-True"),  # one partition has its COMMIT marker, the others do not
        pytest.param("marker@3", True, {}, id="marker@3-True"),  # all but one
        pytest.param("txn-log:PrepareAbort", False, {}, id="txn-log:PrepareAbort-False"),
        # CompleteCommit is applied once in the log, before it is on disk: a crash then must still
        # leave the transaction committed (the load rolls it forward from PrepareCommit if need be).
        pytest.param("txn-log:CompleteCommit", True, {}, id="txn-log:CompleteCommit-True"),
        pytest.param("marker@2", False, {}, id="marker@2-False"),
        pytest.param("marker@1", True, SMALL_SEGMENTS, id="marker@1-True-1KiB-segments"),
        pytest.param("marker@2", False, SMALL_SEGMENTS, id="marker@2-False-1KiB-segments"),
    ],
    indirect=["broker_process"],
)
def test_a_crash_inside_commit_or_abort_leaves_the_transaction_whole(broker_process: BrokerProcess, fault: str,
                                                                     commit: bool) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "out", 3)
    make_topic(bs, "in", 1)
    produce(bs, "in", [b"x"] * 10, partition=0)
    group = f"g-{uuid.uuid4().hex[:6]}"
    group_metadata = Consumer({"bootstrap.servers": bs, "group.id": group}).consumer_group_metadata()

    broker_process.env = {"ONCEFLOW_FAULT": fault}
    broker_process.restart()
    producer = Producer({"bootstrap.servers": bs, "transactional.id": f"crash-{fault}", "message.timeout.ms": 10000})
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    values = [f"{fault}-{p}".encode() for p in PARTITIONS]
    for p, v in zip(PARTITIONS, values, strict=True):
        producer.produce("out", v, partition=p)
    producer.send_offsets_to_transaction([TopicPartition("in", 0, 10)], group_metadata, TIMEOUT)
    producer.flush(TIMEOUT)
    finishing = threading.Thread(target=_finish_quietly, args=(producer, commit), daemon=True)
    finishing.start()
    assert broker_process.wait_exit() == 137, "the broker died at the crash point"
    assert f"crashing at {fault.split('@')[0]}" in broker_process.log()

    broker_process.env = {}
    broker_process.start()
    expected = sorted(values) if commit else []
    wait_for(lambda: sorted(read_all(bs, "out", PARTITIONS, "read_committed")) == expected,
             what=f"the transaction to be wholly {'committed' if commit else 'aborted'} after recovery")
    wait_for(lambda: committed_offset(bs, group, "in") == (10 if commit else -1001),
             what="the group's offsets to follow the transaction's outcome")
    assert sorted(read_all(bs, "out", PARTITIONS, "read_uncommitted")) == sorted(values), "nothing acknowledged was lost"

    # Partition and coordinator state come back the same after one more crash.
    broker_process.kill()
    broker_process.start()
    assert sorted(read_all(bs, "out", PARTITIONS, "read_committed")) == expected
    assert committed_offset(bs, group, "in") == (10 if commit else -1001)


def _finish_quietly(producer: Producer, commit: bool) -> None:
    try:
        if commit:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
    except KafkaException:
        pass  # the broker died under it: the outcome is decided by recovery


@pytest.mark.parametrize(("seed", "broker_process"), [(1, {}), (2, {}), (3, SMALL_SEGMENTS)],
                         indirect=["broker_process"], ids=["1", "2", "3-1KiB-segments"])
def test_kill_9_during_concurrent_transactions_is_all_or_nothing(broker_process: BrokerProcess, seed: int) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "multi", 3)
    rng = random.Random(seed)
    told: dict[str, str] = {}  # transaction tag -> what its producer was told: commit / abort
    lock = threading.Lock()
    stop = threading.Event()
    done_count = [0]

    def run(worker: int) -> None:
        producer = Producer({"bootstrap.servers": bs, "transactional.id": f"multi-{seed}-{worker}",
                             "message.timeout.ms": 8000, "transaction.timeout.ms": 20000})
        try:
            producer.init_transactions(TIMEOUT)
        except KafkaException:
            return  # the broker was killed before this producer even started
        local = random.Random(seed * 100 + worker)
        n = 0
        while not stop.is_set():
            tag = f"w{worker}-t{n}"
            n += 1
            try:
                producer.begin_transaction()
                for p in PARTITIONS:
                    producer.produce("multi", f"{tag}-p{p}".encode(), partition=p)
                if local.random() < 0.5:
                    producer.commit_transaction(TIMEOUT)
                    outcome = "commit"
                else:
                    producer.flush(TIMEOUT)
                    producer.abort_transaction(TIMEOUT)
                    outcome = "abort"
            except KafkaException:
                return  # the broker was killed: this transaction's outcome is unknown to us
            with lock:
                told[tag] = outcome
                done_count[0] += 1

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(3)]
    for t in threads:
        t.start()
    kill_after = rng.randint(5, 40)
    wait_for(lambda: done_count[0] >= kill_after, timeout=60, what=f"{kill_after} transactions")
    broker_process.kill()
    stop.set()
    for t in threads:
        t.join(TIMEOUT)
    broker_process.start()

    def visible_by_txn() -> dict[str, set[int]]:
        out: dict[str, set[int]] = {}
        for value in read_all(bs, "multi", PARTITIONS, "read_committed"):
            tag, _, p = value.decode().rpartition("-p")
            out.setdefault(tag, set()).add(int(p))
        return out

    # Open transactions of the dead producers are finished by the coordinator (rolled forward,
    # or aborted when their producers' timeouts pass); wait until no partition is held back.
    wait_for(lambda: _no_open_transactions(bs), timeout=60, what="every transaction to be finished")
    visible = visible_by_txn()
    for tag, partitions in visible.items():
        assert partitions == set(PARTITIONS), f"transaction {tag} is partly visible: {sorted(partitions)}"
    for tag, outcome in told.items():
        assert (tag in visible) == (outcome == "commit"), f"{tag} was told {outcome} but visible={tag in visible}"
    broker_process.kill()
    broker_process.start()
    assert visible_by_txn() == visible, "read_committed reads are the same after another restart"


def _no_open_transactions(bootstrap: str) -> bool:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lso-{uuid.uuid4()}", "isolation.level": "read_committed"})
    try:
        for p in PARTITIONS:
            _, lso = consumer.get_watermark_offsets(TopicPartition("multi", p), timeout=TIMEOUT, cached=False)
            # librdkafka's default isolation.level is read_committed: ask for the high watermark explicitly.
            plain = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{uuid.uuid4()}",
                              "isolation.level": "read_uncommitted"})
            _, hw = plain.get_watermark_offsets(TopicPartition("multi", p), timeout=TIMEOUT, cached=False)
            plain.close()
            if lso != hw:
                return False
        return True
    finally:
        consumer.close()


@pytest.mark.parametrize("broker_process", SEGMENT_SHAPES, indirect=True)
def test_consume_transform_produce_stays_exactly_once_while_the_broker_is_killed(broker_process: BrokerProcess) -> None:
    bs = broker_process.bootstrap_servers
    make_topic(bs, "ctp-in", 3)
    make_topic(bs, "ctp-out", 3)
    inputs = [f"record-{i:05d}".encode() for i in range(3000)]
    produce(bs, "ctp-in", inputs)
    rng = random.Random(4242)
    worker = Worker(bs)
    try:
        for _ in range(3):
            # Let the worker commit a few transactions, then pull the broker out from under it.
            target, seen = rng.randint(1, 6), 0
            for line in worker.lines():
                if line.startswith("committed"):
                    seen += 1
                    if seen >= target:
                        break
            broker_process.kill()
            broker_process.start()

        def finished() -> bool:
            nonlocal worker
            if worker.proc.poll() is not None:  # it gave up on a fatal error: a new instance takes over
                worker = Worker(bs)
            return len(read_all(bs, "ctp-out", PARTITIONS, "read_committed")) >= len(inputs)

        wait_for(finished, timeout=180, interval=0.5, what="the pipeline to finish the input")
    finally:
        worker.kill()
    output = read_all(bs, "ctp-out", PARTITIONS, "read_committed")
    assert sorted(output) == sorted(v.upper() for v in inputs), \
        f"{len(output)} outputs for {len(inputs)} inputs: every input exactly once"


def test_a_crash_inside_a_segment_roll_keeps_idempotent_writes_exactly_once(broker_process: BrokerProcess) -> None:
    """The broker dies just after opening a new segment, before the producer-state snapshot at
    its base: the restart rebuilds producer state from the older snapshot and the log, so the
    idempotent producer's retries of its in-flight batches are recognised as duplicates."""
    bs = broker_process.bootstrap_servers
    make_topic(bs, "rolled", 2, **{"segment.bytes": "2048"})
    broker_process.env = {"ONCEFLOW_FAULT": "segment-roll@4"}
    broker_process.restart()
    values = [f"r{i:04d}-".encode() + b"." * 90 for i in range(400)]
    acked: list[bytes] = []
    errors: list[object] = []

    def report(err: object, msg: object) -> None:
        if err is not None:
            errors.append(err)
        else:
            acked.append(msg.value())  # type: ignore[attr-defined]

    producer = Producer({"bootstrap.servers": bs, "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 120000, "log_level": 0})

    def send() -> None:
        for i, value in enumerate(values):  # small batches, so that the segments roll often
            producer.produce("rolled", value, partition=i % 2, on_delivery=report)
            if i % 16 == 15:
                producer.flush(TIMEOUT)

    sending = threading.Thread(target=send, daemon=True)
    sending.start()
    assert broker_process.wait_exit() == 137, "the broker died at the crash point"
    assert "crashing at segment-roll" in broker_process.log()
    broker_process.env = {}
    broker_process.start()
    sending.join(TIMEOUT)
    assert producer.flush(TIMEOUT * 2) == 0 and not errors, errors
    assert sorted(acked) == sorted(values)
    assert sorted(read_all(bs, "rolled", [0, 1], "read_uncommitted")) == sorted(values), "each record once"
