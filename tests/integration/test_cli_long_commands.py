"""``onceflow bench``, ``chaos`` and ``demo`` as a user meets them (issue 24): a cluster out of
reach, or one that never answers, is one line naming it, at once or within ``--timeout``; a bad
value is a usage error before anything is created; every option has help; what they create on a
cluster is deleted at the end (``--keep`` keeps it); a progress line only on a terminal; Ctrl-C
is the line ``interrupted``, exit status 130, the topics deleted.

Against one broker process for the module; the commands are called in-process (``cli.main``),
except where a terminal or a real Ctrl-C is the point."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from onceflow.bench import add_arguments as bench_options
from onceflow.chaos.command import add_arguments as chaos_options
from onceflow.cli import main
from onceflow.cliargs import OnceflowParser
from onceflow.clientconfig import add_options
from onceflow.demos.payments import add_arguments as demo_options
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.kafka import make_topic
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    broker = BrokerProcess(tmp_path_factory.mktemp("long-commands") / "data", FAST_GROUPS)
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture
def silent() -> Iterator[str]:
    """An address that takes TCP connections (the kernel completes them) and never says a word."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def onceflow(capfd: pytest.CaptureFixture[str]) -> Run:
    """``onceflow ARGS`` in this process: its exit status, and what reached file descriptors 1
    and 2 (librdkafka's own printing included)."""

    def run(*args: str) -> tuple[int, str, str]:
        capfd.readouterr()
        try:
            status = main(list(args))
        except SystemExit as exc:  # the parser's usage errors
            status = int(exc.code or 0)
        out, err = capfd.readouterr()
        return status, out, err

    return run


def topics(bootstrap: str) -> set[str]:
    return set(AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics)


def groups(bootstrap: str) -> set[str]:
    listed = AdminClient({"bootstrap.servers": bootstrap}).list_consumer_groups(request_timeout=10).result(15)
    return {g.group_id for g in listed.valid}


# -- clusters out of reach -------------------------------------------------------------


@pytest.mark.parametrize("command", [["bench", "produce"], ["chaos"], ["demo", "broker-crash"], ["demo", "payments"]],
                         ids=" ".join)
def test_a_refused_address_is_one_line_at_once(onceflow: Run, command: list[str]) -> None:
    started = time.monotonic()
    status, out, err = onceflow(*command, "--bootstrap-servers", "127.0.0.1:1")
    name = " ".join(["onceflow", *command]) if command != ["chaos"] else "onceflow chaos"
    assert (status, out, err) == (1, "", f"{name}: cannot reach 127.0.0.1:1: connection refused\n")
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("command", [["bench", "produce"], ["chaos"]], ids=" ".join)
def test_a_cluster_that_never_answers_is_named_within_the_timeout(onceflow: Run, silent: str, command: list[str]) -> None:
    started = time.monotonic()
    status, out, err = onceflow(*command, "--bootstrap-servers", silent, "--timeout", "500ms")
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"onceflow {' '.join(command)}: no answer from {silent} within 0.5s"), err
    assert time.monotonic() - started < 5


def test_a_client_failure_is_one_line_and_debug_shows_what_the_client_said(
        onceflow: Run, bootstrap: str, caplog: pytest.LogCaptureFixture) -> None:
    """TLS spoken to a plaintext listener: the client's reason in the one line, its log lines counted
    (not printed: no librdkafka ``%3|...|FAIL|`` lines); with --log-level DEBUG they are logged."""
    status, out, err = onceflow("bench", "produce", "--bootstrap-servers", bootstrap, "-X", "security.protocol=SSL")
    assert status == 1 and out == "" and err.count("\n") == 1, err
    assert err.startswith(f"onceflow bench produce: cannot reach {bootstrap}: _TRANSPORT (code -195): "), err
    assert "SSL" in err.split("(code -195): ", 1)[1] and "hidden; --log-level DEBUG shows them)" in err
    with caplog.at_level("DEBUG"):
        status, _, err = onceflow("--log-level", "DEBUG", "bench", "produce", "--bootstrap-servers", bootstrap,
                                  "-X", "security.protocol=SSL")
    assert status == 1 and "hidden" not in err
    assert any(r.name.startswith("onceflow.client") and "ssl://" in r.getMessage() for r in caplog.records)
    assert any(r.exc_info for r in caplog.records if r.name == "onceflow"), "the traceback is logged"


# -- values and help -------------------------------------------------------------------


def family(fill: Callable[[argparse.ArgumentParser], None], prog: str) -> argparse.ArgumentParser:
    """A family's options on the one-line parser (``cliargs.OnceflowParser``)."""
    parser = OnceflowParser(prog=prog)
    fill(parser)
    return parser


def demo_family(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap-servers", help="cli.py's (not checked here)")
    demo_options(parser)
    add_options(parser)


FAMILIES = {"onceflow bench": bench_options, "onceflow chaos": chaos_options, "onceflow demo": demo_family}

BAD = [
    ("onceflow bench", ["produce", "--seconds", "-1"]), ("onceflow bench", ["produce", "--seconds", "soon"]),
    ("onceflow bench", ["consume", "--records", "0"]), ("onceflow bench", ["produce", "--partitions", "0"]),
    ("onceflow bench", ["produce", "--record-size", "1k"]), ("onceflow bench", ["produce", "--linger-ms", "-5"]),
    ("onceflow bench", ["commit-latency", "--transactions", "0"]), ("onceflow bench", ["recovery", "--log-mib", "0"]),
    ("onceflow bench", ["produce", "--bootstrap-servers", "localhost"]), ("onceflow bench", ["produce", "--timeout", "0"]),
    ("onceflow chaos", ["--seconds", "0"]), ("onceflow chaos", ["--kills", "-1"]), ("onceflow chaos", ["--producers", "0"]),
    ("onceflow chaos", ["--pause-seconds", "-2"]), ("onceflow chaos", ["--disk-mib", "0"]),
    ("onceflow chaos", ["--bootstrap-servers", "127.0.0.1:0"]),
    ("onceflow demo", ["--payments", "-3"]), ("onceflow demo", ["--accounts", "1"]),
    ("onceflow demo", ["--max-offsets-per-trigger", "-1"]), ("onceflow demo", ["--timeout", "never"]),
]


@pytest.mark.parametrize(("prog", "args"), BAD, ids=[f"{p.split()[1]} {' '.join(a)}" for p, a in BAD])
def test_a_bad_value_is_a_one_line_usage_error(capsys: pytest.CaptureFixture[str], prog: str, args: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        family(FAMILIES[prog], prog).parse_args(args)
    err = capsys.readouterr().err
    option = next(a for a in args if a.startswith("--"))
    assert exited.value.code == 2 and err.count("\n") == 1 and f"argument {option}: expected" in err, err


def test_a_bad_value_creates_nothing(onceflow: Run, bootstrap: str) -> None:
    """The regression: ``bench produce --seconds -1`` exited 0 and left a topic behind."""
    before = topics(bootstrap)
    status, out, err = onceflow("bench", "produce", "--bootstrap-servers", bootstrap, "--seconds", "-1")
    assert status == 2 and out == "" and "argument --seconds: expected a duration above zero" in err
    assert "Traceback" not in err and topics(bootstrap) == before


@pytest.mark.parametrize("prog", list(FAMILIES))
def test_every_option_has_help_that_gives_its_default(prog: str) -> None:
    for action in family(FAMILIES[prog], prog)._actions:
        if action.dest == "help":
            continue
        assert action.help, f"{prog} {action.option_strings or action.dest}: no help"
        if action.option_strings and action.default not in (None, False, [], argparse.SUPPRESS):
            assert "default" in action.help, f"{prog} {action.option_strings}: the help does not give the default"


# -- cleanup, progress, Ctrl-C ---------------------------------------------------------------


def test_bench_deletes_the_topic_it_created_unless_keep(onceflow: Run, bootstrap: str) -> None:
    fresh, kept, existing = (f"bench-{name}-{uuid.uuid4().hex[:6]}" for name in ("fresh", "kept", "existing"))
    quick = ["--bootstrap-servers", bootstrap, "--seconds", "0.2", "--partitions", "1", "--record-size", "100"]
    status, out, err = onceflow("bench", "produce", *quick, "--topic", fresh)
    assert status == 0 and out.startswith("produce acks=all: ") and err == "", "piped: no progress, nothing extra"
    assert fresh not in topics(bootstrap)
    status, _, err = onceflow("bench", "produce", *quick, "--topic", kept, "--keep")
    assert status == 0 and err == f"onceflow bench produce: kept topic {kept} on {bootstrap}\n"
    make_topic(bootstrap, existing)
    status, _, _ = onceflow("bench", "produce", *quick, "--topic", existing)
    assert status == 0 and {kept, existing} <= topics(bootstrap), "a topic it did not create is left alone"


def onceflow_process(*args: str, stderr: int = subprocess.PIPE) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "onceflow", *args], stdout=subprocess.PIPE, stderr=stderr, text=True)


def test_progress_is_drawn_on_a_terminal(bootstrap: str) -> None:
    controller, terminal = os.openpty()
    try:
        proc = onceflow_process("bench", "produce", "--bootstrap-servers", bootstrap, "--seconds", "1", "--partitions", "1",
                                "--record-size", "100", stderr=terminal)
        os.close(terminal)
        out, _ = proc.communicate(timeout=60)
        drawn = b""
        while True:
            try:
                chunk = os.read(controller, 4096)
            except OSError:  # EIO: the process and its terminal are gone
                break
            if not chunk:
                break
            drawn += chunk
    finally:
        os.close(controller)
    assert proc.returncode == 0 and out.startswith("produce acks=all: "), (out, drawn)
    assert b"\rproduce acks=all: " in drawn and b"records acknowledged\x1b[K" in drawn, drawn
    assert drawn.endswith(b"\r\x1b[K"), "the line is taken away before the result"


def high_watermark(consumer: Consumer, topic: str) -> int:
    if topic not in consumer.list_topics(timeout=10).topics:
        return 0
    return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)[1])


@pytest.mark.parametrize("command", [["bench", "produce", "--seconds", "120", "--partitions", "1", "--record-size", "100"],
                                     ["chaos", "--seconds", "120", "--producers", "1", "--partitions", "1"]],
                         ids=lambda c: c[0])
def test_ctrl_c_is_one_line_130_and_the_topics_are_deleted(bootstrap: str, command: list[str]) -> None:
    topic = f"bench-interrupted-{uuid.uuid4().hex[:6]}" if command[0] == "bench" else "chaos-a"
    extra = ["--topic", topic] if command[0] == "bench" else []
    before = groups(bootstrap)
    proc = onceflow_process(*command, *extra, "--bootstrap-servers", bootstrap)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "probe"})
    try:
        wait_for(lambda: high_watermark(probe, topic) > 0 or proc.poll() is not None, timeout=30, interval=0.1,
                 what=f"records in {topic}")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        probe.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    name = "onceflow bench produce" if command[0] == "bench" else "onceflow chaos"
    lines = [line for line in err.splitlines() if line.startswith(name)]
    assert proc.returncode == 130 and out == "" and lines == [f"{name}: interrupted"], err
    assert "Traceback" not in err
    assert not {topic, "chaos-b", "chaos-a-out"} & topics(bootstrap)
    assert groups(bootstrap) <= before, "the copiers' group is deleted with the topics"


def test_the_chaos_work_directory_goes_unless_kept(onceflow: Run) -> None:
    """A run that does not finish leaves no temporary directory behind; with --keep it says where it is."""
    def chaos_dirs() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob("onceflow-chaos-*"))

    before = chaos_dirs()
    status, _, err = onceflow("chaos", "--bootstrap-servers", "127.0.0.1:1")
    assert status == 1 and chaos_dirs() == before
    status, _, err = onceflow("chaos", "--bootstrap-servers", "127.0.0.1:1", "--keep")
    kept = chaos_dirs() - before
    for directory in kept:
        shutil.rmtree(directory)
    assert status == 1 and len(kept) == 1 and f"onceflow chaos: the work directory is {kept.pop()}\n" in err
