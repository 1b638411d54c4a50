"""The connector through Spark Connect: a Spark Connect server started from the pip-installed PySpark
(``SparkConnectServer`` through ``spark-submit``, on loopback), and a client session in this process
with no JVM of its own (``SparkSession.builder.remote``).  The data source runs on the server's side:
its workers' Python (``PYSPARK_PYTHON``) has onceflow.

Checked: ``register`` works on a Connect session; a batch read sees committed records only; a batch
write and the save-mode rule; a streaming query exactly-once through the server (the driver, here)
SIGKILLed while tasks are inside their transactions and a new server taking it up from the
checkpoint, record by record."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from onceflow.broker.process import free_port
from onceflow.spark import worker_python
from onceflow.spark.faults import SPARK_FIRST_ATTEMPT as FAULT_POINT
from tests.integration.spark.support import (
    assert_exactly_once,
    checkpoint,
    finished,
    inputs,
    new_topic,
    open_transaction_in,
    read_topic,
    upper,
)
from tests.support import SCRATCH
from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for

#: Two servers started and one killed: about two minutes, so make spark-platforms (and CI), not make test.
pytestmark = pytest.mark.platforms

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
READY_TIMEOUT_S = 180


class ConnectServer:
    """A Spark Connect server (``local[2,4]``) as a process group on a free loopback port."""

    def __init__(self, log_path: Path, fault_dir: Path) -> None:
        import pyspark

        self.port = free_port()
        spark_home = os.path.dirname(pyspark.__file__)
        env = {**os.environ, "SPARK_HOME": spark_home, "SPARK_LOCAL_IP": "127.0.0.1",
               "PYSPARK_PYTHON": worker_python.path(), "ONCEFLOW_FAULT_DIR": str(fault_dir)}
        conf = {"spark.connect.grpc.binding.address": "127.0.0.1", "spark.connect.grpc.binding.port": str(self.port),
                "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2",
                "spark.sql.streaming.stopTimeout": "30s"}
        cmd = [os.path.join(spark_home, "bin", "spark-submit"), "--class", SERVER_CLASS, "--master", "local[2,4]"]
        for key, value in conf.items():
            cmd += ["--conf", f"{key}={value}"]
        with open(log_path, "a") as log:
            self.proc = subprocess.Popen([*cmd, "spark-internal"], stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)
        self.log_path = log_path
        wait_for(self._listening, timeout=READY_TIMEOUT_S, interval=0.2, what=self._what)

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    def _listening(self) -> bool:
        assert self.proc.poll() is None, f"the Spark Connect server exited; its log ends:\n{self._tail()}"
        try:
            socket.create_connection(("127.0.0.1", self.port), 1).close()
        except OSError:
            return False
        return True

    def _what(self) -> str:
        return f"the Spark Connect server to listen; its log ends:\n{self._tail()}"

    def _tail(self) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-30:])

    def kill(self) -> None:
        """SIGKILL to the group: the JVM (the driver) and its Python workers."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(60)


def session(url: str) -> Any:
    from pyspark.sql import SparkSession

    import onceflow.spark

    spark = SparkSession.builder.remote(url).getOrCreate()
    onceflow.spark.register(spark)
    return spark


#: What PySpark sets in os.environ once a Connect session exists (and never unsets for a remote
#: server): left behind, every later SparkSession.builder in this process, and every Spark driver
#: it starts, would take itself for a Connect client (CONNECT_URL_NOT_SET).
CONNECT_ENVIRONMENT = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")


@pytest.fixture(scope="module", autouse=True)
def classic_environment_restored() -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in CONNECT_ENVIRONMENT}
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def fault_dir() -> Path:
    return Path(SCRATCH) / "connect-faults"


@pytest.fixture(scope="module")
def server(fault_dir: Path) -> Iterator[ConnectServer]:
    fault_dir.mkdir(exist_ok=True)
    started = ConnectServer(Path(SCRATCH) / "connect-server.log", fault_dir)
    try:
        yield started
    finally:
        started.kill()


def test_batch_reads_and_writes_through_a_connect_session_with_no_jvm_of_its_own(server: ConnectServer,
                                                                               broker_process: BrokerProcess) -> None:
    from pyspark import SparkContext
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 200)
    had_jvm = SparkContext._active_spark_context is not None  # the classic tests' session, if they ran first
    spark = session(server.url)
    try:
        assert isinstance(spark, ConnectSession)
        rows = (spark.read.format("onceflow").option("kafka.bootstrap.servers", bs).option("subscribe", src)
                .load().selectExpr("CAST(value AS STRING) AS v").collect())
        assert sorted(r.v.encode() for r in rows) == sorted(committed)  # read_committed: no aborted records
        frame = (spark.read.format("onceflow").option("kafka.bootstrap.servers", bs).option("subscribe", src).load()
                 .selectExpr("key", "upper(CAST(value AS STRING)) AS value"))
        frame.write.format("onceflow").mode("append").option("kafka.bootstrap.servers", bs).option("topic", dst).save()
        assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)
        with pytest.raises(Exception, match="Save mode Overwrite not allowed for onceflow"):
            frame.write.format("onceflow").mode("overwrite").option("kafka.bootstrap.servers", bs).option("topic", dst).save()
        assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)
        assert had_jvm or SparkContext._active_spark_context is None, "the client started a JVM of its own"
    finally:
        spark.stop()
    # Another session, without register(): the server found the format itself (pyspark_onceflow).
    from pyspark.sql import SparkSession

    unregistered = SparkSession.builder.remote(server.url).create()
    try:
        assert unregistered.read.format("onceflow").option("kafka.bootstrap.servers", bs).option("subscribe", dst).load().count() == len(committed)
    finally:
        unregistered.stop()


def test_a_stream_through_connect_is_exactly_once_when_the_server_is_killed_mid_batch(
        server: ConnectServer, fault_dir: Path, broker_process: BrokerProcess, tmp_path: Path) -> None:
    bs = broker_process.bootstrap_servers
    src, dst = new_topic(bs, 2), new_topic(bs, 2)
    committed = inputs(bs, src, 600)
    ckpt = checkpoint()

    def start(spark: Any, available_now: bool) -> Any:
        frame = upper(spark.readStream.format("onceflow").option("kafka.bootstrap.servers", bs).option("subscribe", src)
                      .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "150").load())
        writer = (frame.writeStream.format("onceflow").option("kafka.bootstrap.servers", bs).option("topic", dst)
                  .option("checkpointLocation", ckpt))
        writer = writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime="100 milliseconds")
        return writer.start()

    (fault_dir / FAULT_POINT).write_text("sleep:3")
    doomed = ConnectServer(tmp_path / "doomed.log", fault_dir)  # this test's own server, to kill
    spark = session(doomed.url)
    try:
        start(spark, available_now=False)
        wait_for(lambda: open_transaction_in(bs, dst, [0, 1]), timeout=180, interval=0.05,
                 what="a task of a micro-batch to be inside its transaction")
    finally:
        doomed.kill()
        (fault_dir / FAULT_POINT).unlink()
        spark.client.close()
    assert open_transaction_in(bs, dst, [0, 1]), "the killed server left its transactions open"

    spark = session(server.url)
    try:
        failure = finished(start(spark, available_now=True))
        assert failure is None, f"the restarted query failed: {failure}"
    finally:
        spark.stop()
    assert_exactly_once(read_topic(bs, dst, [0, 1]), committed)
    assert not open_transaction_in(bs, dst, [0, 1]), "the restarted query left nothing open"
