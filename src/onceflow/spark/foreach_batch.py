"""``write_exactly_once``: exactly-once output from ``foreachBatch``, several topics at once.

Theory of operation: inside ``foreachBatch`` Spark runs an ordinary batch
write, but its tasks still carry the micro-batch's identity (the local
properties ``sql.streaming.queryId`` and ``streaming.sql.batchId``), and the
driver finds the query's run id (new at every start) from the active
query, or from Spark's job group if the function left it alone, and hands
it to the tasks in a local property.  The onceflow batch writer uses it the
way the streaming sink does (``sink``, ``protocol``): each task writes its
rows, whatever their ``topic`` column says, in one transaction together
with its slot's record in the progress topic of (query, ``name``), and
skips rows an earlier attempt already wrote.  Output is therefore
exactly-once per micro-batch and atomic across topics within each task.

Each call of one micro-batch needs its own ``name``: the name is the
scope (progress topic and transactional ids).  A name used twice in one
micro-batch is refused here, on the driver, before the second write
starts; keep each name for the life of the checkpoint.  Before a run's
first write of a name, the driver fences every slot the name's scope
ever had, so that nothing of an earlier run can commit while this run's
tasks decide.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from typing import Any

from . import sink
from .options import OptionError, check_write_name, parse_sink_options
from .sink import RUN_PROPERTY, run_id

_lock = threading.Lock()
#: The names written so far in each (query id and run id, micro-batch) of this driver.
_written: OrderedDict[tuple[str, int], set[str]] = OrderedDict()


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
    name = check_write_name(name, "write_exactly_once's name")
    query_id = str(context.getLocalProperty("sql.streaming.queryId"))
    run = _query_run(df.sparkSession, query_id) or run_id(context.getLocalProperty)
    if run is None:
        raise OptionError(f"write_exactly_once cannot tell this run of query {query_id} from an earlier one: the "
                          f"query is not active in this Spark session, and Spark's job group, which names the run, "
                          f"was replaced (setJobGroup in the foreachBatch function?)")
    _claim(f"{query_id}/{run}", batch_id, name)
    settings = {"kafka.bootstrap.servers": bootstrap_servers, "transactionalIdPrefix": f"onceflow-{name}",
                "writeName": name, **({"topic": topic} if topic is not None else {}), **options}
    sink_options = parse_sink_options(settings, streaming=False)
    if sink_options.delivery_guarantee == "exactly-once":
        sink.prefence(sink_options, query_id, name, run)
    writer = df.write.format("onceflow")
    for key, value in settings.items():
        writer = writer.option(key, value)
    before = context.getLocalProperty(RUN_PROPERTY)
    context.setLocalProperty(RUN_PROPERTY, run)  # the tasks' run, whatever the job group says
    try:
        writer.mode("append").save()
    finally:
        context.setLocalProperty(RUN_PROPERTY, before)


def _query_run(session: Any, query_id: str) -> str | None:
    """The run id of the active query ``query_id``, as the driver sees it.

    A foreachBatch function runs on the query's stream execution thread, whose name holds the id
    and run id. Failing that, the query managers: the session the function is given is the
    query's own clone, with no queries, and the active session may have become that clone (a
    ``createDataFrame`` on it), so the session first instantiated is asked too."""
    from pyspark.sql import SparkSession

    try:
        thread = str(session.sparkContext._jvm.java.lang.Thread.currentThread().getName())
    except Exception:  # noqa: BLE001 - not a classic session (Spark Connect): the managers below
        thread = ""
    found = re.search(rf"\[id = {re.escape(query_id)}, runId = ({sink.UUID_PATTERN})\]", thread)
    if found:
        return found.group(1)
    for candidate in (session, SparkSession.getActiveSession(), getattr(SparkSession, "_instantiatedSession", None)):
        query = candidate.streams.get(query_id) if candidate is not None else None
        if query is not None:
            return str(query.runId)
    return None


def _claim(run: str, batch_id: int, name: str) -> None:
    with _lock:
        names = _written.setdefault((run, batch_id), set())
        if name in names:
            raise OptionError(f"write_exactly_once was called twice with name {name!r} in micro-batch {batch_id}: "
                              "the second write would be taken for a replay of the first and dropped. Give each "
                              "call of one micro-batch its own name (and keep it for the life of the checkpoint)",
                              "name")
        names.add(name)
        while len(_written) > 64:
            _written.popitem(last=False)
