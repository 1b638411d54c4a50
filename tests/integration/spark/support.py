"""What the Spark tests share: topics, transactional producers, reading a topic back, queries."""

from __future__ import annotations

import tempfile
import uuid
from typing import Any

from confluent_kafka import Producer

from tests.support.kafka import make_topic, read_all

TIMEOUT = 30
QUERY_TIMEOUT_S = 180


def bootstrap_options(bootstrap: str) -> dict[str, str]:
    return {"kafka.bootstrap.servers": bootstrap}


def transactional_writes(bootstrap: str, topic: str, transactions: list[tuple[list[bytes], bool]],
                         partition: int | None = None) -> list[bytes]:
    """Write each (values, commit?) as one transaction; returns the committed values in order."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"writer-{uuid.uuid4()}", "linger.ms": 1})
    producer.init_transactions(TIMEOUT)
    committed: list[bytes] = []
    for values, commit in transactions:
        producer.begin_transaction()
        for value in values:
            if partition is None:
                producer.produce(topic, value, key=value)
            else:
                producer.produce(topic, value, key=value, partition=partition)
        if commit:
            producer.commit_transaction(TIMEOUT)
            committed += values
        else:
            producer.flush(TIMEOUT)
            producer.abort_transaction(TIMEOUT)
    return committed


def read_topic(bootstrap: str, topic: str, partitions: list[int]) -> list[bytes]:
    """Every committed value of the topic, read by a plain read_committed consumer."""
    return read_all(bootstrap, topic, partitions, "read_committed")


def new_topic(bootstrap: str, partitions: int = 1, **config: str) -> str:
    name = f"t-{uuid.uuid4().hex[:10]}"
    make_topic(bootstrap, name, partitions, **config)
    return name


def checkpoint() -> str:
    return tempfile.mkdtemp(prefix="onceflow-ckpt-")


def run_available_now(frame: Any, sink_options: dict[str, str], checkpoint_dir: str, fmt: str = "onceflow") -> Any:
    """Run a streaming query until it has processed what is available now; returns it (stopped)."""
    writer = frame.writeStream.format(fmt).option("checkpointLocation", checkpoint_dir).trigger(availableNow=True)
    for key, value in sink_options.items():
        writer = writer.option(key, value)
    query = writer.start()
    query.awaitTermination(QUERY_TIMEOUT_S)
    if query.isActive:
        query.stop()
        raise AssertionError(f"the query did not finish within {QUERY_TIMEOUT_S} s")
    if query.exception() is not None:
        raise AssertionError(f"the query failed: {query.exception()}")
    return query
