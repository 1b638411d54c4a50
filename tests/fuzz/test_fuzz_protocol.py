"""Fuzzing the frame decoder and the request dispatcher with hypothesis.

Two levels:
* the sans-I/O core alone: any bytes give frames, NEED_DATA or a ProtocolError,
  never another exception;
* the real broker (embedded, on its own loop thread): random bytes and
  truncated / mutated valid requests of many APIs are fed through the same
  ``KafkaProtocol`` the server uses, on an in-memory transport.  No handler may
  raise (a raise would be logged at ERROR and close the connection), and
  afterwards the broker still serves real clients over a real socket with the
  data it held before.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from onceflow import EmbeddedBroker
from onceflow.protocol.errors import ProtocolError
from onceflow.protocol.framing import NEED_DATA, FrameReader, parse_request
from tests.fuzz.corpus import TOPIC, ErrorLog, MemoryTransport, corpus, every_request, settle
from tests.support.broker import FAST_GROUPS
from tests.support.kafka import consume_all, make_topic
from tests.support.kafka import produce as produce_records
from tests.support.waiting import wait_for

#: More examples for a deeper run: ONCEFLOW_FUZZ_EXAMPLES=5000 make fuzz
EXAMPLES = int(os.environ.get("ONCEFLOW_FUZZ_EXAMPLES", "250"))


# -- the sans-I/O core --------------------------------------------------------


@settings(max_examples=EXAMPLES, deadline=None)
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_frame_reader_and_parser_accept_any_bytes(data: bytes, chunk: int) -> None:
    reader = FrameReader(1024)
    try:
        for i in range(0, len(data), chunk):
            reader.receive_data(data[i : i + chunk])
            while (frame := reader.next_frame()) is not NEED_DATA:
                parse_request(frame)  # type: ignore[arg-type]
    except ProtocolError:
        pass


# -- the dispatcher on the real broker ----------------------------------------


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with EmbeddedBroker(tmp_path_factory.mktemp("fuzz"), config=FAST_GROUPS) as broker:
        make_topic(broker.bootstrap_servers, TOPIC, 1)
        produce_records(broker.bootstrap_servers, TOPIC, [b"before-%d" % i for i in range(10)], partition=0)
        errors = ErrorLog()
        logging.getLogger("onceflow").addHandler(errors)
        try:
            topic_id = broker.broker.registry.topics[TOPIC].topic_id
            yield broker, errors, corpus(topic_id) + every_request(topic_id)
        finally:
            logging.getLogger("onceflow").removeHandler(errors)


#: How long a connection's requests may take before ``feed`` drops the connection.
FEED_S = 0.5


def feed(broker: EmbeddedBroker, payload: bytes) -> None:
    """Feed bytes to a fresh connection on the broker's loop, let it answer what it will (for
    at most ``FEED_S``), then drop it."""
    from onceflow.broker.server import KafkaProtocol

    inner = broker.broker

    def connect() -> tuple[KafkaProtocol, Any]:
        proto = KafkaProtocol(inner.dispatch, inner._unknown_api_versions, inner.state, 1 << 20, 50)
        proto.connection_made(MemoryTransport())
        proto.data_received(payload)
        return proto, asyncio.get_running_loop()

    proto, loop = broker.call(connect)
    asyncio.run_coroutine_threadsafe(settle(proto, FEED_S), loop).result(timeout=30)
    broker.call(proto.connection_lost, None)


def mutate(data: bytes, draw: Any) -> bytes:
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["flip", "truncate", "insert", "delete"]))
        if not out:
            break
        pos = draw(st.integers(0, len(out) - 1))
        if kind == "flip":
            out[pos] ^= draw(st.integers(1, 255))
        elif kind == "truncate":
            del out[pos:]
        elif kind == "insert":
            out[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        else:
            del out[pos : pos + draw(st.integers(1, 8))]
    return bytes(out)


@st.composite
def hostile_stream(draw: Any, valid: list[bytes]) -> bytes:
    pieces = []
    for _ in range(draw(st.integers(1, 3))):
        choice = draw(st.sampled_from(["random", "mutated", "mutated-reframed", "valid"]))
        if choice == "random":
            body = draw(st.binary(max_size=200))
            pieces.append(struct.pack(">i", len(body)) + body if draw(st.booleans()) else body)
        else:
            frame = draw(st.sampled_from(valid))
            if choice == "valid":
                pieces.append(frame)
            elif choice == "mutated":
                pieces.append(mutate(frame, draw))
            else:
                body = mutate(frame[4:], draw)
                pieces.append(struct.pack(">i", len(body)) + body)
    return b"".join(pieces)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_dispatcher_survives_hostile_requests(fuzz_broker: Any, data: Any) -> None:
    broker, errors, valid = fuzz_broker
    payload = data.draw(hostile_stream(valid))
    feed(broker, payload)
    assert not errors.records, "\n".join(errors.records)


def test_broker_still_serves_after_fuzzing(fuzz_broker: Any) -> None:
    broker, errors, valid = fuzz_broker
    for frame in valid:  # every valid request, once more, answers without error
        feed(broker, frame)
    assert not errors.records, "\n".join(errors.records)
    bs = broker.bootstrap_servers
    got = wait_for(lambda: consume_all(bs, TOPIC, [0], 10), what="the topic's first records")
    assert [v for _, _, v in got[:10]] == [b"before-%d" % i for i in range(10)]
