"""Which internal-topic partition a group or transactional id lives in.

Kafka maps a group id to its ``__consumer_offsets`` partition, and a
transactional id to its ``__transaction_state`` partition, with
``Utils.abs(key.hashCode()) % partitions``: Java's String.hashCode (over
UTF-16 code units, 32-bit wrapping), and an abs that maps Integer.MIN_VALUE
to 0 (not ``& 0x7fffffff``, which differs for every negative hash).  Using
the same function keeps a data directory's layout what Kafka's would be.
"""

from __future__ import annotations

_INT_MIN = -(2**31)


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode`` (over UTF-16 code units, 32-bit signed)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x1_0000_0000 if h & 0x8000_0000 else h


def java_utils_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: |n|, except Integer.MIN_VALUE -> 0."""
    return 0 if n == _INT_MIN else abs(n)


def partition_for(key: str, num_partitions: int) -> int:
    return java_utils_abs(java_string_hashcode(key)) % num_partitions
