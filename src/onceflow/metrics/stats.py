"""Counters and histograms the broker's components keep about themselves (plain Python, no I/O).

Theory of operation: a component that has something to count owns a small
stats object and bumps it where the event happens: the network layer per
request (``RequestStats``), the group commit per fsync (``FlushStats``), the
transaction coordinator per completed transaction (``TxnStats``).  Nothing is
counted per record.  These are plain ints and bucket arrays, touched only on
the event loop thread, so they need no locks and cost a few dict operations
per request; ``metrics.collector`` turns them into Prometheus families at
scrape time, together with what it samples from the components then.

Histograms keep Prometheus' shape (upper bounds, a count per bucket, a sum),
so the collector hands them over without converting anything.
"""

from __future__ import annotations

import dataclasses
import typing
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

#: Milliseconds: request latency, fsync, EndTxn -> Complete (sub-millisecond up to 30 s).
LATENCY_MS_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)
#: How many waiters (requests, coordinator records) one group-committed fsync answered.
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
#: The isolation levels last seen per client are kept for at most this many clients.
MAX_CLIENTS_TRACKED = 10_000


class Histogram:
    """Prometheus-shaped: ``counts[i]`` observations <= ``bounds[i]``, the last one above them all."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, int]]:
        """(le, cumulative count) pairs, ``+Inf`` last, as Prometheus' exposition wants them."""
        out, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts, strict=True):
            total += n
            out.append(("+Inf" if bound == float("inf") else repr(float(bound)), total))
        return out


@dataclass(slots=True)
class RequestStats:
    """The network layer's counts (Kafka's RequestMetrics and socket-server-metrics)."""

    #: (api key, api version) -> requests received.
    requests: dict[tuple[int, int], int] = field(default_factory=dict)
    #: (api key, error code) -> responses carrying it, every error code of a response counted
    #: (Kafka's ErrorsPerSec, NONE included).
    errors: dict[tuple[int, int], int] = field(default_factory=dict)
    #: api key -> time from the request's arrival to its response being handed to the socket.
    latency_ms: dict[int, Histogram] = field(default_factory=dict)
    bytes_in: int = 0
    bytes_out: int = 0
    connections_created: int = 0
    connections_closed: int = 0
    #: reason -> how often a connection stopped reading (``in_flight``: queued.max.requests
    #: reached; ``write_buffer``: the client does not read its answers).
    backpressure: dict[str, int] = field(default_factory=dict)
    #: (client id, host) -> the isolation level of its last Fetch (0 read_uncommitted, 1 read_committed).
    fetch_isolation: dict[tuple[str, str], int] = field(default_factory=dict)
    #: group id -> the isolation level its members were last seen fetching with (``metrics.views``).
    group_isolation: dict[str, int] = field(default_factory=dict)

    def received(self, api_key: int, api_version: int, size: int, client_id: str | None, host: str, body: Any) -> None:
        key = (api_key, api_version)
        self.requests[key] = self.requests.get(key, 0) + 1
        self.bytes_in += size + 4
        if api_key == 1:  # Fetch: remember how this client reads, for group lag (metrics.views)
            clients = self.fetch_isolation
            if len(clients) >= MAX_CLIENTS_TRACKED and (client_id or "", host) not in clients:
                clients.pop(next(iter(clients)))
            clients[(client_id or "", host)] = int(getattr(body, "isolation_level", 0))

    def answered(self, api_key: int, body: Any, elapsed_ms: float, size: int) -> None:
        self.bytes_out += size
        hist = self.latency_ms.get(api_key)
        if hist is None:
            hist = self.latency_ms[api_key] = Histogram(LATENCY_MS_BUCKETS)
        hist.observe(elapsed_ms)
        errors = self.errors
        for code in error_codes(body):
            key = (api_key, code)
            errors[key] = errors.get(key, 0) + 1

    def paused(self, reason: str) -> None:
        self.backpressure[reason] = self.backpressure.get(reason, 0) + 1


@dataclass(slots=True)
class FlushStats:
    """The group commit's: how long each fsync took, and how many waiters it answered."""

    fsync_ms: Histogram = field(default_factory=lambda: Histogram(LATENCY_MS_BUCKETS))
    batch_waiters: Histogram = field(default_factory=lambda: Histogram(BATCH_BUCKETS))


@dataclass(slots=True)
class TxnStats:
    """The transaction coordinator's, counted from the moment each change is durable."""

    commits: int = 0
    aborts: int = 0
    #: Transactions the coordinator aborted because they outlived their transaction.timeout.ms.
    timeouts: int = 0
    #: InitProducerId calls that took an initialized transactional id over from a previous
    #: instance (its epoch bumped: the old instance is fenced).
    fenced: int = 0
    #: From the PrepareCommit/PrepareAbort record to the Complete record (every marker written).
    end_to_complete_ms: Histogram = field(default_factory=lambda: Histogram(LATENCY_MS_BUCKETS))


# -- error codes of a response ------------------------------------------------------------

#: Per response class: its error-code fields, and the fields holding entities that may have more.
_Plan = tuple[tuple[str, ...], tuple[tuple[str, bool], ...]]
_plans: dict[type, _Plan] = {}


def error_codes(entity: Any) -> Iterator[int]:
    """Every error code in a response entity, nested ones included (Kafka's ``errorCounts``)."""
    codes, children = _plan(type(entity))
    for name in codes:
        yield int(getattr(entity, name))
    for name, many in children:
        value = getattr(entity, name)
        if value is None:
            continue
        if many:
            for child in value:
                yield from error_codes(child)
        else:
            yield from error_codes(value)


def _plan(cls: type) -> _Plan:
    plan = _plans.get(cls)
    if plan is None:
        plan = _plans[cls] = _make_plan(cls, set())
    return plan


def _make_plan(cls: type, seen: set[type]) -> _Plan:
    if not dataclasses.is_dataclass(cls) or cls in seen:
        return (), ()
    seen = seen | {cls}
    codes: list[str] = []
    children: list[tuple[str, bool]] = []
    for f in dataclasses.fields(cls):
        kind: Any = f.type
        if kind is ErrorCode:
            codes.append(f.name)
            continue
        many = typing.get_origin(kind) is tuple
        inner = [a for a in typing.get_args(kind) if a is not Ellipsis and a is not type(None)] or [kind]
        for sub in inner:
            if isinstance(sub, type) and dataclasses.is_dataclass(sub):
                sub_plan = _plans.get(sub) or _make_plan(sub, seen)
                _plans.setdefault(sub, sub_plan)
                if sub_plan != ((), ()):
                    children.append((f.name, many))
                break
    return tuple(codes), tuple(children)
