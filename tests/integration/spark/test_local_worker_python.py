"""``register`` in classic local mode, run by a virtual environment's Python that is not activated:
``python3`` on ``PATH`` is another interpreter (here a stand-in that cannot run anything), and
neither ``PYSPARK_PYTHON`` nor ``spark.pyspark.python`` is set.  Spark would start its workers with
that ``python3``; ``register`` gives them the driver's Python and says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.integration.spark.support import inputs, new_topic, read_topic
from tests.support.broker import BrokerProcess

DRIVER = """
import sys
from pyspark.sql import SparkSession
import onceflow.spark
bs, src, dst = sys.argv[1:4]
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
onceflow.spark.register(spark)
frame = spark.read.format("onceflow").option("kafka.bootstrap.servers", bs).option("subscribe", src).load()
frame.selectExpr("key", "value").write.format("onceflow").mode("append").option("kafka.bootstrap.servers", bs).option("topic", dst).save()
spark.stop()
print("done")
"""


def test_register_gives_local_workers_the_drivers_python_when_none_is_named(broker_process: BrokerProcess,
                                                                            tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 40)
    elsewhere = tmp_path / "bin"
    elsewhere.mkdir()
    (elsewhere / "python3").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/started\nexit 3\n")
    (elsewhere / "python3").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k not in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")}
    env.update(PATH=f"{elsewhere}{os.pathsep}{env.get('PATH', '')}", SPARK_LOCAL_IP="127.0.0.1")
    done = subprocess.run([sys.executable, "-c", DRIVER, bs, src, dst], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-3000:]
    assert "Spark's workers will run" in done.stderr and "this driver's Python" in done.stderr
    assert sorted(read_topic(bs, dst, [0, 1])) == sorted(committed)
