"""A cluster that does not answer: a batch write says so within ``kafka.default.api.timeout.ms``,
naming the bootstrap servers, before any data moves; a streaming sink only logs it (PySpark makes
the sink again at every micro-batch's commit); the source's driver names the servers when its
retries run out.  A real loopback port, bound and not listening (every connection refused, and
nothing else can take it); no Spark, no broker."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from onceflow.spark import progress, sink
from onceflow.spark.kafka import CLIENT_LOG, KafkaAdmin, read_range
from onceflow.spark.options import OptionError, Subscribe, parse_sink_options, parse_source_options


@pytest.fixture
def nobody() -> Iterator[str]:
    """An address where connections are refused for as long as the test runs."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))  # bound, never listening: connect() gets ECONNREFUSED
        yield f"127.0.0.1:{held.getsockname()[1]}"


def _sink(address: str, **more: str) -> sink.SinkOptions:
    return parse_sink_options({"kafka.bootstrap.servers": address, "topic": "t", "kafka.default.api.timeout.ms": "2000",
                               **more}, streaming=False)


def test_the_api_timeout_is_kafkas_setting_and_never_reaches_librdkafka() -> None:
    options = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.default.api.timeout.ms": "1500"},
                                 streaming=True)
    assert options.api_timeout_ms == 1500 and "default.api.timeout.ms" not in options.kafka_params
    assert parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True).api_timeout_ms == 60_000
    for bad in ("0", "-5", "x", str(2**31)):
        with pytest.raises(OptionError, match=r"kafka.default.api.timeout.ms.*from 1 to 2147483647") as caught:
            parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.default.api.timeout.ms": bad},
                                 streaming=False)
        assert caught.value.option == "kafka.default.api.timeout.ms"


def test_a_batch_write_facing_no_broker_fails_naming_the_address_within_the_timeout(nobody: str) -> None:
    started = time.monotonic()
    with pytest.raises(OptionError, match=f"no Kafka broker answered at {nobody} within 2 s; the client's last log "
                                          "line: .*Connection refused") as caught:
        sink.check_client_settings(_sink(nobody), require_cluster=True)
    assert caught.value.option == "kafka.bootstrap.servers"
    assert time.monotonic() - started < 30  # 2 s of retries, then the last attempt's own bound


def test_a_streaming_at_least_once_sink_does_not_ask_the_cluster(nobody: str) -> None:
    started = time.monotonic()
    sink.check_client_settings(_sink(nobody, deliveryGuarantee="at-least-once"))  # no error: nothing to check
    assert time.monotonic() - started < 5


def test_a_source_facing_no_broker_fails_naming_the_address_when_its_retries_run_out(nobody: str) -> None:
    started = time.monotonic()
    with pytest.raises(Exception, match=f"kafka.bootstrap.servers={nobody}: still failing after 2 s"):
        KafkaAdmin(nobody, {}, 2.0, name_servers=True).partitions(Subscribe(("t",)))
    assert time.monotonic() - started < 30


def test_a_batch_read_with_no_partition_reads_pysparks_placeholder_as_no_rows() -> None:
    from pyspark.sql.datasource import InputPartition

    from onceflow.spark.source import OnceflowBatchReader, OnceflowStreamReader

    options = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False)
    assert list(OnceflowBatchReader(options).read(InputPartition(None))) == []
    with pytest.raises(AssertionError):  # anything else is not for a batch reader to guess at
        list(OnceflowBatchReader(options).read(InputPartition(3)))
    streaming = parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True)
    with pytest.raises(AssertionError):  # PySpark never plans a placeholder for a micro-batch
        list(OnceflowStreamReader(streaming).read(InputPartition(None)))


def _console_lines(capfd: pytest.CaptureFixture[str]) -> list[str]:
    return capfd.readouterr().err.splitlines()


def test_no_client_prints_librdkafkas_reconnect_lines_yet_the_errors_still_say_why(
        nobody: str, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    """Each client of the connector, against a closed port, for about two seconds: librdkafka logs
    every reconnect (about twenty lines a second printed, before), now kept off the console and at
    DEBUG on ``onceflow.spark.librdkafka``; the errors quote the client's last line."""
    caplog.set_level("DEBUG", CLIENT_LOG.name)
    _console_lines(capfd)
    with pytest.raises(Exception, match=f"kafka.bootstrap.servers={nobody}: still failing after 2 s: .*; the client's "
                                        "last log line: .*Connection refused"):
        KafkaAdmin(nobody, {}, 2.0, name_servers=True).partitions(Subscribe(("t",)))  # the source's driver
    with pytest.raises(TimeoutError, match=f"from {nobody}: no progress for 2 s; the client's last log line: "
                                           ".*Connection refused"):  # a source task
        list(read_range(nobody, {}, "g", "t", 0, 0, 10, include_headers=False, fail_on_data_loss=True, timeout_s=2))
    options = _sink(nobody)
    producers = [sink.Producer(sink._producer_config(options, "tid")), sink.Producer(sink._at_least_once_config(options))]
    consumer = progress._consumer(nobody, {})  # the progress topic's reader, kept per process
    deadline = time.monotonic() + 2
    while time.monotonic() < deadline:
        for producer in producers:
            producer.poll(0.1)
        consumer.consume(1, 0.1)
    lines = _console_lines(capfd)
    assert len(lines) <= 3, lines
    logged = [r for r in caplog.records if r.name == CLIENT_LOG.name]
    assert logged and all(r.levelname == "DEBUG" for r in logged)
    assert any("Connection refused" in r.getMessage() for r in logged)
