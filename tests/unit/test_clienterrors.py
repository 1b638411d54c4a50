"""One line per client failure (onceflow.clienterrors): Kafka errors from both client libraries
read ``NAME (code N): message``; a cluster out of reach is named with the reason at once."""

from __future__ import annotations

import socket
import time

import kafka.errors
import pytest
from confluent_kafka import KafkaError, KafkaException

from onceflow.clienterrors import ClientLog, Unreachable, check_reachable, error_line, kafka_error_text


def test_confluent_and_kafka_python_errors_read_alike() -> None:
    confluent = KafkaError(3, "Broker: Unknown topic or partition")
    assert kafka_error_text(confluent) == "UNKNOWN_TOPIC_OR_PARTITION (code 3): Unknown topic or partition"
    assert error_line(KafkaException(confluent)) == kafka_error_text(confluent)
    python = kafka.errors.UnknownTopicOrPartitionError()
    assert kafka_error_text(python) == ("UNKNOWN_TOPIC_OR_PARTITION (code 3): "
                                        "This request is for a topic or partition that does not exist on this broker.")
    assert kafka_error_text(kafka.errors.UnknownTopicOrPartitionError("no such topic: x")) == (
        "UNKNOWN_TOPIC_OR_PARTITION (code 3): no such topic: x")
    assert error_line(python) == kafka_error_text(python)
    local = KafkaError(KafkaError._TRANSPORT)
    assert kafka_error_text(local).startswith("_TRANSPORT (code -195)")


def test_other_failures_keep_their_type_unless_they_are_ours() -> None:
    assert error_line(ValueError("bad\nthing")) == "ValueError: bad thing"
    assert error_line(Unreachable("cannot reach a:1: connection refused")) == "cannot reach a:1: connection refused"
    assert error_line(TimeoutError()) == "timed out"


def _refused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed on return: nothing listens there


def test_a_refused_address_is_named_at_once() -> None:
    port = _refused_port()
    started = time.monotonic()
    with pytest.raises(Unreachable) as raised:
        check_reachable(f"127.0.0.1:{port},PLAINTEXT://127.0.0.1:{port}", timeout=10)
    assert time.monotonic() - started < 5
    assert str(raised.value) == f"cannot reach 127.0.0.1:{port}: connection refused; 127.0.0.1:{port}: connection refused"


def test_one_listening_address_is_enough() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        check_reachable(f"127.0.0.1:{_refused_port()},127.0.0.1:{port}", timeout=5)


def test_an_unknown_host_is_said_to_be_unknown() -> None:
    with pytest.raises(Unreachable, match=r"nowhere\.invalid:9092: unknown host"):
        check_reachable("nowhere.invalid:9092", timeout=5)


def test_the_client_log_keeps_the_first_connection_error_and_counts_the_rest() -> None:
    log = ClientLog()
    settings = log.settings()
    settings["error_cb"](KafkaError(KafkaError._TRANSPORT, "127.0.0.1:1/bootstrap: Connect failed"))
    settings["error_cb"](KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    settings["logger"].warning("FAIL [thrd:bootstrap]: Connect failed")
    assert log.connection_error() == "_TRANSPORT (code -195): 127.0.0.1:1/bootstrap: Connect failed"
    assert log.explain("no answer within 2s") == (
        "no answer within 2s (_TRANSPORT (code -195): 127.0.0.1:1/bootstrap: Connect failed)")
    assert log.summary() == "(2 client errors and 1 client log line hidden; --log-level DEBUG shows them)"
    assert ClientLog(debug=True).summary() is None
