"""``onceflow demo broker-crash``: a sample stream through the broker with a real Kafka client, checked.

Starts the broker as its own process (``onceflow broker`` on a free loopback
port, temporary data directory) unless ``--bootstrap-servers`` names one,
then with confluent-kafka (librdkafka):

1. creates a topic ``demo-orders`` with 3 partitions;
2. produces 10,000 orders with acks=all;
3. consumes half of them in consumer group ``demo-billing`` and commits;
4. kills the broker with SIGKILL and starts it again on the same data;
5. a new consumer in the same group resumes from the committed offsets and
   reads the rest;

and verifies that every acknowledged order arrived exactly once across the
two consumers, in offset order per partition.  It exits non-zero if not.

On a cluster named by ``--bootstrap-servers`` it first checks that the cluster answers (within
``--timeout``), and deletes the topic and the group it created when it ends, whichever way
(``--keep`` keeps them); a failure is one line on stderr, Ctrl-C the line ``interrupted``
(``longcommand.Session``).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import time

from ..broker.process import FAST_GROUPS, BrokerProcess
from ..clientconfig import NO_SETTINGS, ClientSettings
from ..longcommand import Session
from . import checked_bootstrap

TOPIC = "demo-orders"
GROUP = "demo-billing"
PARTITIONS = 3
RECORDS = 10_000
TIMEOUT_S = 60
#: librdkafka logs every closed connection; the demo closes them on purpose.
QUIET = {"log.connection.close": False}


def _say(text: str) -> None:
    print(text, flush=True)


def _consume(bootstrap: str, want: int, client: ClientSettings) -> list[tuple[int, int, bytes]]:
    from confluent_kafka import Consumer

    consumer = Consumer({**client.librdkafka(bootstrap), "group.id": GROUP, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, **QUIET})
    consumer.subscribe([TOPIC])
    got: list[tuple[int, int, bytes]] = []
    deadline = time.monotonic() + TIMEOUT_S
    while len(got) < want and time.monotonic() < deadline:
        for msg in consumer.consume(min(500, want - len(got)), 0.5):
            if msg.error() is None:
                got.append((msg.partition() or 0, msg.offset() or 0, msg.value() or b""))
    if got:
        consumer.commit(asynchronous=False)
    consumer.close()
    return got


def run_demo(bootstrap_servers: str | None = None, client: ClientSettings = NO_SETTINGS,
             args: argparse.Namespace | None = None) -> int:
    """The demo; ``args``: ``onceflow demo``'s options (``--timeout``, ``--keep``, ``--log-level``)."""
    if args is None:
        debug = logging.getLogger().isEnabledFor(logging.DEBUG)
        args = argparse.Namespace(log_level="DEBUG" if debug else "INFO")
    return Session("onceflow demo broker-crash", args, client).run(lambda session: _demo(bootstrap_servers, session))


def _demo(bootstrap_servers: str | None, session: Session) -> int:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    client = session.client
    with contextlib.ExitStack() as stack:
        broker = None
        if bootstrap_servers is None:
            broker = stack.enter_context(BrokerProcess(overrides=FAST_GROUPS, log_level="WARNING"))
            bootstrap_servers = broker.bootstrap_servers
            _say(f"1. started `onceflow broker` (pid {broker.pid}) on {bootstrap_servers}")
        else:
            bootstrap_servers = checked_bootstrap(bootstrap_servers)
            session.reach(bootstrap_servers)
        admin = AdminClient({**client.librdkafka(bootstrap_servers), **QUIET})
        for fut in admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)], request_timeout=session.timeout).values():
            fut.result(session.timeout + 5)
        if broker is None:
            session.made(bootstrap_servers, [TOPIC], [GROUP])
        _say(f"2. created topic {TOPIC} with {PARTITIONS} partitions")

        producer = Producer({**client.librdkafka(bootstrap_servers), "acks": "all", "linger.ms": 5, **QUIET})
        acked: dict[tuple[int, int], bytes] = {}

        def report(err: object, msg: object) -> None:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()  # type: ignore[attr-defined]

        start = time.perf_counter()
        for i in range(RECORDS):
            producer.produce(TOPIC, f"order-{i:05d}".encode(), key=f"customer-{i % 97}".encode(), on_delivery=report)
            if i % 1000 == 0:
                producer.poll(0)
        producer.flush(TIMEOUT_S)
        elapsed = time.perf_counter() - start
        producer.close()
        _say(f"3. produced {len(acked)} orders with acks=all (fsynced before each acknowledgement) in {elapsed:.2f} s")

        del admin
        first = _consume(bootstrap_servers, RECORDS // 2, client)
        _say(f"4. consumer group {GROUP} read {len(first)} orders and committed its offsets")

        if broker is not None:
            broker.kill()
            _say("5. killed the broker with SIGKILL (no clean shutdown)")
            broker.start()
            _say("6. restarted it on the same data directory (recovery checked every segment tail)")
        second = _consume(bootstrap_servers, len(acked) - len(first), client)
        _say(f"7. a new consumer in {GROUP} resumed from the committed offsets and read {len(second)} more")

    seen = first + second
    values = [v for _, _, v in seen]
    problems = []
    if len(acked) != RECORDS:
        problems.append(f"only {len(acked)} of {RECORDS} orders were acknowledged")
    if sorted(values) != sorted(acked.values()):
        problems.append("the consumers did not see exactly the acknowledged orders")
    if len(set(values)) != len(values):
        problems.append(f"{len(values) - len(set(values))} orders were delivered twice")
    for p in range(PARTITIONS):
        offsets = [o for (q, o, _) in seen if q == p]
        if offsets != sorted(offsets):
            problems.append(f"partition {p} was read out of order")
    if problems:
        for problem in problems:
            _say(f"FAILED: {problem}")
        return 1
    _say(f"OK: all {RECORDS} acknowledged orders were delivered exactly once, in order per partition, across a broker crash")
    return 0


if __name__ == "__main__":
    raise SystemExit(run_demo(os.environ.get("BOOTSTRAP_SERVERS")))
