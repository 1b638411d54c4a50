"""A consume-transform-produce worker with exactly-once semantics, as a real program.

    python ctp_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Reads INPUT with read_committed in consumer group GROUP (static member, so a
restarted worker takes its predecessor's place at once), writes each record
upper-cased to OUTPUT, and commits its input offsets in the same transaction
(send_offsets_to_transaction).  It prints one line per phase (``begin``,
``produced``, ``offsets``, ``committed N``) so a test can SIGKILL it at a
chosen point.  It runs until it is killed (the test decides when the output
is complete), or for at most two minutes.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import Consumer, Producer

RUN_AT_MOST_S = 120


def say(line: str) -> None:
    print(line, flush=True)


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> int:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.instance.id": f"{transactional_id}-member",
        "session.timeout.ms": 6000,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": transactional_id,
        "transaction.timeout.ms": 30000,
        "linger.ms": 1,
    })
    producer.init_transactions(30)
    consumer.subscribe([source])
    say("started")
    committed_total = 0
    deadline = time.monotonic() + RUN_AT_MOST_S
    while time.monotonic() < deadline:
        batch = [m for m in consumer.consume(50, 0.5) if m.error() is None]
        if not batch:
            continue
        producer.begin_transaction()
        say("begin")
        for msg in batch:
            producer.produce(sink, (msg.value() or b"").upper(), key=msg.key(), partition=msg.partition())
        producer.flush(30)
        say("produced")
        positions = consumer.position(consumer.assignment())
        producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
        say("offsets")
        producer.commit_transaction(30)
        committed_total += len(batch)
        say(f"committed {committed_total}")
    say("timeout")
    return 1


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:6]))
