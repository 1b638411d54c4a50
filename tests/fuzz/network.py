"""The network fuzzer: mutated real client traffic against a live broker process.

    python -m tests.fuzz.network --seconds 600 --seed 1          # the long run (make fuzz-long)

1. A broker process (``onceflow.broker.process.BrokerProcess``: ``onceflow broker`` on a free
   loopback port, a temporary data directory) is started behind a capturing ``TcpProxy``
   (``advertised.listeners`` names the proxy, so clients stay on it).
2. Real clients run through the proxy, and every request frame they send is kept: confluent-kafka
   (librdkafka) admin calls, an idempotent producer, compressed batches, a transactional producer
   that commits (with its consumer offsets) and aborts, a read_committed consumer group that
   commits, offsets-by-timestamp lookups.  To these are added one request of every API at every
   version (``corpus.every_request``).
3. ``GUARDED_RECORDS`` records are written to the guarded topic and its partition's files
   hashed.  A bystander connects (one ``WireClient`` connection) and loops: produce to its own
   topic, read that record back, and now and then read the whole guarded topic.  It must never
   be disconnected, see an error, or read anything different.
4. ``workers`` concurrent fuzz connections, each sending 1-4 frames taken from the pool and
   mutated: bytes (bit flips, interesting integers, varint-shaped runs, insertions, deletions,
   truncations, duplicated spans), the size prefix kept, recomputed or mutated, and, for
   produce requests, the record batch itself mutated (lengths, counts, offset deltas, record
   varints; the CRC recomputed or not).  Produce frames are also pointed at the guarded topic
   with a broken CRC.  Each connection reads what the broker answers until it closes, has
   answered every request, or is quiet for ``QUIET_S``, and hangs up.
5. Afterwards: the broker process is alive and answers; its log holds no ERROR and no
   traceback; the guarded partition's files are byte-identical to before; after a clean
   restart the guarded and bystander records read back whole.  The payload of a connection
   the broker logged an ERROR for is saved beside its log (``error-<port>.bin``, with
   ``--keep``) for replay.

The guarded topic only ever receives requests that must be refused: before a frame is sent it
is parsed with the broker's own parser (``parse_request``), and one that would legitimately
change the guarded topic (a produce whose batch validates, or a DeleteTopics, CreatePartitions,
config change or transaction request naming it) is not sent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import datetime
import hashlib
import json
import random
import re
import shutil
import socket
import struct
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.metadata.v12 import request as metadata12
from kio.static.primitive import i16, i32, i32Timedelta, i64

from onceflow.chaos.proxy import TcpProxy
from onceflow.protocol import apis
from onceflow.protocol.errors import ProtocolError
from onceflow.protocol.framing import Request, parse_request
from onceflow.records.batch import BatchHeader, scan, validate_produced
from onceflow.records.builder import build_batch
from tests.fuzz.corpus import every_request, mutate_bytes, reframe, split_frames, with_crc
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.wire import WireClient, base_offset, encode_request, end_offset, partition_error, produce_request

TRAFFIC = "fz-traffic"
GUARDED = "guarded-ledger"
BYSTANDER = "bystander"
#: Records the bystander writes to the guarded topic before fuzzing starts.
GUARDED_RECORDS = 50
#: How long a fuzz connection waits for more bytes from the broker before hanging up.
QUIET_S = 0.15
#: Payloads kept for replay: about the last minute of connections.
RECENT = 60_000
_ERROR_PEER = re.compile(rb" ERROR .* from 127\.0\.0\.1:(\d+)")
#: Requests that may change the partitions they name (a topic's files): never sent naming the guarded topic.
_WRITES = {apis.DELETE_TOPICS, apis.CREATE_PARTITIONS, apis.ALTER_CONFIGS, apis.INCREMENTAL_ALTER_CONFIGS, apis.CREATE_TOPICS,
           apis.ADD_PARTITIONS_TO_TXN, apis.WRITE_TXN_MARKERS, apis.END_TXN, apis.TXN_OFFSET_COMMIT, apis.ADD_OFFSETS_TO_TXN,
           apis.DELETE_RECORDS}
#: Broker settings: small segments roll often; the fuzzer's frames are at most 1 MiB.
SETTINGS = {**FAST_GROUPS, "log.segment.bytes": str(256 << 10), "socket.request.max.bytes": str(1 << 20)}


# -- capturing real client traffic ------------------------------------------------


class Capture:
    """Request frames that clients sent through the proxy, cut per connection."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, bytearray] = {}
        self.frames: list[bytes] = []

    def __call__(self, connection: int, from_client: bool, data: bytes) -> None:
        if not from_client:
            return
        with self._lock:
            buf = self._pending.setdefault(connection, bytearray())
            buf += data
            frames = split_frames(bytes(buf))
            del buf[: sum(len(f) for f in frames)]
            self.frames += frames


def run_clients(bootstrap: str) -> None:
    """What real clients do, through ``bootstrap`` (the proxy): every exchange is captured."""
    common = {"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000}
    admin = AdminClient(common)
    for fut in admin.create_topics([NewTopic(TRAFFIC, 2, 1), NewTopic("fz-temp", 1, 1)]).values():
        fut.result(30)
    admin.list_topics(timeout=30)
    for fut in admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, TRAFFIC)]).values():
        fut.result(30)
    for fut in admin.create_partitions([NewPartitions("fz-temp", 2)]).values():
        fut.result(30)
    for fut in admin.delete_topics(["fz-temp"]).values():
        fut.result(30)

    errors: list[Any] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(err)

    for extra in ({"enable.idempotence": True}, {"compression.type": "lz4", "acks": "1"}, {"compression.type": "zstd", "acks": "all"}):
        producer = Producer({**common, "linger.ms": 5, **extra})
        for i in range(60):
            producer.produce(TRAFFIC, b"value-%d" % i * (i % 5), key=b"key-%d" % (i % 7), on_delivery=report,
                             headers=[("h", b"x")] if i % 3 == 0 else None)
        assert producer.flush(30) == 0
    txn = Producer({**common, "transactional.id": "fz-txn", "linger.ms": 5})
    txn.init_transactions(30)
    consumer = Consumer({**common, "group.id": "fz-group", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    consumer.subscribe([TRAFFIC])
    got = 0
    deadline = time.monotonic() + 30
    while got < 20 and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            got += 1
    assert got >= 20, f"the consumer read {got} records"
    txn.begin_transaction()
    for i in range(10):
        txn.produce(TRAFFIC, b"txn-%d" % i, on_delivery=report)
    txn.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 30)
    txn.commit_transaction(30)
    txn.begin_transaction()
    txn.produce(TRAFFIC, b"aborted", on_delivery=report)
    txn.flush(30)
    txn.abort_transaction(30)
    consumer.commit(asynchronous=False)
    with contextlib.suppress(KafkaException):
        consumer.offsets_for_times([TopicPartition(TRAFFIC, 0, int(time.time() * 1000) - 60_000),
                                    TopicPartition(TRAFFIC, 1, -1)], timeout=10)
    consumer.close()
    assert not errors, errors


# -- the pool of frames and their mutations ---------------------------------------


@dataclasses.dataclass
class Pool:
    frames: list[bytes]
    #: Produce frames (their index in ``frames``).
    produce: list[int]

    @classmethod
    def of(cls, frames: list[bytes]) -> Pool:
        unique = list(dict.fromkeys(frames))
        parsed = [_parse(f) for f in unique]
        return cls(unique, [i for i, r in enumerate(parsed) if r is not None and r.api_key == apis.PRODUCE])

    def kinds(self) -> Counter[str]:
        return Counter(apis.api_name(struct.unpack_from(">h", f, 4)[0]) for f in self.frames if len(f) >= 6)


def _parse(frame: bytes) -> Request | None:
    try:
        request = parse_request(frame[4:])
    except ProtocolError:
        return None
    return request if isinstance(request, Request) else None


def _reencode(request: Request, body: Any) -> bytes:
    return encode_request(body, request.correlation_id, request.client_id or "")


def _with_partitions(body: Any, change: Callable[[str | None, Any], Any]) -> Any:
    """A Produce body with each partition's data replaced by ``change(topic_name, partition_data)``
    (the name is None from Produce v13, which names topics by id, KIP-516)."""
    topics = []
    for topic in body.topic_data:
        partitions = tuple(change(getattr(topic, "name", None), p) for p in topic.partition_data)
        topics.append(dataclasses.replace(topic, partition_data=partitions))
    return dataclasses.replace(body, topic_data=tuple(topics))


def mutate_batch(batch: bytes, rng: random.Random) -> bytes:
    """A record batch with header fields or record bytes changed; the CRC recomputed half the time."""
    out = bytearray(batch)
    if len(out) >= 61 and rng.random() < 0.6:
        field = rng.choice(((8, 4), (16, 1), (21, 2), (23, 4), (27, 8), (43, 8), (51, 2), (53, 4), (57, 4)))  # length .. count
        pos, width = field
        value = rng.choice((0, 1, -1, 0x7F, 0x7FFF, 0x7FFFFFFF, -0x80000000, rng.randrange(-1000, 1000)))
        out[pos : pos + width] = (value & ((1 << 8 * width) - 1)).to_bytes(width, "big")
    else:
        out = bytearray(mutate_bytes(bytes(out), rng))
    return with_crc(out) if rng.random() < 0.5 else bytes(out)


def break_crc(batch: bytes, rng: random.Random) -> bytes:
    """``batch`` with a byte the CRC covers (or the CRC itself) changed: it can only be refused."""
    out = bytearray(batch)
    if len(out) <= 17:
        return bytes(out)
    pos = rng.randrange(17, len(out))
    out[pos] ^= rng.randrange(1, 256)
    return bytes(out)


class Mutator:
    def __init__(self, pool: Pool, rng: random.Random, guarded_id: uuid.UUID) -> None:
        self.pool = pool
        self.rng = rng
        self.guarded_id = guarded_id
        #: Payloads drawn that could have changed the guarded topic legitimately, and were not sent.
        self.dropped = 0

    def frame(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if roll < 0.25 and self.pool.produce:
            return self._produce(guarded=rng.random() < 0.5)
        frame = rng.choice(self.pool.frames)
        if roll < 0.35:
            return frame  # unchanged: a valid request between bad ones
        kind = rng.random()
        if kind < 0.5:  # the body mutated, the size prefix recomputed
            return reframe(mutate_bytes(frame[4:], rng))
        if kind < 0.8:  # everything mutated, size prefix included
            return mutate_bytes(frame, rng)
        body = frame[4:]  # the header mutated: api key, version, correlation id
        pos = rng.choice((0, 2, 4))
        value = rng.choice((0, 1, -1, 0x7FFF, rng.randrange(-3, 80)))
        return reframe(body[:pos] + (value & 0xFFFF).to_bytes(2, "big") + body[pos + 2 :])

    def _produce(self, guarded: bool) -> bytes:
        rng = self.rng
        frame = self.pool.frames[rng.choice(self.pool.produce)]
        request = _parse(frame)
        assert request is not None
        if guarded:
            def change(_topic: str | None, p: Any) -> Any:
                return dataclasses.replace(p, index=0, records=break_crc(p.records, rng) if p.records else p.records)

            body = _with_partitions(request.body, change)
            topics = tuple(dataclasses.replace(t, name=GUARDED) if hasattr(t, "name")
                           else dataclasses.replace(t, topic_id=self.guarded_id) for t in body.topic_data)
            encoded = _reencode(request, dataclasses.replace(body, topic_data=topics))
        else:
            body = _with_partitions(request.body, lambda _t, p: dataclasses.replace(
                p, records=mutate_batch(p.records, rng) if p.records else p.records))
            encoded = _reencode(request, body)
        return reframe(mutate_bytes(encoded[4:], rng)) if rng.random() < 0.3 else encoded

    def payload(self) -> tuple[bytes, int, int]:
        """(bytes for one connection, frames in it, requests a reply is expected for).  Payloads
        that could legitimately change the guarded topic are drawn again (and counted)."""
        while True:
            frames = [self.frame() for _ in range(self.rng.choice((1, 1, 1, 2, 3, 4)))]
            payload = b"".join(frames)
            touches, expected = analyse(payload, self.guarded_id)
            if not touches:
                return payload, len(frames), expected
            self.dropped += 1


def analyse(payload: bytes, guarded_id: uuid.UUID) -> tuple[bool, int]:
    """Read ``payload`` as the broker will (frame by frame, with its parser, up to the first frame
    it refuses and closes the connection on): (whether a request could legitimately change the
    guarded topic's files, how many responses the broker owes)."""
    expected = 0
    for frame in split_frames(payload):
        try:
            request = parse_request(frame[4:])
        except ProtocolError:
            break
        expected += 1
        if not isinstance(request, Request):
            continue  # an ApiVersions of a newer version, answered with v0
        if request.api_key == apis.PRODUCE:
            if request.body.acks == 0:
                expected -= 1
            for topic in request.body.topic_data:
                names_guarded = getattr(topic, "name", None) == GUARDED or getattr(topic, "topic_id", None) == guarded_id
                if names_guarded and any(isinstance(validate_produced(bytes(p.records or b""), 1 << 20), BatchHeader)
                                         for p in topic.partition_data):
                    return True, expected
        elif request.api_key in _WRITES:
            text = repr(request.body)
            if GUARDED in text or str(guarded_id) in text:
                return True, expected
    return False, expected


# -- the fuzz connections ---------------------------------------------------------


@dataclasses.dataclass
class Stats:
    connections: int = 0
    frames: int = 0
    responses: int = 0
    closed_by_broker: int = 0
    refused_connect: int = 0
    quiet_hangups: int = 0
    #: The payloads of the last ``RECENT`` connections by client port, to save the one the broker logs an error for.
    recent: OrderedDict[int, bytes] = dataclasses.field(default_factory=OrderedDict)

    def remember(self, port: int, payload: bytes) -> None:
        self.recent[port] = payload
        self.recent.move_to_end(port)
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)


async def fuzz_connection(port: int, payload: bytes, expected: int, reset: bool, stats: Stats) -> None:
    """One connection: send ``payload``, read until the broker closes it, has answered
    ``expected`` requests or is quiet for ``QUIET_S``; then hang up (with a RST if ``reset``)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        stats.refused_connect += 1
        return
    received = bytearray()
    sockname = writer.get_extra_info("sockname")
    if sockname:
        stats.remember(sockname[1], payload)
    try:
        with contextlib.suppress(OSError):
            writer.write(payload)
            await writer.drain()
        while not (expected and len(split_frames(bytes(received))) >= expected):
            try:
                chunk = await asyncio.wait_for(reader.read(1 << 16), QUIET_S)
            except TimeoutError:
                stats.quiet_hangups += 1
                break
            except OSError:
                chunk = b""
            if not chunk:
                stats.closed_by_broker += 1
                break
            received += chunk
    finally:
        stats.responses += len(split_frames(bytes(received)))
        sock = writer.get_extra_info("socket")
        if reset and sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def fuzz_for(port: int, mutator: Mutator, seconds: float, workers: int, stats: Stats, stop: threading.Event) -> None:
    deadline = time.monotonic() + seconds

    async def worker() -> None:
        while time.monotonic() < deadline and not stop.is_set():
            payload, frames, expected = mutator.payload()
            await fuzz_connection(port, payload, expected, mutator.rng.random() < 0.5, stats)
            stats.connections += 1
            stats.frames += frames

    await asyncio.gather(*(worker() for _ in range(workers)))


# -- the bystander --------------------------------------------------------------


class Bystander(threading.Thread):
    """One connection that keeps working while the fuzzer runs: any error or disconnect is a failure."""

    def __init__(self, bootstrap: str, guarded: bytes) -> None:
        super().__init__(name="fuzz-bystander", daemon=True)
        self.client = WireClient(bootstrap)
        self.guarded = guarded
        self.stop = threading.Event()
        self.failure: str | None = None
        self.produced = 0
        self.reads = 0
        self.slowest_s = 0.0

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                started = time.monotonic()
                response = self.client.request(produce_request(BYSTANDER, build_batch([(None, b"b-%d" % self.produced)], _now())))
                if partition_error(response) != 0 or base_offset(response) != self.produced:
                    raise AssertionError(f"produce {self.produced}: error {partition_error(response)}, offset {base_offset(response)}")
                self.produced += 1
                if self.produced % 10 == 0:
                    if fetch_records(self.client, GUARDED, 0) != self.guarded:
                        raise AssertionError("the guarded topic reads differently")
                    last = self.produced - 1
                    batches = list(scan(fetch_records(self.client, BYSTANDER, 0, last)))
                    if not batches or batches[0][1].base_offset != last:
                        raise AssertionError(f"the bystander's record {last} does not read back")
                    self.reads += 1
                self.slowest_s = max(self.slowest_s, time.monotonic() - started)
                self.stop.wait(0.02)
        except (AssertionError, OSError, ConnectionError, ValueError) as exc:  # any failure ends the loop and is reported
            self.failure = f"{type(exc).__name__}: {exc}"
        finally:
            self.client.close()


def _now() -> int:
    return int(time.time() * 1000)


def fetch_records(client: WireClient, topic: str, partition: int, offset: int = 0) -> bytes:
    request = fetch12.FetchRequest(
        replica_id=i32(-1), max_wait=_ms(0), min_bytes=i32(0), max_bytes=i32(16 << 20), isolation_level=i16(0),
        session_id=i32(0), session_epoch=i32(-1), topics=(fetch12.FetchTopic(topic=topic, partitions=(
            fetch12.FetchPartition(partition=i32(partition), current_leader_epoch=i32(-1), fetch_offset=i64(offset), last_fetched_epoch=i32(-1),
                                   log_start_offset=i64(-1), partition_max_bytes=i32(16 << 20)),)),),
        forgotten_topics_data=(), rack_id="")
    response = client.request(request)
    part = response.responses[0].partitions[0]
    if part.error_code != 0:
        raise AssertionError(f"fetch {topic}-{partition}: error {part.error_code}")
    return bytes(part.records or b"")


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def topic_id(client: WireClient, topic: str) -> uuid.UUID:
    response = client.request(metadata12.MetadataRequest(topics=(metadata12.MetadataRequestTopic(topic_id=uuid.UUID(int=0), name=topic),),
                                                         allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return response.topics[0].topic_id  # type: ignore[no-any-return]


def file_hashes(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(directory.iterdir()) if p.is_file()}


def log_problems(text: str) -> list[str]:
    """Lines of the broker's log at ERROR or CRITICAL, and tracebacks."""
    return [line for line in text.splitlines() if " ERROR " in line or " CRITICAL " in line or line.startswith("Traceback")]


# -- the run ------------------------------------------------------------------------


@dataclasses.dataclass
class Outcome:
    seconds: float
    stats: Stats
    pool_frames: int
    captured_frames: int
    pool_kinds: dict[str, int]
    dropped_guarded: int
    bystander_produced: int
    bystander_reads: int
    bystander_slowest_s: float
    problems: list[str]

    @property
    def inputs_per_s(self) -> float:
        return self.stats.connections / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {"seconds": round(self.seconds, 1), "connections (inputs)": self.stats.connections, "frames": self.stats.frames,
                "inputs/s": round(self.inputs_per_s, 1), "frames/s": round(self.stats.frames / self.seconds, 1) if self.seconds else 0,
                "responses": self.stats.responses, "closed by the broker": self.stats.closed_by_broker,
                "hung up on (quiet)": self.stats.quiet_hangups, "connect refused": self.stats.refused_connect,
                "captured frames": self.captured_frames, "pool frames": self.pool_frames, "pool": self.pool_kinds,
                "frames not sent (would write the guarded topic)": self.dropped_guarded,
                "bystander produces": self.bystander_produced, "bystander reads": self.bystander_reads,
                "bystander slowest request s": round(self.bystander_slowest_s, 3), "problems": self.problems}


def run(seconds: float, seed: int, workers: int, root: Path, progress: Callable[[str], None] = print) -> Outcome:
    data_dir = root / "data"
    broker = BrokerProcess(data_dir, SETTINGS)
    capture = Capture()
    proxy = TcpProxy(("127.0.0.1", broker.port), capture=capture).start()
    broker.overrides["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{proxy.port}"
    problems: list[str] = []
    broker.start()
    try:
        progress(f"broker on {broker.bootstrap_servers}, clients through {proxy.address}")
        run_clients(proxy.address)
        proxy.capture = None  # connections from now on are not captured
        for name in (GUARDED, BYSTANDER):
            _create_topic(proxy.address, name)
        with WireClient(broker.bootstrap_servers) as setup:
            for i in range(GUARDED_RECORDS):
                response = setup.request(produce_request(GUARDED, build_batch([(b"g", b"guarded-%d" % i)], _now())))
                assert partition_error(response) == 0
            guarded = fetch_records(setup, GUARDED, 0)
            traffic_id = topic_id(setup, TRAFFIC)
            guarded_id = topic_id(setup, GUARDED)
        assert len(list(scan(guarded))) == GUARDED_RECORDS
        guarded_dir = data_dir / f"{GUARDED}-0"
        before = file_hashes(guarded_dir)
        pool = Pool.of(capture.frames + every_request(traffic_id, TRAFFIC))
        progress(f"captured {len(capture.frames)} request frames; pool of {len(pool.frames)}: {dict(pool.kinds())}")
        mutator = Mutator(pool, random.Random(seed), guarded_id)
        bystander = Bystander(broker.bootstrap_servers, guarded)
        bystander.start()
        stats = Stats()
        started = time.monotonic()
        stop = threading.Event()
        saved: list[Path] = []
        reporter = threading.Thread(target=_report, args=(stats, started, stop, progress, broker, saved), daemon=True)
        reporter.start()
        asyncio.run(fuzz_for(broker.port, mutator, seconds, workers, stats, stop))
        elapsed = time.monotonic() - started
        stop.set()
        reporter.join(10)
        bystander.stop.set()
        bystander.join(60)
        if bystander.is_alive():
            problems.append("the bystander did not finish its last request within 60 s")
        if bystander.failure:
            problems.append(f"bystander: {bystander.failure}")
        assert broker.proc is not None
        if broker.proc.poll() is not None:
            problems.append(f"the broker process exited with status {broker.proc.returncode}")
        else:
            with WireClient(broker.bootstrap_servers) as probe:
                if fetch_records(probe, GUARDED, 0) != guarded:
                    problems.append("the guarded topic reads differently after fuzzing")
            after = file_hashes(guarded_dir)
            if after != before:
                problems.append(f"the guarded partition's files changed: {sorted(set(before.items()) ^ set(after.items()))}")
            if broker.stop() != 0:
                problems.append("the broker did not stop cleanly")
            broker.start()
            with WireClient(broker.bootstrap_servers) as probe:
                if fetch_records(probe, GUARDED, 0) != guarded:
                    problems.append("the guarded topic reads differently after a restart")
                ends = end_offset(probe, BYSTANDER)
                first = list(scan(fetch_records(probe, BYSTANDER, 0, 0)))
                last = list(scan(fetch_records(probe, BYSTANDER, 0, max(bystander.produced - 1, 0))))
                if ends != bystander.produced or not first or first[0][1].base_offset != 0 \
                        or not last or last[0][1].base_offset != bystander.produced - 1:
                    problems.append(f"after a restart the bystander topic ends at {ends}, not {bystander.produced}, or its records do not read")
        problems += [f"broker log: {line}" for line in log_problems(broker.log())[:20]]
        problems += [f"the payload of a connection the broker logged an error for: {path}" for path in saved]
        return Outcome(elapsed, stats, len(pool.frames), len(capture.frames), dict(pool.kinds()), mutator.dropped, bystander.produced,
                       bystander.reads, bystander.slowest_s, problems)
    finally:
        proxy.close()
        if broker.proc is not None:
            broker.proc.kill()
            broker.proc.wait()


def _create_topic(bootstrap: str, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(name, 1, 1)]).values():
        fut.result(30)


def _report(stats: Stats, started: float, stop: threading.Event, progress: Callable[[str], None], broker: BrokerProcess,
            saved: list[Path]) -> None:
    """Progress every 30 s; every second, the payload of a connection the broker logged an ERROR
    for is saved beside its log (``error-<port>.bin``), to replay."""
    position = len(broker.log().encode())
    ticks = 0
    while not stop.wait(1):
        with open(broker.log_path, "rb") as f:
            f.seek(position)
            new = f.read()
        position += len(new)
        for port in {int(m) for m in _ERROR_PEER.findall(new)}:
            payload = stats.recent.get(port)
            if payload is not None:
                path = broker.log_path.parent / f"error-{port}.bin"
                path.write_bytes(payload)
                saved.append(path)
        ticks += 1
        if ticks % 30 == 0:
            elapsed = time.monotonic() - started
            progress(f"{elapsed:.0f} s: {stats.connections} connections, {stats.frames} frames, {stats.connections / elapsed:.0f} inputs/s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz.network", description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--keep", action="store_true", help="keep the data directory and the broker's log")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="onceflow-netfuzz-"))
    try:
        outcome = run(args.seconds, args.seed, args.workers, root, progress=lambda s: print(s, file=sys.stderr, flush=True))
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"kept {root}", file=sys.stderr)
    print(json.dumps(outcome.summary(), indent=2))
    return 1 if outcome.problems else 0


if __name__ == "__main__":
    sys.exit(main())
