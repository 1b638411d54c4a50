"""The payments pipeline's definitions for Spark Declarative Pipelines (``spark-pipelines run``).

The same pipeline as ``onceflow.pipelines.payments``, declared instead of started:

* ``entries``, a temporary view: each committed payment of ``payments`` (read
  read_committed by the onceflow source) as a debit and a credit;
* the sink ``ledger`` (format ``onceflow``, exactly-once) and its append flow
  ``ledger_entries``: one record per entry, as the demo's ledger query writes;
* the sink ``balances`` and its append flow ``account_balances``: each account's
  running balance, kept in the flow's state (``applyInPandasWithState``, its
  state checkpointed with the flow), one record per account changed by a
  micro-batch.  A declarative sink takes appends only, so the balance is not a
  streaming aggregation in update mode as in the demo.

Both flows read ``payments`` (not the ledger topic), so one run brings both up to
date.  ``spark-pipelines`` runs each flow with ``Trigger.AvailableNow`` and its
checkpoint under the spec's ``storage``: a run processes what has been committed
since the last one, and a run that was killed is taken up by the next.

Two of PySpark 4.3's rules shape this file.  A query function may not analyse a
DataFrame (``ATTEMPT_ANALYSIS_IN_PIPELINE_QUERY_FUNCTION``), and
``applyInPandasWithState`` asks for its input's columns, so the stateful frame is
built when the file is imported and the flow returns it.  And the format is not
registered here: it is found through ``pyspark_onceflow`` (README).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark import pipelines as dp
from pyspark.sql import DataFrame, SparkSession

spark = SparkSession.active()
BOOTSTRAP = spark.conf.get("payments.bootstrap.servers", None) or "127.0.0.1:9092"
SOURCE = {"kafka.bootstrap.servers": BOOTSTRAP, "subscribe": "payments", "startingOffsets": "earliest"}


def read_entries() -> DataFrame:
    """Two entries per payment ``id,from,to,amount``: (account, id, delta, kind)."""
    fields = spark.readStream.format("onceflow").options(**SOURCE).load().selectExpr(
        "split(CAST(value AS STRING), ',') AS f")
    return (fields.selectExpr("f[0] AS id", "explode(array("
                              "named_struct('account', f[1], 'delta', -CAST(f[3] AS BIGINT), 'kind', 'debit'), "
                              "named_struct('account', f[2], 'delta', CAST(f[3] AS BIGINT), 'kind', 'credit'))) AS e")
            .selectExpr("e.account AS account", "id", "e.delta AS delta", "e.kind AS kind"))


dp.temporary_view(name="entries")(read_entries)
dp.create_sink("ledger", format="onceflow", options={"kafka.bootstrap.servers": BOOTSTRAP, "topic": "ledger"})
dp.create_sink("balances", format="onceflow", options={"kafka.bootstrap.servers": BOOTSTRAP, "topic": "balances"})


@dp.append_flow(target="ledger")
def ledger_entries() -> DataFrame:
    return spark.readStream.table("entries").selectExpr(
        "account AS key", "concat_ws(',', id, account, CAST(delta AS STRING), kind) AS value")


def running_balance(key: tuple[Any, ...], frames: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """One account's entries of a micro-batch: its new balance, kept in the flow's state."""
    balance = state.get[0] if state.exists else 0
    for frame in frames:
        balance += int(frame["delta"].sum())
    state.update((balance,))
    yield pd.DataFrame({"key": [key[0]], "value": [str(balance)]})


BALANCES = (read_entries().select("account", "delta").groupBy("account")
            .applyInPandasWithState(running_balance, "key string, value string", "balance long", "append", "NoTimeout"))


@dp.append_flow(target="balances")
def account_balances() -> DataFrame:
    return BALANCES
