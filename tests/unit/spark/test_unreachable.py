"""A cluster that does not answer: the driver says so within ``kafka.default.api.timeout.ms``,
naming the bootstrap servers, before any data moves.  A real loopback port with nothing behind
it; no Spark, no broker."""

from __future__ import annotations

import time

import pytest

from onceflow.broker.process import free_port
from onceflow.spark import sink
from onceflow.spark.kafka import KafkaAdmin
from onceflow.spark.options import OptionError, Subscribe, parse_sink_options, parse_source_options


def test_the_api_timeout_is_kafkas_setting_and_never_reaches_librdkafka() -> None:
    options = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": "t", "kafka.default.api.timeout.ms": "1500"},
                                 streaming=True)
    assert options.api_timeout_ms == 1500 and "default.api.timeout.ms" not in options.kafka_params
    assert parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t"}, streaming=True).api_timeout_ms == 60_000
    with pytest.raises(OptionError, match=r"kafka.default.api.timeout.ms.*positive integer") as caught:
        parse_source_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.default.api.timeout.ms": "0"},
                             streaming=False)
    assert caught.value.option == "kafka.default.api.timeout.ms"


def test_a_sink_facing_no_broker_fails_naming_the_address_within_the_timeout() -> None:
    address = f"127.0.0.1:{free_port()}"
    options = parse_sink_options({"kafka.bootstrap.servers": address, "topic": "t", "kafka.default.api.timeout.ms": "2000"},
                                 streaming=False)
    started = time.monotonic()
    with pytest.raises(OptionError, match=f"no Kafka broker answered at {address} within 2 s .*the client.s last error: .*Connection refused") as caught:
        sink.check_client_settings(options)
    assert caught.value.option == "kafka.bootstrap.servers"
    assert time.monotonic() - started < 20  # 2 s of retries, then the last attempt's own bound


def test_a_source_facing_no_broker_fails_naming_the_address_within_the_timeout() -> None:
    address = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    with pytest.raises(Exception, match=f"kafka.bootstrap.servers={address}: no answer within 2 s"):
        KafkaAdmin(address, {}, 2.0).partitions(Subscribe(("t",)))
    assert time.monotonic() - started < 20
