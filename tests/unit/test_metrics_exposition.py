"""``metrics.exposition.render`` writes exactly what ``prometheus_client.generate_latest`` writes,
for every kind of family, name, label value and number the text format has to carry."""

from __future__ import annotations

import math
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
    StateSetMetricFamily,
    SummaryMetricFamily,
    UnknownMetricFamily,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from onceflow.metrics.exposition import render

NUMBERS = [0, 1, -1, 7, 999_999, 1_000_000, 1_234_567, 10**15, 10**15 - 1, -(10**15), 10**16, 2**63, -(2**63),
           True, False, 0.0, -0.0, 0.1, 1.5, 123456.75, 1234567.5, 1e-7, 1e21, -2.5e9, math.inf, -math.inf, math.nan]
LABEL_VALUES = ["plain", "", "with space", 'quote"d', "back\\slash", "new\nline", "ünïcödé-topic", "__consumer_offsets",
                "a.b-c_d", "\\n literal"]


class _Families(Collector):
    def collect(self) -> Iterator[Metric]:
        gauge = GaugeMetricFamily("kafka_log_log_logendoffset", "Offset after the last record.", labels=["topic", "partition"])
        for i, value in enumerate(NUMBERS):
            gauge.add_metric([LABEL_VALUES[i % len(LABEL_VALUES)], str(i)], value)
        yield gauge
        # One labels dict shared by samples of several families, as the collector shares one per partition.
        shared = [{"topic": value, "partition": str(i)} for i, value in enumerate(LABEL_VALUES)]
        for name in ("onceflow_partition_high_watermark", "onceflow_partition_lso_lag"):
            family = GaugeMetricFamily(name, "Per partition.", labels=["topic", "partition"])
            family.samples.extend(Sample(name, labels, i * 1000) for i, labels in enumerate(shared))
            yield family
        yield GaugeMetricFamily("onceflow_no_labels", "Help with a back\\slash and a new\nline.", value=3)
        counter = CounterMetricFamily("kafka_network_requestmetrics_requests", "Requests.", labels=["request", "version"],
                                      created=1700000000.5)
        counter.add_metric(["Produce", "11"], 12345678, created=1700000001.25)
        counter.add_metric(["Fetch", "16"], 3, timestamp=1700000002.5)
        yield counter
        yield CounterMetricFamily("already_total", "A counter named with _total.", value=2)
        hist = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems", "Latency.", labels=["request"])
        hist.add_metric(["Produce"], [("0.1", 1), ("0.25", 3), ("1000.0", 9), ("+Inf", 10)], 1234.5)
        yield hist
        gh = GaugeHistogramMetricFamily("queue_sizes", "Gauge histogram.", labels=["q"])
        gh.add_metric(["a"], [("1.0", 2), ("+Inf", 5)], gsum_value=7)
        yield gh
        summary = SummaryMetricFamily("rpc_ms", "Summary.", labels=["kind"])
        summary.add_metric(["x"], count_value=4, sum_value=2.5)
        yield summary
        yield InfoMetricFamily("build", "Build info.", value={"version": "1.2.3", "commit": 'a"b'})
        yield StateSetMetricFamily("group_state", "State set.", value={"Stable": True, "Empty": False})
        yield UnknownMetricFamily("mystery", "Unknown type.", value=1.25)
        odd = GaugeMetricFamily("name.with.dots-and-ü", "A name outside the legacy character set.",
                                labels=["label.with.dots", "ok_label", "zz", "aa"])
        odd.add_metric(["x", "y", "z", "w"], 1)
        yield odd


def _registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families())
    return registry


def test_render_matches_generate_latest() -> None:
    registry = _registry()
    assert render(registry.collect()) == generate_latest(registry)


def test_render_matches_generate_latest_twice_and_with_the_process_collector() -> None:
    """Names are cached after the first scrape; the second must not differ."""
    registry = _registry()
    ProcessCollector(registry=registry)
    for _ in range(2):
        expected = generate_latest(registry)
        got = render(registry.collect())
        # The process collector's CPU seconds may move between the two calls; compare the rest.
        strip = [line for line in expected.splitlines() if b"process_cpu_seconds_total " not in line]
        assert [line for line in got.splitlines() if b"process_cpu_seconds_total " not in line] == strip
