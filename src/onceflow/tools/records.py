"""``onceflow topics produce|consume``: lines from stdin into a topic, records from a topic to stdout.

Theory of operation
-------------------
Both are a confluent-kafka (librdkafka) client and nothing else, so they work against Apache Kafka
as they do against Onceflow; their options are kafka-console-producer's and -consumer's ideas
under kcat's and rpk's short names.

``produce`` reads stdin as bytes, one record per line (the line's ``\\n`` or ``\\r\\n`` is not
part of it; an empty line is an empty value).  A line is ``[HEADERS HSEP][KEY KSEP]VALUE`` when
``--header-separator HSEP`` and ``--key-separator KSEP`` are given (kafka-console-producer's
parse.headers and parse.key, in its order); HEADERS is ``k=v,k=v`` (a ``k`` without ``=`` is a
header with a null value).  ``-k`` gives every record one key, ``-H k=v`` one more header.
Without ``-p`` a record goes where the Java client would send it (``partitioner=murmur2_random``:
murmur2 of the key, or any partition for no key), so keys land in the same partitions as
kafka-console-producer's.  The rules:

* ``--acks all`` (the default) produces idempotently (Kafka's producer default since 3.0), and the
  command exits 0 only when every record was acknowledged; the first record that is not stops the
  reading, what was sent is waited for, and the command fails in one line naming how many were
  not acknowledged and why (with ``--json``, the summary of what was acknowledged first, on stdout).
  ``--acks 0`` has no acknowledgements: the records are counted as sent, no offsets are known
  (confluent-kafka reports the offset as None).
* ``--transactional-id ID`` puts all of stdin in one transaction (KIP-98), committed at end of
  input: all of it becomes visible to read_committed consumers, or none of it (a failure, or
  Ctrl-C, aborts it).  Its length is bounded by transaction.timeout.ms (the larger of 60 s and
  ``--timeout``, at most 15 min, Kafka's default transaction.max.timeout.ms, above which the broker
  refuses it; ``-X transaction.timeout.ms=...`` to change it): the coordinator aborts a
  transaction open longer, and the commit then fails.
* Ctrl-C (``clienterrors.interruptible``, held by ``common.run``; every wait on the client is in
  slices, after each of which the recorded Ctrl-C is raised) aborts the transaction or waits for
  what was sent, then the one line says what landed (``ProduceInterrupted``), exit status 130.
* A topic that does not exist is refused before anything is read (``common.missing_topic``): the
  producer does not ask the broker to create it (librdkafka's allow.auto.create.topics off, as
  rpk's default is).

``consume`` reads with ``assign`` and commits nothing, unless ``--group G`` is given: then it joins
G (subscribe), starts from G's committed offsets, and commits the offset after each record it has
written to stdout (at least once: a record is committed only once it is out), when it stops.
Where it starts without a committed offset: the end (new records only, as kafka-console-consumer),
``--from-beginning`` / ``-o start`` the beginning, ``-o N`` offset N (kept within the partition's
earliest and latest offsets), ``-o -N`` N offsets before the end (offsets, as kcat counts: a
transaction marker takes one, so fewer than N records may follow), ``--timestamp TIME`` the first
record at or after TIME (ListOffsets by time, KIP-79; the end where there is none).  It stops
after ``-n N`` records, or with ``--exit-at-end`` once every assigned partition has reached its end
as of the start (high watermark; the last stable offset under read_committed), or on Ctrl-C (before
the reading starts, Ctrl-C is an interruption: exit status 130); then
closes the consumer (leaving the group, committing) and says ``Processed a total of N messages``
on stderr, as kafka-console-consumer does.  ``--isolation-level`` defaults to read_uncommitted, as
Kafka's console consumer does: records of open and aborted transactions are shown unless
read_committed is asked for.

stdout carries only records: each value on its line (``null`` for none, as kafka-console-consumer
prints it), or ``--json`` (one object a line), or ``-f FORMAT`` (kcat's ``%t %p %o %T %k %v %h``);
values are written as the bytes they are.  A closed pipe (``| head``) ends the command quietly.
On a terminal, stderr shows a running count (only when stdin, for produce, or stdout, for consume,
is not the terminal itself); nothing of it when stderr is piped.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..cliargs import name as name_text
from ..cliargs import non_negative_int, positive_int, text_value, timestamp_ms, topic_name
from ..clientconfig import NO_SETTINGS, ClientSettings
from ..clienterrors import SLICE_S, ClientLog, check_interrupt, deferring_interrupts, kafka_error_text, sliced
from ..progressline import REDRAW_S, ProgressLine, is_terminal
from .common import DEFAULT_TIMEOUT_S, ToolError, UsageError, add_command, error_line, key_value, librdkafka_client, missing_topic, to_json

#: Kafka's default transaction.timeout.ms (librdkafka's too).
_TRANSACTION_TIMEOUT_MS = 60_000
#: Kafka's default transaction.max.timeout.ms (a broker's largest transaction.timeout.ms; larger: INVALID_TRANSACTION_TIMEOUT).
_TRANSACTION_MAX_TIMEOUT_MS = 900_000
#: The longest wait on a transactional call before Ctrl-C is looked for (a call again goes on where it was).
_TRANSACTION_SLICE_S = 0.5
#: The longest wait for a record before Ctrl-C is looked for.
_CONSUME_WAIT_S = 0.5
#: Records asked of the consumer at a time (and the most written between two flushes of stdout).
_BATCH = 500


# -- shared --------------------------------------------------------------------------------------


class Progress(ProgressLine):
    """A running count of records on stderr (``progressline``), first drawn after a fifth of a second."""

    def __init__(self, label: str, enabled: bool, stream: IO[str] | None = None) -> None:
        super().__init__(stream, enabled, first_after=REDRAW_S)
        self.label = label

    def update(self, count: int) -> None:
        self.show(f"{self.label} {count} records")


def _partitions(client: Any, topic: str, timeout: float, said: ClientLog) -> list[int]:
    """The topic's partition ids (Metadata, never creating it); ``missing_topic`` when there is no such topic."""
    from confluent_kafka import KafkaError, KafkaException

    try:
        metadata = sliced(lambda seconds: client.list_topics(topic=topic, timeout=seconds), timeout)
    except KafkaException as exc:
        raise ToolError(said.explain(f"topic {topic!r}: {error_line(exc)}")) from exc
    found = metadata.topics.get(topic)
    if found is None or (found.error is not None and found.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART):
        raise missing_topic(topic)
    if found.error is not None:
        raise ToolError(f"topic {topic!r}: {kafka_error_text(found.error)}")
    return sorted(found.partitions)


def check_partition(topic: str, partition: int, partitions: list[int]) -> None:
    """A ToolError unless ``partition`` is one of the topic's ``partitions``."""
    if partition not in partitions:
        raise ToolError(f"topic {topic!r} has no partition {partition} (it has {len(partitions)}: 0 to {len(partitions) - 1})")


def _unescape(separator: str) -> str:
    r"""A separator as typed, ``\t`` read as a tab (kafka-console-producer's default key.separator)."""
    return separator.replace("\\t", "\t")


# -- produce -------------------------------------------------------------------------------------


@dataclass
class LineFormat:
    """How a line of stdin becomes a record (see the module's docstring)."""

    key: bytes | None = None
    key_separator: bytes | None = None
    header_separator: bytes | None = None
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)

    def record(self, line: bytes, number: int) -> tuple[bytes | None, bytes, list[tuple[str, bytes | None]]]:
        """(key, value, headers) of line ``number`` (counted from 1)."""
        headers = list(self.headers)
        if self.header_separator is not None:
            head, sep, line = line.partition(self.header_separator)
            if not sep:
                raise ToolError(f"line {number}: no header separator {self.header_separator.decode(errors='replace')!r}")
            for item in head.split(b",") if head else ():
                name, eq, value = item.partition(b"=")
                headers.append((name.decode(errors="replace"), value if eq else None))
        if self.key_separator is None:
            return self.key, line, headers
        key, sep, value = line.partition(self.key_separator)
        if not sep:
            raise ToolError(f"line {number}: no key separator {self.key_separator.decode(errors='replace')!r}")
        return key, value, headers


def lines(stream: IO[bytes]) -> Iterator[bytes]:
    """The lines of ``stream`` without their ends (``\\n``, ``\\r\\n``), as they arrive."""
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


@dataclass
class _Deliveries:
    """What the producer's delivery reports said."""

    acknowledged: int = 0
    failed: int = 0
    first_error: str | None = None
    #: partition -> [records, first offset, last offset]
    partitions: dict[int, list[int]] = field(default_factory=dict)

    @deferring_interrupts
    def report(self, error: Any, message: Any) -> None:
        if error is not None:
            self.failed += 1
            if self.first_error is None:
                self.first_error = f"{message.topic()}-{message.partition()}: {kafka_error_text(error)}"
            return
        self.acknowledged += 1  # with acks=0: sent (its offset is None, or -1: unknown)
        partition, offset = message.partition(), message.offset()
        seen = self.partitions.setdefault(partition, [0, -1, -1])
        seen[0] += 1
        if offset is not None and offset >= 0:
            seen[1] = offset if seen[1] < 0 else min(seen[1], offset)
            seen[2] = max(seen[2], offset)


class ProduceFailed(ToolError):
    """``produce``'s failure once it has started producing: ``summary`` is what landed (with --json,
    printed before the one line)."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


class ProduceInterrupted(KeyboardInterrupt):
    """Ctrl-C once ``produce`` has started producing: the one line says what landed (``summary``)."""

    def __init__(self, message: str, summary: dict[str, Any]) -> None:
        super().__init__(message)
        self.summary = summary


def produce_settings(acks: str, timeout: float, transactional_id: str | None, compression: str | None,
                     client: ClientSettings = NO_SETTINGS) -> dict[str, Any]:
    """The producer's own settings (the user's ``-X`` go over them).  message.timeout.ms is ``--timeout``
    (at most an hour, well within librdkafka's range); with a transaction transaction.timeout.ms is the
    larger of Kafka's default (60 s) and ``--timeout``, but never above the brokers' default
    transaction.max.timeout.ms (15 min, which a longer one exceeds: INVALID_TRANSACTION_TIMEOUT), and
    message.timeout.ms never above it (librdkafka refuses that)."""
    timeout_ms = max(1, int(timeout * 1000))
    own: dict[str, Any] = {
        "acks": acks,
        "enable.idempotence": acks == "all",
        "partitioner": "murmur2_random",  # where the Java client sends a key
        "allow.auto.create.topics": False,
        "message.timeout.ms": timeout_ms,
    }
    if compression is not None:
        own["compression.type"] = compression
    if transactional_id is not None:
        transaction_ms = min(_TRANSACTION_MAX_TIMEOUT_MS, max(_TRANSACTION_TIMEOUT_MS, timeout_ms))
        given = client.config.get("transaction.timeout.ms")
        limit = int(given) if isinstance(given, (int, str)) and str(given).isdigit() else transaction_ms
        own |= {"transactional.id": transactional_id, "transaction.timeout.ms": transaction_ms,
                "message.timeout.ms": min(timeout_ms, limit)}
    return own


def produce(bootstrap: str, topic: str, records: Iterable[bytes], *, line_format: LineFormat | None = None,
            partition: int | None = None, acks: str = "all", transactional_id: str | None = None,
            compression: str | None = None, timeout: float = DEFAULT_TIMEOUT_S, client: ClientSettings = NO_SETTINGS,
            progress: Progress | None = None) -> dict[str, Any]:
    """Produce a record per item of ``records`` (lines without their ends); returns the summary
    (``summary``).  Raises ToolError (one line) before producing, ``ProduceFailed`` once producing
    unless every record was acknowledged (with acks=0: sent), ``ProduceInterrupted`` on Ctrl-C (after
    aborting the transaction, or waiting for what was sent)."""
    from confluent_kafka import Producer

    if transactional_id is not None and acks != "all":
        raise UsageError("--transactional-id needs --acks all (a transactional producer is idempotent)")
    line_format = line_format or LineFormat()
    progress = progress or Progress("produced", False)
    config, said = librdkafka_client(bootstrap, client, **produce_settings(acks, timeout, transactional_id, compression, client))
    producer = Producer(config)
    partitions = _partitions(producer, topic, timeout, said)
    if partition is not None:
        check_partition(topic, partition, partitions)
    deliveries = _Deliveries()
    read = 0
    in_transaction = False

    def done(aborted: bool = False) -> dict[str, Any]:
        return summary(topic, read, _Deliveries() if aborted else deliveries, acks, transactional_id)

    try:
        if transactional_id is not None:
            _transaction_step(said, "initialising the transactional producer", timeout, producer.init_transactions)
            producer.begin_transaction()
            in_transaction = True
        stopped: str | None = None  # why reading stopped before the end of stdin
        for line in records:
            try:
                key, value, headers = line_format.record(line, read + 1)
                _send(producer, topic, key, value, headers, partition, deliveries, read + 1)
            except ToolError as exc:
                stopped = str(exc)
                break
            read += 1
            check_interrupt()
            if deliveries.failed:
                break  # the first record not acknowledged ends the reading
            progress.update(deliveries.acknowledged)
        left = _flush(producer, timeout)
        if deliveries.failed:
            stopped = f"{deliveries.failed} of {read} records not acknowledged ({deliveries.first_error})"
        elif left:
            stopped = said.explain(f"{left} of {read} records not acknowledged within {timeout:g}s")
        elif stopped is not None and not in_transaction:
            stopped += f" ({_count(deliveries.acknowledged)} before it produced)"
        if stopped is not None:
            raise ToolError(stopped)
        if in_transaction:
            _transaction_step(said, f"committing transaction {transactional_id!r}", timeout, producer.commit_transaction)
            in_transaction = False
    except KeyboardInterrupt:
        progress.clear()
        with contextlib.suppress(Exception):  # a second Ctrl-C ends the process here, by the signal
            if in_transaction:
                producer.abort_transaction(timeout)
            else:
                producer.flush(timeout)
        if not read and not in_transaction:
            raise
        landed = done(aborted=in_transaction)
        raise ProduceInterrupted(summary_line(landed, aborted=in_transaction, interrupted=True), landed) from None
    except ToolError as exc:
        if in_transaction:
            with contextlib.suppress(Exception):  # the coordinator aborts it at transaction.timeout.ms anyway
                producer.abort_transaction(timeout)
            raise ProduceFailed(f"transaction {transactional_id!r} aborted, none of its {_count(read)} written: {exc}",
                                done(aborted=True)) from exc
        if read or deliveries.acknowledged:
            raise ProduceFailed(str(exc), done()) from exc
        raise
    finally:
        progress.clear()
    return done()


def _flush(producer: Any, timeout: float) -> int:
    """``producer.flush`` within ``timeout``, in slices (Ctrl-C looked for between them); how many records are left."""
    deadline = time.monotonic() + timeout
    while True:
        left = int(producer.flush(max(0.0, min(SLICE_S, deadline - time.monotonic()))))
        check_interrupt()
        if not left or time.monotonic() >= deadline:
            return left


def _count(n: int) -> str:
    return f"{n} record{'s' if n != 1 else ''}"


def _send(producer: Any, topic: str, key: bytes | None, value: bytes, headers: list[tuple[str, bytes | None]],
          partition: int | None, deliveries: _Deliveries, number: int) -> None:
    from confluent_kafka import KafkaException

    extra: dict[str, Any] = {"partition": partition} if partition is not None else {}
    while True:
        try:
            producer.produce(topic, value, key, headers=headers or None, on_delivery=deliveries.report, **extra)
            break
        except BufferError:  # the local queue is full: let deliveries drain it
            producer.poll(0.1)
        except KafkaException as exc:  # e.g. a record above message.max.bytes
            raise ToolError(f"line {number}: {error_line(exc)}") from exc
    producer.poll(0)


def _transaction_step(said: ClientLog, what: str, timeout: float, step: Callable[[float], Any]) -> None:
    """A transactional call within ``timeout``, in slices: librdkafka lets init, commit and abort be
    called again after a timeout (retriable _TIMED_OUT), going on where the last call left off."""
    from confluent_kafka import KafkaError, KafkaException

    deadline = time.monotonic() + timeout
    while True:
        try:
            step(max(0.01, min(_TRANSACTION_SLICE_S, deadline - time.monotonic())))
            check_interrupt()
            return
        except KafkaException as exc:
            check_interrupt()
            error = exc.args[0] if exc.args else None
            timed_out = isinstance(error, KafkaError) and error.code() == KafkaError._TIMED_OUT and error.retriable()
            if not timed_out or time.monotonic() >= deadline:
                raise ToolError(said.explain(f"{what}: {error_line(exc)}")) from exc


def summary(topic: str, read: int, deliveries: _Deliveries, acks: str, transactional_id: str | None) -> dict[str, Any]:
    """What ``produce`` did: records read and acknowledged (None with acks=0), and per partition the
    records and their first and last offsets (None with acks=0)."""
    return {
        "topic": topic,
        "records": read,
        "acknowledged": deliveries.acknowledged if acks != "0" else None,
        "acks": acks,
        "transactional_id": transactional_id,
        "partitions": [{"partition": p, "records": n, "first_offset": first if first >= 0 else None,
                        "last_offset": last if last >= 0 else None}
                       for p, (n, first, last) in sorted(deliveries.partitions.items())],
    }


def _where(done: dict[str, Any]) -> str:
    """`` (partition 0: 2 at offsets 0-1; ...)``, or nothing."""
    parts = []
    for row in done["partitions"]:
        first, last = row["first_offset"], row["last_offset"]
        parts.append(f"partition {row['partition']}: {row['records']} at " + (f"offset {first}" if first == last else f"offsets {first}-{last}"))
    return f" ({'; '.join(parts)})" if parts else ""


def summary_line(done: dict[str, Any], aborted: bool = False, interrupted: bool = False) -> str:
    """``summary`` as the one line ``produce`` says on stderr; ``interrupted``: the message of the one
    line after Ctrl-C, saying what landed."""
    topic, read, acknowledged = done["topic"], done["records"], done["acknowledged"]
    if aborted:
        what = f"transaction {done['transactional_id']!r} aborted"
        return (f"interrupted: {what}, none of its {_count(read)} written to {topic}" if interrupted
                else f"T{what[1:]}: none of its {_count(read)} written to {topic}")
    if acknowledged is None:
        return f"{'interrupted after' if interrupted else 'Sent'} {_count(read)} {'sent ' if interrupted else ''}to {topic} " \
               f"(acks=0: not acknowledged)"
    if interrupted:
        return f"interrupted after {_count(acknowledged)} acknowledged by {topic}{_where(done)}"
    line = f"Produced {_count(acknowledged)} to {topic}"
    if done["transactional_id"] is not None:
        line += f" in transaction {done['transactional_id']!r} (committed)"
    return line + _where(done)


# -- consume -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """Where reading starts without a committed offset: ``beginning``, ``end``, ``offset`` N,
    ``from_end`` (N before the end) or ``timestamp`` (epoch ms N)."""

    how: str
    value: int = 0


def start_offset(text: str) -> Start:
    """argparse type of ``-o``: ``start``/``beginning``, ``end``, an offset N, or ``-N`` (N before the end)."""
    word = text.strip().lower()
    if word in {"start", "beginning", "earliest", "oldest"}:
        return Start("beginning")
    if word in {"end", "latest", "newest"}:
        return Start("end")
    try:
        if word.startswith("-"):
            return Start("from_end", positive_int(word[1:]))
        return Start("offset", non_negative_int(word))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected start, end, an offset N or -N (N records before the end), got {text!r}") from None


#: kcat's format directives (``-f``): what each one stands for.
FORMAT_DIRECTIVES = {"t": "topic", "p": "partition", "o": "offset", "T": "timestamp (epoch ms)", "k": "key",
                     "v": "value", "h": "headers (k=v,k=v)", "%": "a literal %"}
_DIRECTIVE = re.compile(r"%(.)|\\(.)", re.DOTALL)
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}


def record_format(text: str) -> list[str]:
    """argparse type of ``-f``: the format as a list of literal pieces and ``%x`` directives,
    backslash escapes (``\\n``, ``\\t``, ``\\\\``) read as kcat reads them.  A ``%`` or ``\\`` that ends
    the format with nothing after it is refused (kcat would print it, or drop it)."""
    text = text_value(text)
    pieces: list[str] = []
    literal = ""
    at = 0
    for match in _DIRECTIVE.finditer(text):
        literal += text[at:match.start()]
        at = match.end()
        directive, escape = match.group(1), match.group(2)
        if escape is not None:
            literal += _ESCAPES.get(escape, "\\" + escape)
        elif directive == "%":
            literal += "%"
        elif directive in FORMAT_DIRECTIVES:
            pieces += [literal, "%" + directive]
            literal = ""
        else:
            raise argparse.ArgumentTypeError(f"unknown directive %{directive} in {text!r} (known: "
                                             f"{', '.join('%' + d for d in FORMAT_DIRECTIVES if d != '%')})")
    rest = text[at:]
    if rest.endswith(("%", "\\")):  # what is left matched no directive or escape: a lone one at the end
        raise argparse.ArgumentTypeError(f"a lone {rest[-1]!r} at the end of {text!r} (%% is a %, \\\\ a backslash)")
    pieces.append(literal + rest)
    return [p for p in pieces if p]


def _headers_text(headers: list[tuple[str, bytes | None]] | None) -> bytes:
    return b",".join(name.encode() + (b"=" + value if value is not None else b"") for name, value in headers or ())


def format_record(message: Any, pieces: list[str]) -> bytes:
    """One record by ``-f``'s pieces; a null key or value is empty (as kcat writes it)."""
    fields: dict[str, Callable[[], bytes]] = {
        "%t": lambda: message.topic().encode(),
        "%p": lambda: str(message.partition()).encode(),
        "%o": lambda: str(message.offset()).encode(),
        "%T": lambda: str(message.timestamp()[1]).encode(),
        "%k": lambda: message.key() or b"",
        "%v": lambda: message.value() or b"",
        "%h": lambda: _headers_text(message.headers()),
    }
    return b"".join(fields[p]() if p in fields else p.encode() for p in pieces)


def _text(value: bytes | None, name: str, into: dict[str, Any]) -> None:
    """``into[name]``: the bytes as UTF-8 text, or as base64 with ``NAME_encoding: base64`` when they are not text."""
    if value is None:
        into[name] = None
        return
    try:
        into[name] = value.decode()
    except UnicodeDecodeError:
        into[name] = base64.b64encode(value).decode()
        into[f"{name}_encoding"] = "base64"


_TIMESTAMP_TYPES = {1: "CreateTime", 2: "LogAppendTime"}


def json_record(message: Any) -> bytes:
    """One record as a line of JSON: topic, partition, offset, timestamp (and its type), key, value, headers."""
    kind, timestamp = message.timestamp()
    record: dict[str, Any] = {"topic": message.topic(), "partition": message.partition(), "offset": message.offset(),
                              "timestamp": timestamp if timestamp >= 0 else None,
                              "timestamp_type": _TIMESTAMP_TYPES.get(kind)}
    _text(message.key(), "key", record)
    _text(message.value(), "value", record)
    headers = []
    for name, value in message.headers() or ():
        header: dict[str, Any] = {"key": name}
        _text(value, "value", header)
        headers.append(header)
    record["headers"] = headers
    return json.dumps(record, ensure_ascii=False).encode() + b"\n"


def plain_record(message: Any) -> bytes:
    """The value on its line, ``null`` for none (kafka-console-consumer's default output)."""
    value = message.value()
    return (b"null" if value is None else value) + b"\n"


@dataclass
class _Ends:
    """``--exit-at-end``: each partition's end as of the start, and which ones reached it."""

    targets: dict[int, int]
    done: set[int] = field(default_factory=set)

    def reached(self, partition: int, next_offset: int | None = None) -> None:
        if next_offset is None or next_offset >= self.targets.get(partition, 0):
            self.done.add(partition)

    def all_done(self, assigned: Iterable[int]) -> bool:
        assigned = set(assigned)
        return bool(assigned) and assigned <= self.done


def consume(bootstrap: str, topic: str, out: IO[bytes], *, start: Start = Start("end"), partitions: list[int] | None = None,
            group: str | None = None, isolation_level: str = "read_uncommitted", limit: int | None = None,
            exit_at_end: bool = False, render: Callable[[Any], bytes] = plain_record, timeout: float = DEFAULT_TIMEOUT_S,
            client: ClientSettings = NO_SETTINGS, progress: Progress | None = None) -> int:
    """Write records of ``topic`` to ``out`` (``render`` makes each one's bytes) until ``limit`` records,
    the ends (``exit_at_end``), Ctrl-C or a closed pipe; returns how many were written."""
    from confluent_kafka import Consumer

    if group is not None and partitions:
        raise UsageError("--partition cannot go with --group (the group assigns the partitions)")
    if group is not None and start.how not in {"beginning", "end"}:
        raise UsageError("an offset or --timestamp cannot go with --group: the group starts from its committed offsets "
                         "(--from-beginning, -o start or -o end say where to start without one)")
    progress = progress or Progress("consumed", False)
    config, said = librdkafka_client(bootstrap, client, **{
        "group.id": group if group is not None else f"onceflow-consume-{uuid.uuid4()}",  # never joined without --group
        "enable.auto.commit": group is not None,
        "enable.auto.offset.store": False,  # a record's offset is stored once it is written
        "auto.offset.reset": "earliest" if start.how == "beginning" else "latest",
        "isolation.level": isolation_level,
        "enable.partition.eof": True,
        # The end of a partition is known from a fetch that finds nothing more; with --exit-at-end the
        # broker need not hold that fetch open for long (Kafka's default is 500 ms).
        **({"fetch.wait.max.ms": 100} if exit_at_end else {}),
    })
    consumer = Consumer(config)
    try:  # Ctrl-C before the reading (a cluster slow to answer) is an interruption; while reading, the end
        return _consume_records(consumer, topic, out, start, partitions, group, limit, exit_at_end, render, timeout,
                                said, progress)
    finally:
        progress.clear()
        consumer.close()  # leaves the group, committing the stored offsets


def _consume_records(consumer: Any, topic: str, out: IO[bytes], start: Start, partitions: list[int] | None, group: str | None,
                     limit: int | None, exit_at_end: bool, render: Callable[[Any], bytes], timeout: float, said: ClientLog,
                     progress: Progress) -> int:
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    ids = _partitions(consumer, topic, timeout, said)
    for p in partitions or ():
        check_partition(topic, p, ids)
    chosen = sorted(set(partitions)) if partitions else ids
    marks = _watermarks(consumer, topic, chosen, timeout, said) if exit_at_end or start.how in {"offset", "from_end"} else {}
    ends = _Ends({p: high for p, (_, high) in marks.items()}) if exit_at_end else None
    assigned: set[int] = set()
    if group is None:
        starts = _start_offsets(consumer, topic, chosen, start, timeout, said, marks)
        consumer.assign([TopicPartition(topic, p, starts[p]) for p in chosen])
        assigned.update(chosen)
        if ends is not None:  # a partition read from its end (or beyond) is done before it starts
            for p in chosen:
                first = marks[p][0] if starts[p] == OFFSET_BEGINNING else marks[p][1] if starts[p] == OFFSET_END else starts[p]
                if first >= ends.targets[p]:
                    ends.reached(p)
    else:
        @deferring_interrupts
        def on_assign(_consumer: Any, tps: list[Any]) -> None:
            assigned.update(tp.partition for tp in tps)

        @deferring_interrupts
        def on_revoke(_consumer: Any, tps: list[Any]) -> None:
            assigned.difference_update(tp.partition for tp in tps)

        consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
    check_interrupt()
    return _read(consumer, topic, out, render, limit, ends, assigned, progress, commit=group is not None)


def _watermarks(consumer: Any, topic: str, partitions: list[int], timeout: float, said: ClientLog) -> dict[int, tuple[int, int]]:
    """Each partition's (low, high) watermarks now; high is the last stable offset for a read_committed consumer."""
    from confluent_kafka import KafkaException, TopicPartition

    marks = {}
    for p in partitions:
        where = TopicPartition(topic, p)
        try:
            marks[p] = sliced(lambda seconds: consumer.get_watermark_offsets(where, timeout=seconds, cached=False),  # noqa: B023
                               timeout)
        except KafkaException as exc:
            raise ToolError(said.explain(f"the offsets of {topic}-{p}: {error_line(exc)}")) from exc
    return marks


def _start_offsets(consumer: Any, topic: str, partitions: list[int], start: Start, timeout: float, said: ClientLog,
                   marks: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Where each partition's reading starts (librdkafka's logical offsets for the beginning and the end)."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, KafkaException, TopicPartition

    if start.how == "beginning":
        return dict.fromkeys(partitions, OFFSET_BEGINNING)
    if start.how == "end":
        return dict.fromkeys(partitions, OFFSET_END)
    if start.how == "timestamp":
        try:
            wanted = [TopicPartition(topic, p, start.value) for p in partitions]
            found = sliced(lambda seconds: consumer.offsets_for_times(wanted, timeout=seconds), timeout)
        except KafkaException as exc:
            raise ToolError(said.explain(f"the offsets of {topic} for time {start.value}: {error_line(exc)}")) from exc
        return {tp.partition: tp.offset if tp.offset >= 0 else OFFSET_END for tp in found}
    if start.how == "from_end":
        return {p: max(low, high - start.value) for p, (low, high) in marks.items()}
    return {p: min(max(start.value, low), high) for p, (low, high) in marks.items()}


def _read(consumer: Any, topic: str, out: IO[bytes], render: Callable[[Any], bytes], limit: int | None, ends: _Ends | None,
          assigned: set[int], progress: Progress, commit: bool) -> int:
    """The consuming loop; returns the records written.  Offsets are stored (for the group's commit)
    only after the records are flushed to ``out``."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    written = 0
    try:
        while (limit is None or written < limit) and not (ends is not None and ends.all_done(assigned)):
            # The first record (or end of partition) as soon as it comes, then what else is there already:
            # consume() alone would wait its whole timeout for a full batch.
            batch = consumer.consume(num_messages=1, timeout=_CONSUME_WAIT_S)
            room = min(_BATCH, limit - written) if limit else _BATCH
            if batch and room > 1:
                batch += consumer.consume(num_messages=room - 1, timeout=0)
            check_interrupt()
            nexts: dict[int, int] = {}
            failure = None
            chunk = []
            for message in batch:
                error = message.error()
                if error is None:
                    chunk.append(render(message))
                    nexts[message.partition()] = message.offset() + 1
                    if ends is not None:
                        ends.reached(message.partition(), message.offset() + 1)
                elif error.code() == KafkaError._PARTITION_EOF:
                    # The end: past any transaction marker after the last record, so the group's lag is 0 there.
                    nexts[message.partition()] = max(nexts.get(message.partition(), 0), message.offset())
                    if ends is not None:
                        ends.reached(message.partition())
                elif error.fatal() or not error.retriable():
                    failure = f"{topic}-{message.partition()}: {kafka_error_text(error)}"
                    break
            out.write(b"".join(chunk))  # a Ctrl-C waits for it: what is counted is what was written
            out.flush()
            written += len(chunk)
            if commit and nexts:
                try:
                    consumer.store_offsets(offsets=[TopicPartition(topic, p, o) for p, o in nexts.items()])
                except KafkaException:
                    pass  # the partition was revoked meanwhile: its next owner reads from the last commit
            if failure is not None:
                raise ToolError(failure)
            progress.update(written)
    except KeyboardInterrupt:
        pass  # Ctrl-C ends the reading; the consumer is closed by the caller
    except BrokenPipeError:
        _silence(out)  # the reader went away (| head): stop, quietly
    return written


def _silence(out: IO[bytes]) -> None:
    """Point ``out``'s file descriptor at /dev/null, so that nothing more (not even the interpreter's
    last flush) fails on the closed pipe."""
    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), out.fileno())
    except (OSError, ValueError, AttributeError):
        pass


# -- command line --------------------------------------------------------------------------------


def header(text: str) -> tuple[str, str]:
    """argparse type of ``-H``: ``key=value`` in UTF-8."""
    return key_value(text_value(text))


def add_commands(actions: Any) -> None:
    """``topics produce`` and ``topics consume`` on ``onceflow topics``'s command registry."""
    p = add_command(actions, "produce", "produce stdin's lines as records (kafka-console-producer, rpk topic produce)", _produce)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic to write to")
    keys = p.add_mutually_exclusive_group()
    keys.add_argument("-k", "--key", type=text_value, metavar="KEY", help="the key of every record (default: none)")
    keys.add_argument("--key-separator", type=text_value, metavar="SEP",
                      help=r"each line is KEY SEP VALUE (split at the first SEP; '\t' is a tab)")
    p.add_argument("-H", "--header", dest="headers", type=header, action="append", default=[], metavar="KEY=VALUE",
                   help="a header of every record, repeatable")
    p.add_argument("--header-separator", type=text_value, metavar="SEP",
                   help="each line starts with its headers, k=v,k=v, then SEP (before the key, if any)")
    p.add_argument("-p", "--partition", type=non_negative_int, metavar="N",
                   help="every record to partition N (default: by key as the Java client does; any partition for no key)")
    p.add_argument("--acks", choices=["all", "-1", "1", "0"], default="all",
                   help="all (default, idempotent): every in-sync replica has it; 1: the leader has it; 0: no acknowledgement")
    p.add_argument("--transactional-id", type=name_text, metavar="ID",
                   help="all of stdin in one transaction, committed at its end; aborted on a failure or Ctrl-C")
    p.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], help="(default none)")

    p = add_command(actions, "consume", "print a topic's records (kafka-console-consumer, kcat -C, rpk topic consume)", _consume)
    p.add_argument("topic", type=topic_name, metavar="TOPIC", help="the topic to read")
    where = p.add_mutually_exclusive_group()
    where.add_argument("-o", "--offset", type=start_offset, metavar="OFFSET",
                       help="where to start: start, end (default), an offset N, or -N (N records before the end); per partition")
    where.add_argument("--from-beginning", action="store_true", help="start at the beginning (-o start)")
    where.add_argument("--timestamp", type=timestamp_ms, metavar="TIME",
                       help="start at the first record at or after TIME (ISO-8601, e.g. 2026-11-27T15:30:00Z, or epoch ms)")
    p.add_argument("-p", "--partition", dest="partitions", type=non_negative_int, action="append", default=[], metavar="N",
                   help="only partition N, repeatable (default: all)")
    p.add_argument("-g", "--group", type=name_text, metavar="GROUP",
                   help="consume as a member of GROUP, from its committed offsets, committing what was printed "
                        "(default: no group, nothing committed)")
    p.add_argument("--isolation-level", choices=["read_uncommitted", "read_committed"], default="read_uncommitted",
                   help="read_uncommitted (default, as kafka-console-consumer): open and aborted transactions' records too")
    p.add_argument("-n", "--num", "--max-messages", dest="num", type=positive_int, metavar="N", help="stop after N records")
    p.add_argument("-e", "--exit-at-end", action="store_true",
                   help="stop once every partition read has reached its end as of the start")
    p.add_argument("-f", "--format", type=record_format, metavar="FORMAT",
                   help=r"kcat's format: %%t topic, %%p partition, %%o offset, %%T timestamp (ms), %%k key, %%v value, "
                        r"%%h headers, %%%% a %%; \n newline, \t tab (e.g. '%%k\t%%v\n')")


def _produce(args: argparse.Namespace) -> dict[str, Any] | None:
    def separator(text: str | None) -> bytes | None:
        if text is None:
            return None
        if not text:
            raise UsageError("a separator cannot be empty")
        return _unescape(text).encode()

    line_format = LineFormat(
        key=args.key.encode() if args.key is not None else None,
        key_separator=separator(args.key_separator),
        header_separator=separator(args.header_separator),
        headers=[(name, value.encode()) for name, value in args.headers],
    )
    stdin = sys.stdin.buffer
    progress = Progress("produced", is_terminal(sys.stderr) and not is_terminal(sys.stdin))
    try:
        done = produce(args.bootstrap_servers, args.topic, lines(stdin), line_format=line_format, partition=args.partition,
                       acks="all" if args.acks == "-1" else args.acks, transactional_id=args.transactional_id,
                       compression=args.compression, timeout=args.timeout, client=args.client, progress=progress)
    except (ProduceFailed, ProduceInterrupted) as exc:
        if args.json:  # what landed, for a script, before the one line
            sys.stdout.write(to_json(exc.summary))
            sys.stdout.flush()
        raise
    if args.json:
        return done
    print(summary_line(done), file=sys.stderr)
    return None


def _consume(args: argparse.Namespace) -> None:
    if args.json and args.format is not None:
        raise UsageError("--json and --format cannot go together")
    start = args.offset or (Start("beginning") if args.from_beginning else None)
    if args.timestamp is not None:
        start = Start("timestamp", args.timestamp)
    render: Callable[[Any], bytes] = plain_record
    if args.json:
        render = json_record
    elif args.format is not None:
        pieces = args.format
        render = lambda message: format_record(message, pieces)  # noqa: E731
    sys.stdout.flush()
    out = sys.stdout.buffer
    progress = Progress("consumed", is_terminal(sys.stderr) and not is_terminal(sys.stdout))
    count = consume(args.bootstrap_servers, args.topic, out, start=start or Start("end"), partitions=args.partitions,
                    group=args.group, isolation_level=args.isolation_level, limit=args.num, exit_at_end=args.exit_at_end,
                    render=render, timeout=args.timeout, client=args.client, progress=progress)
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return None
