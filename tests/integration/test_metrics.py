"""The metrics port of a real broker process, scraped over HTTP and parsed with prometheus_client's
parser: a known workload's figures, LSO lag as Fetch reports it, group lag to the LSO for
read_committed groups, JSON logs that follow one transaction, and bad HTTP input that never
disturbs the Kafka listener."""

from __future__ import annotations

import json
import select
import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer
from prometheus_client.parser import text_string_to_metric_families

from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.kafka import make_topic, produce, read_all
from tests.support.txn_wire import READ_COMMITTED, READ_UNCOMMITTED, fetch, wait_hw_and_lso
from tests.support.waiting import wait_for
from tests.support.wire import WireClient

TIMEOUT = 30
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module, its metrics on a free port, timeouts swept every 200 ms."""
    proc = BrokerProcess(tmp_path_factory.mktemp("metrics") / "data", {
        **FAST_GROUPS, "metrics.port": "0",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"},
        log_level="DEBUG", log_format="json")
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


def metrics_url(broker: BrokerProcess) -> str:
    return f"http://127.0.0.1:{broker.metrics_port}"


def scrape(broker: BrokerProcess) -> Samples:
    """Every sample of /metrics, keyed by (name, labels)."""
    with urllib.request.urlopen(metrics_url(broker) + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def test_a_known_workload_shows_in_the_metrics(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    make_topic(bs, "ledger", 2)
    before = scrape(broker)
    assert value(before, "onceflow_transaction_coordinator_commits_total") == 0

    producer = Producer({"bootstrap.servers": bs, "transactional.id": "ledger-app"})
    producer.init_transactions(TIMEOUT)
    for i in range(13):  # 10 commits, then 3 aborts
        producer.begin_transaction()
        producer.produce("ledger", f"r{i}".encode(), partition=0)
        producer.flush(TIMEOUT)
        if i < 10:
            producer.commit_transaction(TIMEOUT)
        else:
            producer.abort_transaction(TIMEOUT)
    # One producer goes silent: the coordinator aborts it after its transaction.timeout.ms.
    silent = Producer({"bootstrap.servers": bs, "transactional.id": "goes-silent", "transaction.timeout.ms": 1000})
    silent.init_transactions(TIMEOUT)
    silent.begin_transaction()
    silent.produce("ledger", b"never", partition=0)
    silent.flush(TIMEOUT)
    # And one stays open, on partition 1.
    opened_at = time.time()
    still_open = Producer({"bootstrap.servers": bs, "transactional.id": "still-open"})
    still_open.init_transactions(TIMEOUT)
    still_open.begin_transaction()
    still_open.produce("ledger", b"pending", partition=1)
    still_open.flush(TIMEOUT)
    # A second instance of "ledger-app" fences the first.
    successor = Producer({"bootstrap.servers": bs, "transactional.id": "ledger-app"})
    successor.init_transactions(TIMEOUT)

    wait_for(lambda: value(scrape(broker), "onceflow_transaction_coordinator_timeouts_total") == 1, timeout=20,
             what="the silent producer's transaction to time out")
    wait_for(lambda: value(scrape(broker), "onceflow_transaction_coordinator_aborts_total") == 4, timeout=20,
             what="its abort to complete (markers and Complete record)")
    samples = scrape(broker)
    assert value(samples, "onceflow_transaction_coordinator_commits_total") == 10
    assert value(samples, "onceflow_transaction_coordinator_aborts_total") == 4, "3 by the client, 1 by its timeout"
    assert value(samples, "onceflow_transaction_coordinator_fenced_producers_total") == 1
    assert value(samples, "onceflow_transaction_coordinator_open_transactions") == 1
    age = value(samples, "onceflow_transaction_coordinator_oldest_open_transaction_age_ms")
    assert 0 < age <= (time.time() - opened_at) * 1000 + 100
    assert value(samples, "onceflow_transaction_coordinator_transactional_ids", state="Ongoing") == 1
    assert value(samples, "onceflow_transaction_coordinator_end_to_complete_ms_count") == 14
    assert value(samples, "onceflow_partition_open_transactions", topic="ledger", partition="1") == 1
    assert value(samples, "onceflow_partition_open_transactions", topic="ledger", partition="0") == 0
    part_age = value(samples, "onceflow_partition_oldest_open_transaction_age_ms", topic="ledger", partition="1")
    assert 0 < part_age <= (time.time() - opened_at) * 1000 + 100
    assert ("onceflow_partition_oldest_open_transaction_age_ms",
            frozenset({"topic": "ledger", "partition": "0"}.items())) not in samples
    assert value(samples, "kafka_server_replicamanager_partitionswithlatetransactionscount") == 0
    assert value(samples, "kafka_server_replicamanager_produceridcount") >= 3
    # Requests, by API and by error code (NONE included, as Kafka counts them).
    assert sum(v for (n, lbl), v in samples.items()
               if n == "kafka_network_requestmetrics_requests_total" and ("request", "EndTxn") in lbl) >= 13
    assert value(samples, "kafka_network_requestmetrics_errors_total", request="Produce", error="NONE") >= 15
    assert value(samples, "kafka_network_requestmetrics_totaltimems_count", request="Produce") >= 15
    assert value(samples, "kafka_server_socket_server_metrics_incoming_byte_total") > 0
    assert value(samples, "kafka_server_socket_server_metrics_connection_count") >= 1
    assert value(samples, "kafka_log_logflushstats_logflushrateandtimems_count") > 0
    assert value(samples, "onceflow_group_commit_batch_waiters_count") > 0
    # The log: the silent producer's transaction, followed by its transactional id in the JSON lines.
    lines = [json.loads(line) for line in broker.log().splitlines() if line.startswith("{")]
    silent_life = [e["message"] for e in lines if e.get("transactional_id") == "goes-silent"]
    for step in ("Empty -> Ongoing", "Ongoing -> PrepareAbort", "aborting transaction", "writing ABORT markers",
                 "PrepareAbort -> CompleteAbort"):
        assert any(step in m for m in silent_life), (step, silent_life)
    still_open.abort_transaction(TIMEOUT)


def test_lso_lag_is_hw_minus_lso_as_fetch_reports_them(broker: BrokerProcess) -> None:
    bs = broker.bootstrap_servers
    make_topic(bs, "lagging", 1)
    produce(bs, "lagging", [b"a", b"b"], partition=0)
    holder = Producer({"bootstrap.servers": bs, "transactional.id": "holds-the-lso"})
    holder.init_transactions(TIMEOUT)
    holder.begin_transaction()
    holder.produce("lagging", b"open", partition=0)
    holder.flush(TIMEOUT)
    produce(bs, "lagging", [b"c", b"d", b"e"], partition=0)
    with WireClient(bs) as client:
        view = fetch(client, "lagging", 0, READ_COMMITTED)
        samples = scrape(broker)
        assert (view.high_watermark, view.last_stable_offset) == (6, 2)
        labels = {"topic": "lagging", "partition": "0"}
        assert value(samples, "onceflow_partition_high_watermark", **labels) == view.high_watermark
        assert value(samples, "onceflow_partition_last_stable_offset", **labels) == view.last_stable_offset
        assert value(samples, "onceflow_partition_lso_lag", **labels) == view.high_watermark - view.last_stable_offset
        assert value(samples, "kafka_log_log_logendoffset", **labels) == 6
        assert value(samples, "kafka_log_log_logstartoffset", **labels) == 0
        assert value(samples, "kafka_log_log_numlogsegments", **labels) == 1
        assert value(samples, "kafka_log_log_size", **labels) > 0
        holder.commit_transaction(TIMEOUT)
        wait_hw_and_lso(client, "lagging", (7, 7))
        assert value(scrape(broker), "onceflow_partition_lso_lag", **labels) == 0


def _consumer(bs: str, group: str, isolation: str) -> Consumer:
    return Consumer({"bootstrap.servers": bs, "group.id": group, "client.id": f"{group}-client",
                     "isolation.level": isolation, "auto.offset.reset": "earliest", "enable.auto.commit": False})


def _consume_to_end(consumer: Consumer, expected: int) -> None:
    got = 0
    deadline = time.monotonic() + TIMEOUT
    while got < expected and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got += 1
    assert got == expected, f"read {got} of {expected}"
    consumer.commit(asynchronous=False)


def test_group_lag_is_measured_to_the_lso_for_read_committed_groups(broker: BrokerProcess) -> None:
    """kafka-ui's and klag-exporter's bug: lag to the high watermark for a read_committed group
    counts records an open transaction hides from it, lag it can never catch up on."""
    bs = broker.bootstrap_servers
    make_topic(bs, "payments", 1)
    produce(bs, "payments", [b"p1", b"p2", b"p3"], partition=0)
    holder = Producer({"bootstrap.servers": bs, "transactional.id": "payments-writer"})
    holder.init_transactions(TIMEOUT)
    holder.begin_transaction()
    holder.produce("payments", b"in-flight", partition=0)
    holder.produce("payments", b"in-flight-2", partition=0)
    holder.flush(TIMEOUT)
    committed_reader = _consumer(bs, "reader-rc", "read_committed")
    plain_reader = _consumer(bs, "reader-ru", "read_uncommitted")
    try:
        committed_reader.subscribe(["payments"])
        plain_reader.subscribe(["payments"])
        _consume_to_end(committed_reader, 3)
        _consume_to_end(plain_reader, 5)

        def lag(samples: Samples, group: str, isolation: str) -> float:
            return value(samples, "kafka_consumergroup_lag", consumergroup=group, topic="payments", partition="0",
                         isolation_level=isolation)

        samples = scrape(broker)
        assert lag(samples, "reader-rc", "read_committed") == 0, "caught up with everything it may read"
        assert lag(samples, "reader-ru", "read_uncommitted") == 0
        assert value(samples, "kafka_consumergroup_current_offset", consumergroup="reader-rc", topic="payments",
                     partition="0") == 3
        assert value(samples, "kafka_consumergroup_members", consumergroup="reader-rc") == 1
        assert value(samples, "onceflow_group_state", consumergroup="reader-rc", type="classic", state="Stable") == 1
        assert value(samples, "onceflow_partition_lso_lag", topic="payments", partition="0") == 2
        with urllib.request.urlopen(metrics_url(broker) + "/api/state", timeout=10) as response:
            state = json.loads(response.read())
        [rc] = [g for g in state["groups"] if g["group_id"] == "reader-rc"]
        assert (rc["isolation_level"], rc["isolation_observed"], rc["partitions"][0]["end"]) == ("read_committed", True, 3)
        holder.commit_transaction(TIMEOUT)
        wait_for(lambda: lag(scrape(broker), "reader-rc", "read_committed") == 3, timeout=20,
                 what="the committed records (and the marker) to count as lag")
    finally:
        committed_reader.close()
        plain_reader.close()


# -- bad input to the HTTP port -----------------------------------------------------------


def _http_raw(port: int, data: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        if not read:
            return b""
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_bad_http_input_does_not_disturb_the_kafka_listener(broker: BrokerProcess) -> None:
    port = broker.metrics_port
    assert port is not None
    bs = broker.bootstrap_servers
    make_topic(bs, "steady", 1)
    with pytest.raises(urllib.error.HTTPError) as missing:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/nothing-here", timeout=10)
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as wrong_method:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x"), timeout=10)
    assert wrong_method.value.code == 405
    huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    assert _http_raw(port, huge).startswith(b"HTTP/1.1 431")
    assert _http_raw(port, b"\x00\x01garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    body = b"{" + b" " * 10_000 + b"}"
    too_big = (b"POST /api/abort HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
               + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert _http_raw(port, too_big).startswith(b"HTTP/1.1 413")
    # Slow clients holding every connection the port serves: the Kafka listener does not notice.
    slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(80)]
    try:
        for sock in slow:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")  # and never the end of the headers
        produce(bs, "steady", [b"one", b"two"], partition=0)
        assert read_all(bs, "steady", [0], "read_committed") == [b"one", b"two"]
    finally:
        for sock in slow:
            sock.close()
    wait_for(lambda: _metrics_answer(broker), timeout=20, what="the metrics port to serve again")
    with WireClient(bs) as client:
        assert fetch(client, "steady", 0, READ_UNCOMMITTED).high_watermark == 2
    assert broker.alive()
    assert "bad request" in broker.log() and "431" in broker.log()


def _metrics_answer(broker: BrokerProcess) -> bool:
    try:
        return bool(scrape(broker))
    except (OSError, urllib.error.URLError):
        return False


def test_metrics_are_off_by_default_and_slow_clients_are_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    from onceflow.broker.embedded import EmbeddedBroker
    from onceflow.metrics import http

    with EmbeddedBroker() as plain:
        assert plain.broker.metrics is None
        with pytest.raises(RuntimeError, match="metrics are off"):
            _ = plain.metrics_url
    monkeypatch.setattr(http, "REQUEST_TIMEOUT_S", 0.3)
    with EmbeddedBroker(**{"metrics.port": 0}) as embedded:
        port = _port(embedded)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n")  # a request begun, never finished
            started = time.monotonic()
            assert sock.recv(100) == b"", "closed by the server"
            assert time.monotonic() - started < 5
        with urllib.request.urlopen(embedded.metrics_url + "metrics", timeout=10) as response:
            assert response.status == 200


def test_pipelines_show_each_slots_last_committed_micro_batch_not_an_aborted_attempt() -> None:
    """A progress topic's tail holds aborted attempts and markers: the console reads past them."""
    from onceflow.broker.embedded import EmbeddedBroker
    from onceflow.metrics import views
    from onceflow.spark.protocol import SlotRecord, TaskIdentity, progress_topic

    with EmbeddedBroker(**{"metrics.port": 0}) as embedded:
        bs = embedded.bootstrap_servers
        topic = progress_topic("q-1")
        make_topic(bs, topic, 2, **{"cleanup.policy": "compact"})
        writer = Producer({"bootstrap.servers": bs, "transactional.id": "sink-q-1"})
        writer.init_transactions(TIMEOUT)

        def slot_record(slot: int, batch: int, commit: bool) -> None:
            record = SlotRecord(slot).write(TaskIdentity("q-1", batch, slot, "run-1"), rows=10 + batch,
                                            fingerprint="f", prefix="onceflow-sink")
            writer.begin_transaction()
            writer.produce(topic, record.encode(), record.key(), partition=slot)
            writer.flush(TIMEOUT)
            writer.commit_transaction(TIMEOUT) if commit else writer.abort_transaction(TIMEOUT)

        for batch in range(4):
            slot_record(0, batch, True)
        slot_record(1, 0, True)
        slot_record(1, 1, True)
        slot_record(0, 4, False)  # an aborted attempt at batch 4, and its marker, after slot 0's record
        slot_record(1, 2, False)
        [pipeline] = embedded.call(views.pipelines, embedded.broker)
        assert (pipeline.query, pipeline.last_batch) == ("q-1", 3)
        assert [(s.slot, s.batch, s.rows, s.lag) for s in pipeline.slots] == [(0, 3, 13, 0), (1, 1, 11, 2)]
        samples = {(s.name, s.labels.get("slot")): s.value for family in text_string_to_metric_families(
            urllib.request.urlopen(embedded.metrics_url + "metrics", timeout=10).read().decode())
            for s in family.samples if s.name.startswith("onceflow_pipeline_")}
        assert samples == {("onceflow_pipeline_slot_batch", "0"): 3, ("onceflow_pipeline_slot_batch", "1"): 1,
                           ("onceflow_pipeline_slot_lag_batches", "0"): 0, ("onceflow_pipeline_slot_lag_batches", "1"): 2}
        # Anyone may write to a topic of that name: what is not a slot record is shown as such.
        make_topic(bs, progress_topic("junk"), 3)
        for slot, value in enumerate([b'{"written": 5}', b'{"written": {"batch": "7"}}', b"\xff not json"]):
            produce(bs, progress_topic("junk"), [value], partition=slot)
        with urllib.request.urlopen(embedded.metrics_url + "metrics", timeout=10) as response:
            assert response.status == 200
        [junk] = [p for p in embedded.call(views.pipelines, embedded.broker) if p.query == "junk"]
        assert [(s.batch, s.refused) for s in junk.slots] == [(None, "not a slot record")] * 3


def _port(embedded: Any) -> int:
    """The metrics port of an EmbeddedBroker started with metrics.port=0."""
    assert embedded.broker.metrics is not None
    return int(embedded.broker.metrics.port)


def _request(port: int, data: bytes) -> bytes:
    """One request on its own connection (Connection: close), the whole answer."""
    return _http_raw(port, data)


def test_http_details_head_gzip_absolute_form_continue_and_foreign_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    import gzip

    from onceflow.broker.embedded import EmbeddedBroker
    from onceflow.metrics import http

    monkeypatch.setattr(http, "REQUEST_TIMEOUT_S", 0.5)
    with EmbeddedBroker(**{"metrics.port": 0, "console.allow.abort": True}) as embedded:
        port = _port(embedded)
        host = f"Host: 127.0.0.1:{port}\r\n".encode()
        head = _request(port, b"HEAD /metrics HTTP/1.1\r\n" + host + b"Connection: close\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200") and head.endswith(b"\r\n\r\n"), head[-200:]
        zipped = _request(port, b"GET /metrics HTTP/1.1\r\n" + host + b"Accept-Encoding: gzip\r\nConnection: close\r\n\r\n")
        assert b"content-encoding: gzip" in zipped.lower()
        assert b"kafka_network_requestmetrics" in gzip.decompress(zipped.split(b"\r\n\r\n", 1)[1])
        absolute = _request(port, f"GET http://127.0.0.1:{port}/api/state HTTP/1.1\r\n".encode() + host
                            + b"Connection: close\r\n\r\n")
        assert absolute.startswith(b"HTTP/1.1 200") and b'"transactions"' in absolute
        body = b'{"topic": "t", "partition": 0, "producer_id": 1}'
        expect = _request(port, b"POST /api/abort HTTP/1.1\r\n" + host + b"Content-Type: application/json\r\n"
                          b"Expect: 100-continue\r\nConnection: close\r\nContent-Length: " + str(len(body)).encode()
                          + b"\r\n\r\n" + body)
        assert expect.startswith(b"HTTP/1.1 100") and b"HTTP/1.1 409" in expect, expect[:300]
        # A DNS-rebinding page names another host: the console and its API do not answer it.
        rebound = _request(port, b"GET /api/state HTTP/1.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
        assert rebound.startswith(b"HTTP/1.1 421")
        foreign = _request(port, b"POST /api/abort HTTP/1.1\r\n" + host + b"Origin: http://evil.example\r\n"
                           b"Content-Type: application/json\r\nConnection: close\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\n\r\n" + body)
        assert foreign.startswith(b"HTTP/1.1 403")
        # A client trickling its headers is cut off REQUEST_TIMEOUT_S after its first byte.
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            started = time.monotonic()
            closed = False
            for piece in b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"y" * 60:
                try:
                    sock.sendall(bytes([piece]))
                except OSError:
                    closed = True
                    break
                ready, _, _ = select.select([sock], [], [], 0.05)
                if ready and sock.recv(100) == b"":
                    closed = True
                    break
            assert closed and time.monotonic() - started < 3, "the trickling client was not cut off"
        assert len(embedded.broker.metrics.connections) == 0 if embedded.broker.metrics else True


def test_the_console_aborts_only_a_hanging_transaction_never_a_live_one() -> None:
    """An abort of a transaction a live producer still owns would tear it: its other partitions commit."""
    from onceflow.broker.embedded import EmbeddedBroker

    with EmbeddedBroker(**{"metrics.port": 0, "console.allow.abort": True}) as embedded:
        bs = embedded.bootstrap_servers
        make_topic(bs, "accounts", 2)
        live = Producer({"bootstrap.servers": bs, "transactional.id": "transfer"})
        live.init_transactions(TIMEOUT)
        live.begin_transaction()
        live.produce("accounts", b"debit", partition=0)
        live.produce("accounts", b"credit", partition=1)
        live.flush(TIMEOUT)
        [txn] = json.loads(urllib.request.urlopen(embedded.metrics_url + "api/state", timeout=10).read())["transactions"]
        assert txn["transactional_id"] == "transfer" and txn["hanging"] is None
        request = urllib.request.Request(embedded.metrics_url + "api/abort", method="POST",
                                         headers={"Content-Type": "application/json"},
                                         data=json.dumps({"topic": "accounts", "partition": 0,
                                                          "producer_id": txn["producer_id"]}).encode())
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=30)
        assert refused.value.code == 409 and b"no hanging transaction" in refused.value.read()
        live.commit_transaction(TIMEOUT)
        assert sorted(read_all(bs, "accounts", [0, 1], "read_committed")) == [b"credit", b"debit"]
