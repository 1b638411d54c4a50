"""The console: one server-rendered page and the JSON it refreshes from, every second.

Theory of operation: ``state`` gathers the same views the metrics use
(``metrics.views``) into one JSON document: open transactions sorted by age
with the hanging candidates flagged (KIP-664), partitions with their high
watermark, last stable offset and LSO lag, groups with their members and lag
measured the way they read, and the Spark sinks' progress.  ``page`` is a
static HTML page with one small script, no build step: it fetches
``/api/state`` once a second, redraws the tables, and keeps the last five
minutes of each partition's LSO lag in the browser to draw it.  An abort
button is drawn only when the broker allows it (``console.allow.abort``).
"""

from __future__ import annotations

from dataclasses import asdict
from importlib import resources
from typing import TYPE_CHECKING, Any

from .. import __version__
from . import views

if TYPE_CHECKING:
    from ..broker.broker import Broker


def state(broker: Broker, allow_abort: bool) -> dict[str, Any]:
    now = broker.clock.now_ms()
    partitions = views.partitions(broker, now)
    by_partition = {(r.topic, r.partition): r for r in partitions}
    return {
        "broker": {"node_id": broker.node_id, "cluster_id": broker.registry.cluster_id,
                   "bootstrap": f"{broker.advertised_host}:{broker.advertised_port}", "version": __version__,
                   "now_ms": now, "connections": len(broker.state.connections)},
        "allow_abort": allow_abort,
        "transactions": [asdict(t) for t in views.open_transactions(broker, now)],
        "partitions": [{**asdict(r), "lso_lag": r.lso_lag} for r in partitions],
        "late_partitions": views.late_partitions(partitions),
        "groups": [asdict(g) for g in views.groups(broker, by_partition)],
        "pipelines": [asdict(p) for p in views.pipelines(broker)],
    }


def page() -> bytes:
    return resources.files(__package__).joinpath("console.html").read_bytes()
