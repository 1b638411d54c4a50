"""``__transaction_state`` read back as a plain consumer would, decoded with our own record codec:
what each transactional id's records say (their value versions, the client's transaction version)."""

from __future__ import annotations

from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from onceflow.coordinator.transaction import log_records as rec

PARTITIONS = 50  # transaction.state.log.num.partitions, Kafka's default and ours


@dataclass
class TransactionLog:
    #: Every value version seen.
    value_versions: set[int] = field(default_factory=set)
    #: Per transactional id, the client transaction versions its records carry.
    client_versions: dict[str, set[int]] = field(default_factory=dict)


def read_transaction_log(bootstrap: str, partitions: int = PARTITIONS, max_polls: int = 400) -> TransactionLog:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-state-reader", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    consumer.assign([TopicPartition("__transaction_state", p, 0) for p in range(partitions)])
    out = TransactionLog()
    ended: set[int] = set()
    try:
        for _ in range(max_polls):
            if len(ended) == partitions:
                break
            for message in consumer.consume(500, 0.2):
                if message.error() is not None:
                    ended.add(message.partition() or 0)
                    continue
                value = message.value()
                key = rec.decode_key(message.key() or b"")
                if value is None or not isinstance(key, rec.TransactionLogKey):
                    continue
                decoded = rec.decode_value(value)
                assert decoded is not None
                out.value_versions.add(int.from_bytes(value[:2], "big"))
                out.client_versions.setdefault(key.transactional_id, set()).add(decoded.client_transaction_version)
        else:
            raise AssertionError(f"__transaction_state not read to its end ({len(ended)} of {partitions} partitions)")
    finally:
        consumer.close()
    return out
