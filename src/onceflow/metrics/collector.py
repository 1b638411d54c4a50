"""The broker's Prometheus metrics, with Kafka's metric names, built at scrape time.

Theory of operation: ``BrokerCollector.collect`` runs on the broker's event
loop when ``/metrics`` is asked for (``metrics.http``).  It reads the
counters the components keep (``metrics.stats``) and samples the rest from
the components themselves (``metrics.views``), and hands both to
``prometheus_client`` as metric families, which render Prometheus' text
format.  Nothing is updated in the background and nothing per record.

Names: a Kafka metric keeps its JMX name in the form the Prometheus JMX
exporter gives it, ``<domain>_<type>_<name>`` in lower case
(``kafka.server:type=ReplicaManager,name=PartitionsWithLateTransactionsCount``
becomes ``kafka_server_replicamanager_partitionswithlatetransactionscount``);
a figure Kafka has no metric for is ``onceflow_*``; consumer-group lag uses
kafka_exporter's ``kafka_consumergroup_*``, which dashboards already chart.
``docs/observability.md`` has the table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from ..coordinator.transaction.metadata import TransactionState
from ..protocol import apis
from ..protocol.errors import ErrorCode
from . import views
from .stats import Histogram

if TYPE_CHECKING:
    from ..broker.broker import Broker


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _histogram(name: str, doc: str, labels: list[str], series: Iterable[tuple[list[str], Histogram]]) -> Metric:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for values, hist in series:
        family.add_metric(values, hist.cumulative(), hist.sum)
    return family


def _per_api(name: str, doc: str, label: str, counts: dict[tuple[int, int], int],
             render: Callable[[int], str]) -> Metric:
    """A counter per (API, second key): its version, or an error code."""
    family = CounterMetricFamily(name, doc, labels=["request", label])
    for (key, second), n in sorted(counts.items()):
        family.add_metric([apis.api_name(key), render(second)], n)
    return family


class BrokerCollector(Collector):
    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    def collect(self) -> Iterator[Metric]:
        broker = self._broker
        now = broker.clock.now_ms()
        partitions = views.partitions(broker, now)
        yield from self._partitions(partitions)
        yield from self._network()
        yield from self._transactions(now, partitions)
        yield from self._groups({(r.topic, r.partition): r for r in partitions})
        yield from self._pipelines()

    # -- partitions and the replica manager -------------------------------------------------

    @staticmethod
    def _partitions(rows: list[views.PartitionRow]) -> Iterator[Metric]:
        labels = ["topic", "partition"]
        per_partition: list[tuple[str, str, Callable[[views.PartitionRow], int]]] = [
            ("kafka_log_log_logstartoffset", "First offset of the partition (Kafka's Log LogStartOffset).",
             lambda r: r.log_start_offset),
            ("kafka_log_log_logendoffset", "Offset after the last record (Kafka's Log LogEndOffset).",
             lambda r: r.log_end_offset),
            ("kafka_log_log_size", "Bytes on disk (Kafka's Log Size).", lambda r: r.size_bytes),
            ("kafka_log_log_numlogsegments", "Segments (Kafka's Log NumLogSegments).", lambda r: r.segments),
            ("onceflow_partition_high_watermark", "High watermark: what is durable and readable read_uncommitted.",
             lambda r: r.high_watermark),
            ("onceflow_partition_last_stable_offset",
             "Last stable offset: read_committed consumers read below it.", lambda r: r.last_stable_offset),
            ("onceflow_partition_lso_lag", "High watermark minus last stable offset: records an open "
             "transaction hides from read_committed consumers.", lambda r: r.lso_lag),
            ("onceflow_partition_open_transactions", "Transactions open on the partition.",
             lambda r: r.open_transactions),
        ]
        # One labels dict per partition, shared by its samples in every family: what add_metric
        # would build, built once.
        row_labels = [{"topic": r.topic, "partition": str(r.partition)} for r in rows]
        for name, doc, value in per_partition:
            family = GaugeMetricFamily(name, doc, labels=labels)
            family.samples.extend([Sample(family.name, row_labels[i], value(r)) for i, r in enumerate(rows)])
            yield family
        age = GaugeMetricFamily("onceflow_partition_oldest_open_transaction_age_ms",
                                "Age of the oldest transaction open on the partition (only partitions with one).",
                                labels=labels)
        for i, r in enumerate(rows):
            if r.oldest_transaction_age_ms is not None:
                age.samples.append(Sample(age.name, row_labels[i], r.oldest_transaction_age_ms))
        yield age
        yield GaugeMetricFamily("kafka_server_replicamanager_partitioncount", "Partitions (Kafka's PartitionCount).",
                                value=len(rows))
        yield GaugeMetricFamily("kafka_server_replicamanager_produceridcount",
                                "Producer ids with state on this broker's partitions (KIP-854 ProducerIdCount).",
                                value=sum(r.producer_ids for r in rows))
        yield GaugeMetricFamily("kafka_server_replicamanager_partitionswithlatetransactionscount",
                                "Partitions whose oldest open transaction is past transaction.max.timeout.ms + "
                                "5 minutes (KIP-664 PartitionsWithLateTransactionsCount).",
                                value=views.late_partitions(rows))

    # -- requests and the network -------------------------------------------------------------

    def _network(self) -> Iterator[Metric]:
        broker = self._broker
        stats = broker.state.stats
        yield _per_api("kafka_network_requestmetrics_requests",
                       "Requests received (Kafka's RequestMetrics RequestsPerSec).", "version", stats.requests, str)
        yield _per_api("kafka_network_requestmetrics_errors",
                       "Error codes in responses, NONE included (Kafka's RequestMetrics ErrorsPerSec).", "error",
                       stats.errors, _error_name)
        yield _histogram("kafka_network_requestmetrics_totaltimems",
                         "Milliseconds from a request's arrival to its response leaving "
                         "(Kafka's RequestMetrics TotalTimeMs).", ["request"],
                         ((([apis.api_name(k)]), h) for k, h in sorted(stats.latency_ms.items())))
        yield CounterMetricFamily("kafka_server_socket_server_metrics_incoming_byte",
                                  "Request bytes received (Kafka's socket-server-metrics incoming-byte-total).",
                                  value=stats.bytes_in)
        yield CounterMetricFamily("kafka_server_socket_server_metrics_outgoing_byte",
                                  "Response bytes sent (Kafka's socket-server-metrics outgoing-byte-total).",
                                  value=stats.bytes_out)
        yield GaugeMetricFamily("kafka_server_socket_server_metrics_connection_count",
                                "Open client connections (Kafka's socket-server-metrics connection-count).",
                                value=len(broker.state.connections))
        yield CounterMetricFamily("kafka_server_socket_server_metrics_connection_creation",
                                  "Connections accepted (Kafka's connection-creation-total).",
                                  value=stats.connections_created)
        yield CounterMetricFamily("kafka_server_socket_server_metrics_connection_close",
                                  "Connections closed (Kafka's connection-close-total).",
                                  value=stats.connections_closed)
        pauses = CounterMetricFamily("onceflow_server_backpressure_pauses",
                                     "Times a connection stopped reading: in_flight (queued.max.requests reached) "
                                     "or write_buffer (its client does not read the answers).", labels=["reason"])
        for reason in ("in_flight", "write_buffer"):
            pauses.add_metric([reason], stats.backpressure.get(reason, 0))
        yield pauses
        flush = broker.group_commit.stats
        yield _histogram("kafka_log_logflushstats_logflushrateandtimems",
                         "Milliseconds per group-committed fsync (Kafka's LogFlushStats LogFlushRateAndTimeMs).",
                         [], [([], flush.fsync_ms)])
        yield _histogram("onceflow_group_commit_batch_waiters",
                         "Writes (acks=all produces, coordinator records) one fsync made durable.",
                         [], [([], flush.batch_waiters)])

    # -- transactions -------------------------------------------------------------------------

    def _transactions(self, now: int, partitions: list[views.PartitionRow]) -> Iterator[Metric]:
        txns = self._broker.txns
        by_state = dict.fromkeys((s.kafka_name for s in TransactionState if s is not TransactionState.DEAD), 0)
        oldest = None
        open_count = 0
        for md in txns.transactions():
            by_state[md.state.kafka_name] = by_state.get(md.state.kafka_name, 0) + 1
            if md.has_pending_transaction:
                open_count += 1
                if md.txn_start_timestamp >= 0:
                    age = max(0, now - md.txn_start_timestamp)
                    oldest = age if oldest is None else max(oldest, age)
        states = GaugeMetricFamily("onceflow_transaction_coordinator_transactional_ids",
                                   "Transactional ids by state.", labels=["state"])
        for state, n in by_state.items():
            states.add_metric([state], n)
        yield states
        yield GaugeMetricFamily("onceflow_transaction_coordinator_open_transactions",
                                "Transactions open (Ongoing, PrepareCommit, PrepareAbort).", value=open_count)
        yield GaugeMetricFamily("onceflow_transaction_coordinator_oldest_open_transaction_age_ms",
                                "Age of the oldest open transaction (0: none open).", value=oldest or 0)
        stats = txns.stats
        for name, doc, value in (
            ("commits", "Transactions committed (CompleteCommit written).", stats.commits),
            ("aborts", "Transactions aborted (CompleteAbort written), timeouts included.", stats.aborts),
            ("timeouts", "Transactions aborted for outliving their transaction.timeout.ms.", stats.timeouts),
            ("fenced_producers", "Producer instances fenced by a new instance's InitProducerId.", stats.fenced),
        ):
            yield CounterMetricFamily(f"onceflow_transaction_coordinator_{name}", doc, value=value)
        yield _histogram("onceflow_transaction_coordinator_end_to_complete_ms",
                         "Milliseconds from the PrepareCommit/PrepareAbort record to the Complete record "
                         "(every marker written).", [], [([], stats.end_to_complete_ms)])

    # -- groups -------------------------------------------------------------------------------

    def _groups(self, by_partition: dict[tuple[str, int], views.PartitionRow]) -> Iterator[Metric]:
        rows = views.groups(self._broker, by_partition)
        count = GaugeMetricFamily("kafka_server_group_coordinator_metrics_group_count",
                                  "Groups by protocol (Kafka's group-coordinator-metrics group-count, KIP-848).",
                                  labels=["protocol"])
        for protocol in ("classic", "consumer"):
            count.add_metric([protocol], sum(1 for g in rows if g.group_type == protocol))
        yield count
        state = GaugeMetricFamily("onceflow_group_state", "1 for the group's current state.",
                                  labels=["consumergroup", "type", "state"])
        members = GaugeMetricFamily("kafka_consumergroup_members", "Members of the group.", labels=["consumergroup"])
        current = GaugeMetricFamily("kafka_consumergroup_current_offset", "The group's committed offset.",
                                    labels=["consumergroup", "topic", "partition"])
        lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                "Records the group has yet to read: to the last stable offset for a group reading "
                                "read_committed, to the high watermark otherwise (isolation_level says which).",
                                labels=["consumergroup", "topic", "partition", "isolation_level"])
        for g in rows:
            state.add_metric([g.group_id, g.group_type, g.state], 1)
            members.add_metric([g.group_id], g.members)
            for p in g.partitions:
                current.add_metric([g.group_id, p.topic, str(p.partition)], p.committed)
                lag.add_metric([g.group_id, p.topic, str(p.partition), g.isolation_level], p.lag)
        yield from (state, members, current, lag)

    # -- pipelines ----------------------------------------------------------------------------

    def _pipelines(self) -> Iterator[Metric]:
        batch = GaugeMetricFamily("onceflow_pipeline_slot_batch",
                                  "The micro-batch each slot of a Spark sink last wrote (from its progress topic).",
                                  labels=["progress_topic", "slot"])
        behind = GaugeMetricFamily("onceflow_pipeline_slot_lag_batches",
                                   "Micro-batches a slot is behind its query's latest written one.",
                                   labels=["progress_topic", "slot"])
        for p in views.pipelines(self._broker):
            for s in p.slots:
                if s.batch is not None:
                    batch.add_metric([p.progress_topic, str(s.slot)], s.batch)
                    behind.add_metric([p.progress_topic, str(s.slot)], s.lag)
        yield from (batch, behind)
