"""Harness: the request dispatcher, on the real broker.

The broker (``onceflow.broker.broker.Broker``, data in a temporary directory) runs on this
process's own event loop.  Each input is one new connection: a ``KafkaProtocol`` on an
in-memory transport, fed the input's bytes; the loop then runs until every request of the
connection has been answered (or ``FEED_S`` has passed: long polls), and the connection is
dropped, as a client hanging up.

Input: a mode byte, then either the raw byte stream (mode bit 0 clear) or a sequence of
``[u16 length][request]`` chunks that are each sent as one frame with a correct size prefix
(bit 0 set), so mutations of a request's header and body are not lost to a broken size; with
bit 1 also set, the record batches of a Produce request get their CRCs computed, so mutated
batches reach the log, and the reads that meet them later.
Seeds: a request of every supported API at every version (``corpus.every_request``) and the
hand-written ones, alone and in pipelined pairs.

Properties: nothing is logged at ERROR (a handler that raises is logged so, and closes its
connection: a crash); the bytes written back are whole response frames.  Every
``CHECK_EVERY`` inputs and after the last one: every hand-written request still gets its
answer, the ten batches written before fuzzing are byte-identical in the topic's first
segment, and nothing was created outside the data directory.

    python -m tests.fuzz.atheris.dispatcher -runs=250000 -seed=1 [corpus directories...]
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import shutil
import struct
import sys
import time
from collections import Counter

from tests.fuzz.atheris.common import fuzz, instrument, scratch_dir

with instrument():
    from onceflow.broker.broker import Broker
    from onceflow.broker.server import KafkaProtocol
    from onceflow.config import BrokerConfig
    from onceflow.protocol import apis
    from onceflow.protocol.errors import ProtocolError
    from onceflow.protocol.framing import Request, parse_request
    from onceflow.records.builder import build_batch

from tests.fuzz.corpus import TOPIC, MemoryTransport, corpus, every_request, quiet_onceflow_logs, settle, split_frames, with_crc
from tests.support.broker import FAST_GROUPS
from tests.support.wire import encode_request, produce_request

#: How long one connection's requests may take before it is dropped (long polls, rebalances).
FEED_S = 0.1
CHECK_EVERY = 2000
#: Frames up to 1 MiB: a fuzzed size prefix must not make every input allocate 100 MB.
SETTINGS = {**FAST_GROUPS, "socket.request.max.bytes": str(1 << 20)}
_TOPIC_DIR = re.compile(r"^[A-Za-z0-9._-]+-[0-9]+$")


class LoopBroker:
    """The broker on this thread's event loop, driven one connection at a time."""

    def __init__(self) -> None:
        self.root = scratch_dir("onceflow-fuzz-dispatcher-")
        self.data_dir = self.root / "data"
        self.errors = quiet_onceflow_logs()
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.broker = Broker(BrokerConfig(SETTINGS), self.data_dir, "127.0.0.1", 0)
        self.loop.run_until_complete(self.broker.start())
        self.broker.create_topic(TOPIC, 1, {})
        self.topic_id = self.broker.registry.topics[TOPIC].topic_id
        now = int(time.time() * 1000)
        for i in range(10):
            written = self.feed(encode_request(produce_request(TOPIC, build_batch([(None, b"before-%d" % i)], now)), i + 1))
            assert len(split_frames(written)) == 1, "a produce before fuzzing went unanswered"
        segment = self.broker.registry.topics[TOPIC].partitions[0].segments[0]
        self.before = segment.read(0, segment.size)
        assert len(self.before) > 0
        self.valid = corpus(self.topic_id)
        #: Requests still unanswered when their connection was dropped, by API (printed at each check).
        self.waited: Counter[str] = Counter()

    def feed(self, payload: bytes) -> bytes:
        """One connection: send ``payload``, let its requests finish, hang up; what was written back."""
        return self.loop.run_until_complete(self._connection(payload))

    async def _connection(self, payload: bytes) -> bytes:
        broker = self.broker
        transport = MemoryTransport()
        proto = KafkaProtocol(broker.dispatch, broker._unknown_api_versions, broker.state, int(SETTINGS["socket.request.max.bytes"]), 50)
        proto.connection_made(transport)
        proto.data_received(payload)
        await settle(proto, FEED_S)
        for slot in proto._slots:  # still waiting when the connection is dropped: a long poll, or a stuck request
            if slot.request is not None and slot.future is not None and not slot.future.done():
                self.waited[f"{slot.request.name} v{slot.request.api_version}"] += 1
        proto.connection_lost(None)
        await asyncio.sleep(0)  # cancelled waits unwind
        return bytes(transport.written)

    def assert_no_errors(self, what: str) -> None:
        if self.errors.records:
            records, self.errors.records = self.errors.records, []
            raise AssertionError(f"logged at ERROR after {what}:\n" + "\n".join(records))

    def check(self) -> None:
        """The broker still answers every hand-written request, and the data from before is intact."""
        print(f"onceflow-fuzz: unanswered after {FEED_S} s so far: {dict(self.waited.most_common(6))}", file=sys.stderr, flush=True)
        for frame in self.valid:
            written = self.feed(frame)
            responses = split_frames(written)
            assert len(responses) == 1 and len(b"".join(responses)) == len(written), \
                f"request {frame[4:8].hex()} got {len(responses)} responses ({len(written)} bytes)"
            assert responses[0][4:8] == frame[8:12], "the response's correlation id is not the request's"
        self.assert_no_errors("the valid requests")
        topic = self.broker.registry.topics.get(TOPIC)
        if topic is not None and topic.topic_id == self.topic_id:
            segment = topic.partitions[0].segments[0]
            assert segment.read(0, len(self.before)) == self.before, "the batches written before fuzzing changed"
        assert [p.name for p in self.root.iterdir()] == ["data"], f"files outside the data directory: {list(self.root.iterdir())}"
        for path in self.data_dir.iterdir():
            assert not path.is_dir() or _TOPIC_DIR.match(path.name), f"a partition directory named {path.name!r}"

    def close(self) -> None:
        self.loop.run_until_complete(self.broker.stop())
        self.loop.close()
        shutil.rmtree(self.root, ignore_errors=True)


def payload_of(data: bytes) -> bytes:
    if not data:
        return b""
    if not data[0] & 1:
        return data[1:]
    out, pos = bytearray(), 1
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 2], "big")
        body = data[pos + 2 : pos + 2 + length]
        if data[0] & 2:
            body = with_batch_crcs(body)
        out += struct.pack(">i", len(body)) + body
        pos += 2 + length
    return bytes(out)


def with_batch_crcs(body: bytes) -> bytes:
    """A Produce request's record batches with their CRCs computed, as a client computes them, so
    that mutated batches get past the CRC check into the log, and to what reads them later."""
    try:
        request = parse_request(body)
    except ProtocolError:
        return body
    if not isinstance(request, Request) or request.api_key != apis.PRODUCE:
        return body
    topics = tuple(dataclasses.replace(t, partition_data=tuple(
        dataclasses.replace(p, records=with_crc(p.records)) if p.records else p for p in t.partition_data)) for t in request.body.topic_data)
    return encode_request(dataclasses.replace(request.body, topic_data=topics), request.correlation_id, request.client_id or "")[4:]


def chunked(*frames: bytes) -> bytes:
    """A seed in the chunked form: each frame's body with a u16 length."""
    return b"\x01" + b"".join(len(f[4:]).to_bytes(2, "big") + f[4:] for f in frames)


_BROKER: LoopBroker | None = None


def one_input(data: bytes) -> None:
    assert _BROKER is not None
    written = _BROKER.feed(payload_of(data))
    _BROKER.assert_no_errors(f"input {data[:64].hex()}")
    assert len(b"".join(split_frames(written))) == len(written), "a response frame is cut"


def seeds(broker: LoopBroker) -> list[bytes]:
    frames = broker.valid + every_request(broker.topic_id)
    out = [chunked(f) for f in frames]
    out += [b"\x03" + c[1:] for c in out if c[3:5] == b"\x00\x00"]  # Produce requests, CRCs computed
    out += [chunked(frames[i], frames[(i * 7 + 3) % len(frames)]) for i in range(0, len(frames), 3)]
    out += [b"\x00" + f for f in broker.valid]
    return out


def main() -> None:
    global _BROKER
    _BROKER = LoopBroker()
    fuzz(one_input, seeds(_BROKER), max_len=2048, check=_BROKER.check, check_every=CHECK_EVERY, finish=_BROKER.close)


if __name__ == "__main__":
    sys.exit(main())
