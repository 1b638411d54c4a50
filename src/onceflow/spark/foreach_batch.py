"""``write_exactly_once``: exactly-once output from ``foreachBatch``, several topics at once.

Theory of operation: inside ``foreachBatch`` Spark runs an ordinary batch
write, but its tasks still carry the micro-batch's identity (the local
properties ``sql.streaming.queryId`` and ``streaming.sql.batchId``).  The
onceflow batch writer uses it the way the streaming sink does (``sink``):
each task writes its rows, whatever their ``topic`` column says, in one
transaction together with the record "micro-batch B of partition P is
written", and skips rows an earlier attempt already wrote.  Output is
therefore exactly-once per (query, micro-batch, task partition) and atomic
across topics within each task.

Each call needs its own ``name`` when a micro-batch writes more than once:
the name is part of the transactional ids and bookkeeping groups.
"""

from __future__ import annotations

from typing import Any

from .options import OptionError


def write_exactly_once(df: Any, batch_id: int, *, bootstrap_servers: str, name: str = "foreach-batch",
                       topic: str | None = None, **options: str) -> None:
    """Write ``df`` (columns: value, and key, topic, partition, headers as wanted) exactly once.

    Call it from a ``foreachBatch`` function with the batch id Spark passed.
    """
    context = df.sparkSession.sparkContext
    current = context.getLocalProperty("streaming.sql.batchId")
    if current is None or int(current) != batch_id:
        raise OptionError(f"write_exactly_once must be called from foreachBatch with its batch id "
                          f"(got {batch_id}, the running micro-batch is {current})")
    writer = (df.write.format("onceflow")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("transactionalIdPrefix", f"onceflow-{name}"))
    if topic is not None:
        writer = writer.option("topic", topic)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.mode("append").save()
