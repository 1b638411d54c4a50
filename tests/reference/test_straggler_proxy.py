"""The stragglers of KAFKA-17754 from real clients, against Onceflow and Apache Kafka 4.3.1 (each broker
of ``proxied`` behind a ``RequestProxy``, tests/support/tcp_proxy.py, that it advertises).

A real client does not send transaction 2 while transaction 1's EndTxn is unanswered, so holding a
request back only stalls it.  What reaches a broker late in practice is a request delivered twice:
the client's retry after a timeout or a dropped connection got through, and the first copy,
delayed in the network, arrives later (Jepsen's Bufstream analysis; KIP-890 part 2).  The proxy
models that: it forwards a request of transaction 1 and keeps a copy, and the test delivers the
copy again, on a new connection, once the producer's transaction 2 is open and has written.

What both brokers do, the same on each (error codes as Kafka names them):

* the Java client 4.3.1 uses transactions v2 (EndTxn v5 bumps the epoch): the replayed Produce is
  ``INVALID_PRODUCER_EPOCH``, the replayed EndTxn ``PRODUCER_FENCED``; nothing lands, nothing commits
  early, and transaction 2 commits when the client says so;
* librdkafka (confluent-kafka) uses transactions v1, one epoch for every transaction of a producer:
  the replayed Produce is answered as a duplicate (``NONE``, nothing appended), but the replayed
  EndTxn ends transaction 2, whatever that one's own fate was to be (the cases of
  ``test_a_v1_producers_replayed_end_txn_ends_its_next_transaction``);
* the Spark sink calls ``init_transactions`` before each of its transactions, so the replayed
  Produce and EndTxn of the previous one are both ``INVALID_PRODUCER_EPOCH`` (an EndTxn older than
  v2 is told INVALID_PRODUCER_EPOCH where a newer one is told PRODUCER_FENCED, KIP-588).
"""

from __future__ import annotations

import contextlib
import json
import queue
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from kio.schema.errors import ErrorCode

from onceflow.reference.tools import java_command
from onceflow.spark import sink
from onceflow.spark.options import parse_sink_options
from onceflow.spark.protocol import TaskIdentity, transactional_id
from tests.support.reference import Proxied
from tests.support.tcp_proxy import Copy, Request, RequestProxy
from tests.support.txn_wire import READ_COMMITTED, hw_and_lso, make_ready_topic, visible_values, wait_hw_and_lso
from tests.support.wire import WireClient, decode_response

PRODUCE, ADD_PARTITIONS_TO_TXN, END_TXN = 0, 24, 26
TIMEOUT_S = 30.0
#: What the producers write in their transactions 1 and 2 (StragglerCheck.java too).
T1, T2 = [b"t1-0", b"t1-1", b"t1-2"], [b"t2-0", b"t2-1"]


def replayed(proxy: RequestProxy, request: Request) -> ErrorCode:
    """The error the broker answers to ``request`` delivered again, on a new connection."""
    _, body = decode_response(request.api_key, request.api_version, proxy.replay(request))
    if request.api_key == PRODUCE:
        return body.responses[0].partition_responses[0].error_code  # type: ignore[no-any-return]
    return body.error_code  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Armed:
    """What the proxy keeps of one transactional id's requests (``arm``)."""

    sent: list[Request]  # every request naming it, as it went through
    produce: Copy  # its first Produce
    end_txn: Copy  # its first EndTxn

    def client_versions(self) -> dict[int, set[int]]:
        """The versions each api key went at, the client's requests only: a Kafka broker verifies a
        transactional Produce with its own AddPartitionsToTxn v4+ (KIP-890), sent to its advertised
        address, so through the proxy too."""
        seen: dict[int, set[int]] = {}
        for r in self.sent:
            if not (r.api_key == ADD_PARTITIONS_TO_TXN and r.api_version >= 4):
                seen.setdefault(r.api_key, set()).add(r.api_version)
        return seen


def arm(proxy: RequestProxy, tid: str, topic: str) -> Armed:
    """Tap the requests naming ``tid``; copy its first Produce (naming ``topic`` too: Produce v13
    names topics by id, so not always) and its first EndTxn."""
    return Armed(proxy.tap(lambda r: r.mentions(tid)),
                 proxy.copy(PRODUCE, lambda r: r.mentions(tid) and (r.api_version >= 13 or r.mentions(topic))),
                 proxy.copy(END_TXN, lambda r: r.mentions(tid)))


def committed(direct: str, topic: str) -> list[bytes | None]:
    with WireClient(direct) as client:
        return visible_values(client, topic, 0, READ_COMMITTED)


def outcome(call: Callable[[], object]) -> str:
    """"ok", or the error's name and what librdkafka makes of it: fatal, abortable or plain."""
    try:
        call()
    except KafkaException as exc:
        error: KafkaError = exc.args[0]
        kind = "fatal" if error.fatal() else "abortable" if error.txn_requires_abort() else "plain"
        return f"{error.name()} ({kind})"
    return "ok"


# -- the proxy ----------------------------------------------------------------------------------


def test_the_proxy_holds_a_request_and_what_follows_it_on_its_connection(proxied: Proxied,
                                                                         unique: Callable[[str], str]) -> None:
    """The proxy itself: an idempotent producer's first Produce is held, and its second, sent behind
    it on the same connection, waits with it; released, both land in order."""
    topic = unique("held")
    make_ready_topic(proxied.direct, topic)
    hold = proxied.proxy.hold(PRODUCE, lambda r: r.mentions(topic))
    acked: list[tuple[bytes, int]] = []
    producer = Producer({"bootstrap.servers": proxied.target.bootstrap_servers, "enable.idempotence": True,
                         "linger.ms": 0})
    try:
        def report(error: KafkaError | None, message: Any) -> None:
            assert error is None, error
            acked.append((message.value(), message.offset()))

        producer.produce(topic, b"a", partition=0, on_delivery=report)
        assert hold.wait(TIMEOUT_S).api_key == PRODUCE
        producer.produce(topic, b"b", partition=0, on_delivery=report)  # the same connection: behind "a"
        assert producer.flush(0.2) == 2, "nothing answered while held"
        with WireClient(proxied.direct) as client:
            assert hw_and_lso(client, topic) == (0, 0), "nothing reached the broker"
        assert proxied.proxy.release() == 1
        assert producer.flush(TIMEOUT_S) == 0
    finally:
        producer.close()
    assert acked == [(b"a", 0), (b"b", 1)] and not hold.expired


# -- the Java client, transactions v2 -------------------------------------------------------------


class JavaProgram:
    """A Java main class on Kafka's classpath that talks in lines: JSON objects out, commands in.
    Its stderr goes to a file; every read is bounded; the JVM is killed on exit."""

    def __init__(self, main: str, args: list[str], stderr: Path) -> None:
        self._stderr = stderr
        with open(stderr, "wb") as err:
            self.proc = subprocess.Popen(java_command(main, args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, text=True)
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="java-stdout", daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line)

    def next(self, timeout: float = 2 * TIMEOUT_S) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no line from the JVM within {timeout}s; its stderr ends:\n"
                                 f"{self._stderr.read_text(errors='replace')[-4000:]}") from None
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def __enter__(self) -> JavaProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait(TIMEOUT_S)


def test_the_java_clients_v2_stragglers_of_the_previous_transaction_are_refused(
        proxied: Proxied, unique: Callable[[str], str], tmp_path: Path) -> None:
    """reference/src/.../StragglerCheck.java: transaction 1 ("t1-0".."t1-2") committed, transaction 2
    ("t2-0", "t2-1") written and open while transaction 1's Produce and EndTxn arrive again."""
    proxy = proxied.proxy
    topic, tid = unique("straggler-java"), unique("tid")
    make_ready_topic(proxied.direct, topic)
    armed = arm(proxy, tid, topic)
    with JavaProgram("dev.onceflow.reference.StragglerCheck", [proxied.target.bootstrap_servers, topic, tid],
                     tmp_path / "java.stderr") as java, WireClient(proxied.direct) as client:
        assert java.next() == {"step": "t2-written"}
        wait_hw_and_lso(client, topic, (6, 4))  # t1 at 0-2, its COMMIT at 3, t2 at 4-5 (open)
        assert replayed(proxy, armed.produce.wait(TIMEOUT_S)) == ErrorCode.invalid_producer_epoch
        assert replayed(proxy, armed.end_txn.wait(TIMEOUT_S)) == ErrorCode.producer_fenced
        assert hw_and_lso(client, topic) == (6, 4), "nothing appended, nothing committed early"
        assert visible_values(client, topic, 0, READ_COMMITTED) == T1
        java.send("commit")
        result = java.next()
        assert (result["t2_end"], result["client_version"]) == ("committed", "4.3.1"), result
        wait_hw_and_lso(client, topic, (7, 7))
        assert visible_values(client, topic, 0, READ_COMMITTED) == T1 + T2
    # Transactions v2: EndTxn v5, and no AddPartitionsToTxn from the client (a Produce v12+ adds the partition).
    client_versions = armed.client_versions()
    assert client_versions[END_TXN] == {5} and ADD_PARTITIONS_TO_TXN not in client_versions, client_versions
    assert min(client_versions[PRODUCE]) >= 12, client_versions


# -- librdkafka, transactions v1 -----------------------------------------------------------------

#: What the producer does with its transaction 1 and transaction 2 around the straggler:
#: "commit": commits 1; 2 was all written before the straggler, then committed;
#: "commit-then-abort": commits 1; 2 was all written before the straggler, then aborted;
#: "commit-then-more": commits 1; 2 produces once more after the straggler, then commits;
#: "abort": aborts 1; 2 was all written before the straggler, then committed.
V1_CASES = ["commit", "commit-then-abort", "commit-then-more", "abort"]


@pytest.mark.parametrize("case", V1_CASES)
def test_a_v1_producers_replayed_end_txn_ends_its_next_transaction(proxied: Proxied, unique: Callable[[str], str],
                                                                  case: str) -> None:
    """confluent-kafka (librdkafka 2.16, transactions v1: EndTxn v1, the epoch kept across
    transactions).  Transaction 1's Produce, replayed, is a duplicate of a sequence already written
    (NONE, nothing appended).  Its EndTxn, replayed, carries the current epoch, so the coordinator
    takes it for transaction 2's and ends transaction 2 with transaction 1's outcome, at once:

    * "commit": transaction 2 is committed before the application commits it (read_committed
      readers see it early); the application's commit then succeeds (a retry, for the coordinator);
    * "commit-then-abort": the same, but the application aborts transaction 2: the abort fails
      (fatal INVALID_TXN_STATE) and the records stay committed: an aborted transaction is read;
    * "commit-then-more": the records produced after the straggler are refused (INVALID_TXN_STATE,
      KIP-890 part 1: the partition is in no transaction), the commit fails (abortable) and the abort
      too (fatal): transaction 2 is torn, its first records committed, the later ones nowhere;
    * "abort": transaction 2 is aborted; the application's commit fails (fatal INVALID_TXN_STATE),
      so it is not told its records are committed.
    """
    proxy = proxied.proxy
    topic, tid = unique("straggler-v1"), unique("tid")
    make_ready_topic(proxied.direct, topic)
    armed = arm(proxy, tid, topic)
    late: list[str] = []
    producer = Producer({"bootstrap.servers": proxied.target.bootstrap_servers, "transactional.id": tid,
                         "linger.ms": 5})
    try:
        producer.init_transactions(TIMEOUT_S)
        producer.begin_transaction()
        for value in T1:
            producer.produce(topic, value, partition=0)
        if case == "abort":
            assert producer.flush(TIMEOUT_S) == 0
            producer.abort_transaction(TIMEOUT_S)
        else:
            producer.commit_transaction(TIMEOUT_S)
        producer.begin_transaction()
        for value in T2:
            producer.produce(topic, value, partition=0)
        assert producer.flush(TIMEOUT_S) == 0
        with WireClient(proxied.direct) as client:
            wait_hw_and_lso(client, topic, (6, 4))  # t1 at 0-2, its marker at 3, t2 at 4-5 (open)
            assert replayed(proxy, armed.produce.wait(TIMEOUT_S)) == ErrorCode.none
            assert hw_and_lso(client, topic) == (6, 4), "the replayed Produce appended nothing"
            assert replayed(proxy, armed.end_txn.wait(TIMEOUT_S)) == ErrorCode.none
            wait_hw_and_lso(client, topic, (7, 7))  # transaction 2 ended by transaction 1's EndTxn
            ended_early = visible_values(client, topic, 0, READ_COMMITTED)
        if case == "commit-then-more":
            producer.produce(topic, b"t2-2", partition=0,
                             on_delivery=lambda error, _message: late.append(error.name() if error else "ok"))
            assert producer.flush(TIMEOUT_S) == 0
        end = producer.abort_transaction if case == "commit-then-abort" else producer.commit_transaction
        first = outcome(lambda: end(TIMEOUT_S))
        then = outcome(lambda: producer.abort_transaction(TIMEOUT_S)) if "abortable" in first else None
    finally:
        with contextlib.suppress(KafkaException):  # a fatal producer's close raises its error again
            producer.close()
    final = committed(proxied.direct, topic)

    expected = {  # (read_committed right after the straggler, the late record, the end, the abort after it, at the end)
        "commit": (T1 + T2, [], "ok", None, T1 + T2),
        "commit-then-abort": (T1 + T2, [], "INVALID_TXN_STATE (fatal)", None, T1 + T2),
        "commit-then-more": (T1 + T2, ["INVALID_TXN_STATE"], "INVALID_TXN_STATE (abortable)", "INVALID_TXN_STATE (fatal)",
                             T1 + T2),
        "abort": ([], [], "INVALID_TXN_STATE (fatal)", None, []),
    }
    assert (ended_early, late, first, then, final) == expected[case]
    client_versions = armed.client_versions()
    assert (client_versions[END_TXN], client_versions[ADD_PARTITIONS_TO_TXN]) == ({1}, {0}), client_versions


# -- the Spark sink ------------------------------------------------------------------------------


def test_the_spark_sinks_fresh_epoch_per_transaction_fences_the_stragglers_of_the_previous_one(
        proxied: Proxied, unique: Callable[[str], str]) -> None:
    """The sink's own task code, without Spark: ``sink.write_exactly_once``, which a Spark task calls
    (``OnceflowStreamWriter.write``), writes micro-batches 0 and 1 of one task partition: a new
    producer and ``init_transactions`` for each (``KafkaTaskIO._fence``), so the same transactional
    id at a new epoch.  Micro-batch 0's Produce and EndTxn arrive again while micro-batch 1's
    transaction is open and has written: both INVALID_PRODUCER_EPOCH, nothing appended or committed
    early, and micro-batch 1 commits as usual.  (librdkafka speaks transactions v1, as above.)"""
    proxy = proxied.proxy
    dst = unique("straggler-sink")
    make_ready_topic(proxied.direct, dst)
    options = parse_sink_options({"kafka.bootstrap.servers": proxied.target.bootstrap_servers, "topic": dst},
                                 streaming=True)
    query = str(uuid.uuid4())
    tid = transactional_id(options.transactional_id_prefix, query, 0)
    armed = arm(proxy, tid, dst)  # micro-batch 0's Produce to the output topic, and its EndTxn
    seen: dict[str, Any] = {}

    def write(batch: int, rows: Iterator[pa.RecordBatch]) -> str:
        return sink.write_exactly_once(rows, TaskIdentity(query, batch, 0, "run", 0, None, batch), options).action

    def batch_1_with_stragglers() -> Iterator[pa.RecordBatch]:
        yield pa.RecordBatch.from_pydict({"value": ["b1-0"]})
        with WireClient(proxied.direct) as client:
            wait_hw_and_lso(client, dst, (4, 3))  # b0 at 0-1, its COMMIT at 2, b1-0 at 3 (open)
            seen["produce"] = replayed(proxy, armed.produce.wait(TIMEOUT_S))
            seen["end_txn"] = replayed(proxy, armed.end_txn.wait(TIMEOUT_S))
            seen["after"] = (hw_and_lso(client, dst), visible_values(client, dst, 0, READ_COMMITTED))
        yield pa.RecordBatch.from_pydict({"value": ["b1-1"]})

    assert write(0, iter([pa.RecordBatch.from_pydict({"value": ["b0-0", "b0-1"]})])) == "written"
    assert write(1, batch_1_with_stragglers()) == "written"
    assert seen == {"produce": ErrorCode.invalid_producer_epoch, "end_txn": ErrorCode.invalid_producer_epoch,
                    "after": ((4, 3), [b"b0-0", b"b0-1"])}
    with WireClient(proxied.direct) as client:
        wait_hw_and_lso(client, dst, (6, 6))  # b1-0, b1-1 at 3-4, their COMMIT at 5
        assert visible_values(client, dst, 0, READ_COMMITTED) == [b"b0-0", b"b0-1", b"b1-0", b"b1-1"]
    assert armed.client_versions()[END_TXN] == {1}, "transactions v1"
