"""Seeing inside the broker: Prometheus metrics with Kafka's names, and the live console.

* ``stats``: the counters and histograms components keep (no dependencies; the
  components import it).
* ``views``: what is sampled from the components at read time (partitions,
  open transactions, group lag, pipelines); shared by the two below.
* ``collector``: the Prometheus families, Kafka's metric names.
* ``exposition``: those families in Prometheus' text format (``generate_latest``'s
  bytes, written faster).
* ``console``: the console page and its JSON.
* ``http``: the metrics port (``metrics.port``): ``/metrics``, ``/``, ``/api/*``.

Only ``stats`` is imported by the broker's components; the rest is imported
when ``metrics.port`` is set.
"""
