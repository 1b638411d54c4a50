"""A consume-transform-produce worker with exactly-once semantics, as a real program.

    python ctp_worker.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Reads INPUT with read_committed in consumer group GROUP (static member, so a
restarted worker takes its predecessor's place at once), writes each record
upper-cased to OUTPUT, and commits its input offsets in the same transaction
(send_offsets_to_transaction).  When a transaction fails with an abortable
or retriable error (the broker was restarted under it, say) the worker
aborts it and rewinds its input to the last committed offsets, as a
correct exactly-once application must; a retriable error from
send_offsets_to_transaction or commit_transaction (a timeout while the broker
restarts) resumes the call instead, as librdkafka requires; a fatal error
ends the process with status 2 (the test starts a new one).  It prints one line per phase (``begin``,
``produced``, ``offsets``, ``committed N``) so a test can SIGKILL it at a
chosen point.  It runs until it is killed (the test decides when the output
is complete), or for at most two minutes.
"""

from __future__ import annotations

import os
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

RUN_AT_MOST_S = 120


def say(line: str) -> None:
    print(line, flush=True)


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> int:
    debug = {"debug": os.environ["CTP_WORKER_DEBUG"]} if os.environ.get("CTP_WORKER_DEBUG") else {}
    # librdkafka 2.16 re-bootstraps when its only broker disappears (KIP-899) and can then keep
    # waiting on the old broker handle forever; plain reconnection, retried often, is what a
    # one-broker cluster that restarts needs.  Otherwise the reconnect backoff grows to 10 s,
    # longer than a consumer session, and the static member comes back fenced (fatal).
    debug["metadata.recovery.strategy"] = "none"
    debug["reconnect.backoff.max.ms"] = 500
    consumer = Consumer({**debug,
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.instance.id": f"{transactional_id}-member",  # a restarted worker replaces the killed one at once
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    producer = Producer({**debug,
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
        polled = consumer.consume(50, 0.5)
        for m in polled:
            if m.error() is not None and m.error().fatal():
                say(f"fatal {m.error()}")
                return 2
        batch = [m for m in polled if m.error() is None]
        if not batch:
            continue
        try:
            producer.begin_transaction()
            say("begin")
            for msg in batch:
                producer.produce(sink, (msg.value() or b"").upper(), key=msg.key(), partition=msg.partition())
            producer.flush(30)
            say("produced")
            positions = consumer.position(consumer.assignment())
            _resuming(lambda p=positions: producer.send_offsets_to_transaction(p, consumer.consumer_group_metadata(), 30))
            say("offsets")
            _resuming(lambda: producer.commit_transaction(30))
        except KafkaException as exc:
            error = exc.args[0]
            if error.fatal() or not error.txn_requires_abort():
                say(f"fatal {error}")
                return 2
            say(f"retry {error}")
            try:
                producer.abort_transaction(30)
            except KafkaException as abort_error:
                say(f"fatal {abort_error.args[0]}")
                return 2
            _rewind(consumer)
            continue
        committed_total += len(batch)
        say(f"committed {committed_total}")
    say("timeout")
    return 1


def _resuming(call: object, attempts: int = 10) -> None:
    """librdkafka's contract: a retriable error (a timeout while the broker restarts) means "call
    again to resume"; only an error that requires an abort is aborted.  Aborting after a retriable
    one instead leaves the producer answering _CONFLICT to everything."""
    for attempt in range(attempts):
        try:
            call()  # type: ignore[operator]
            return
        except KafkaException as exc:
            if not exc.args[0].retriable() or attempt == attempts - 1:
                raise
            say(f"resume {exc.args[0]}")


def _rewind(consumer: Consumer) -> None:
    """Go back to the committed offsets: what the aborted transaction consumed is read again."""
    assignment = consumer.assignment()
    for tp in consumer.committed(assignment, timeout=30):
        if tp.offset >= 0:
            consumer.seek(tp)
        else:
            tp.offset = -2  # OFFSET_BEGINNING: nothing committed yet
            consumer.seek(tp)


if __name__ == "__main__":
    raise SystemExit(main(*sys.argv[1:6]))
