"""The ``onceflow`` frame as a user meets it (issue 24): every usage error one line and exit status 2,
every failure one line and exit status 1, never a traceback (``--log-level DEBUG`` logs it), Ctrl-C
``interrupted`` and 130, ``| head`` quiet; ``--log-level`` anywhere; the cluster from
``$ONCEFLOW_BOOTSTRAP_SERVERS``; a cluster that refuses, is silent or speaks another protocol named
at once or within ``--timeout``; the transaction tools' rough edges; shell completion; a start-up that
imports no client library.

Against one broker process for the module; the commands run in this process (``cli.main``), except
where a real process is the point (its imports, Ctrl-C, a closed pipe, completion)."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from onceflow.cli import build_parser, main
from onceflow.tools.common import missing_topic
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.kafka import make_topic, txn_producer
from tests.support.waiting import wait_for


@pytest.fixture(scope="module")
def bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with BrokerProcess(tmp_path_factory.mktemp("cli-errors") / "data", FAST_GROUPS) as broker:
        yield broker.bootstrap_servers


@pytest.fixture
def silent() -> Iterator[socket.socket]:
    """Never a word: a listener whose connections the kernel completes (backlog 16), never accepted
    unless the test does."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=16)
    with listener:
        yield listener


def address(listener: socket.socket) -> str:
    return f"127.0.0.1:{listener.getsockname()[1]}"


Run = Callable[..., tuple[int, str, str]]


@pytest.fixture
def onceflow(capsys: pytest.CaptureFixture[str]) -> Run:
    """``onceflow ARGS`` in this process: its exit status, stdout and stderr."""

    def run(*args: str) -> tuple[int, str, str]:
        capsys.readouterr()
        try:
            status = main(list(args))
        except SystemExit as exc:  # the parser: usage errors, --help, --version
            status = int(exc.code or 0)
        out, err = capsys.readouterr()
        return status, out, err

    return run


def one_line(err: str) -> str:
    """The one stderr line of a failed command (and no traceback)."""
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def child(*args: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """``python -m onceflow ARGS`` as a child process."""
    return subprocess.run([sys.executable, "-m", "onceflow", *args], capture_output=True, text=True, timeout=60,
                          **kwargs)  # type: ignore[call-overload, no-any-return]


# -- usage errors ------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "prefix", "fragment"), [
    (["--log-level", "bogus", "topics", "list"], "onceflow: argument --log-level", "'bogus'"),
    (["topics", "--log-level", "bogus", "list"], "onceflow topics: argument --log-level", "'bogus'"),
    (["topics", "list", "--log-level", "bogus"], "onceflow topics list: argument --log-level", "'bogus'"),
    (["topics", "list", "--log-format", "xml"], "onceflow topics list: argument --log-format", "'xml'"),
    (["topics", "list", "--timeout", "-1"], "onceflow topics list: argument --timeout", "from 1ms to 1h"),
    (["topics", "list", "--timeout", "soon"], "onceflow topics list: argument --timeout", "500ms"),
    (["groups", "list", "--bootstrap-servers", "nohost"], "onceflow groups list: argument --bootstrap-servers", "'nohost'"),
    (["broker", "--metrics-port", "70000"], "onceflow broker: argument --metrics-port", "0 to 65535"),
    (["txn", "producers", "t", "-1"], "onceflow txn producers: argument PARTITION", "0 or more"),
    (["txn", "list", "--min-duration-ms", "-5"], "onceflow txn list: argument --min-duration-ms", "0 or more"),
    (["users", "add", "u", "--password", "p", "--iterations", "0"], "onceflow users add: argument --iterations", "1 or more"),
    (["no-such-family"], "onceflow: argument FAMILY", "invalid choice"),
    (["acls"], "onceflow acls: the following arguments are required", "COMMAND"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_usage_error_is_one_line_and_status_2(onceflow: Run, args: list[str], prefix: str, fragment: str) -> None:
    status, out, err = onceflow(*args)
    line = one_line(err)
    assert (status, out) == (2, ""), err
    assert line.startswith(prefix) and fragment in line and line.endswith("--help)"), line


def test_a_port_out_of_range_is_a_usage_error_not_an_overflow_traceback(tmp_path: Path) -> None:
    proc = child("broker", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:99999")
    assert (proc.returncode, proc.stdout) == (2, ""), proc.stderr
    assert one_line(proc.stderr) == ("onceflow broker: argument --listen: expected HOST:PORT with a port from 0 to 65535, "
                                     "got '127.0.0.1:99999' (see onceflow broker --help)")
    assert not (tmp_path / "data").exists(), "refused before anything is written"


def test_the_log_options_are_taken_anywhere_and_the_last_one_wins() -> None:
    parser = build_parser()
    assert parser.parse_args(["topics", "list"]).log_level == "INFO"
    assert parser.parse_args(["--log-level", "debug", "topics", "list"]).log_level == "DEBUG"
    assert parser.parse_args(["topics", "--log-level", "warn", "list"]).log_level == "WARNING"
    assert parser.parse_args(["topics", "list", "--log-level", "ERROR"]).log_level == "ERROR"
    args = parser.parse_args(["--log-level", "ERROR", "txn", "--log-level", "INFO", "list", "--log-level", "DEBUG",
                              "--log-format", "json"])
    assert (args.log_level, args.log_format) == ("DEBUG", "json")
    assert parser.parse_args(["broker", "--log-level", "WARNING"]).log_level == "WARNING"
    assert parser.parse_args(["chaos", "--log-format", "json"]).log_format == "json"


# -- the cluster ---------------------------------------------------------------------------


def test_the_cluster_comes_from_the_environment_when_not_given(onceflow: Run, bootstrap: str,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    make_topic(bootstrap, "from-the-environment")
    monkeypatch.setenv("ONCEFLOW_BOOTSTRAP_SERVERS", bootstrap)
    status, out, err = onceflow("topics", "list", "--json")
    assert status == 0, err
    assert {"topic": "from-the-environment", "partition_count": 1, "internal": False} in json.loads(out)
    status, out, _ = onceflow("topics", "list", "--help")
    assert "$ONCEFLOW_BOOTSTRAP_SERVERS" in " ".join(out.split()) and bootstrap in out
    status, out, err = onceflow("topics", "list", "--bootstrap-servers", "127.0.0.1:1")  # the option wins
    assert status == 1 and "127.0.0.1:1" in one_line(err)
    monkeypatch.setenv("ONCEFLOW_BOOTSTRAP_SERVERS", "broker-without-port")
    status, out, err = onceflow("topics", "list")
    assert (status, out) == (2, "")
    assert one_line(err).startswith("onceflow topics: argument --bootstrap-servers: ")
    assert "'broker-without-port' (from $ONCEFLOW_BOOTSTRAP_SERVERS)" in err


@pytest.mark.parametrize("family", ["topics", "groups", "txn"])
def test_a_refused_address_is_named_at_once(onceflow: Run, family: str) -> None:
    started = time.monotonic()
    status, out, err = onceflow(family, "list", "--bootstrap-servers", "127.0.0.1:1")
    assert (status, out) == (1, "")
    assert one_line(err) == f"onceflow {family} list: cannot reach 127.0.0.1:1: connection refused"
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("family", ["topics", "groups", "txn"])
def test_a_silent_address_is_named_within_the_timeout(onceflow: Run, silent: socket.socket, family: str) -> None:
    started = time.monotonic()
    status, out, err = onceflow(family, "list", "--bootstrap-servers", address(silent), "--timeout", "1")
    assert (status, out) == (1, "")
    assert one_line(err) == f"onceflow {family} list: no answer from {address(silent)} within 1s"
    assert time.monotonic() - started < 4


@pytest.mark.parametrize("command", [("txn", "list"), ("topics", "produce", "t"), ("topics", "consume", "t")], ids=" ".join)
def test_tls_spoken_to_a_plaintext_listener_is_named_without_waiting_out_the_timeout(onceflow: Run, bootstrap: str,
                                                                                     command: tuple[str, ...]) -> None:
    started = time.monotonic()
    status, out, err = onceflow(*command, "--bootstrap-servers", bootstrap, "-X", "security.protocol=SSL")
    line = one_line(err)
    assert (status, out) == (1, "")
    assert line.startswith(f"onceflow {command[0]} {command[1]}: cannot reach {bootstrap}: _TRANSPORT (code -195): ssl://"), line
    assert time.monotonic() - started < 10, "the default --timeout is 30s: the client's verdict ends the wait"


def test_a_kafka_error_reads_name_code_and_message(onceflow: Run, bootstrap: str) -> None:
    make_topic(bootstrap, "exists-already")
    status, _, err = onceflow("topics", "create", "exists-already", "--bootstrap-servers", bootstrap)
    assert status == 1
    assert one_line(err).startswith("onceflow topics create: topic 'exists-already': TOPIC_ALREADY_EXISTS (code 36): ")
    status, _, err = onceflow("users", "list", "nobody", "--bootstrap-servers", bootstrap)
    assert status == 1
    assert one_line(err).startswith("onceflow users list: user 'nobody': RESOURCE_NOT_FOUND (code 91): ")


# -- the transaction tools -------------------------------------------------------------------


def test_txn_names_a_missing_topic_and_partition_as_the_other_tools_do(onceflow: Run, bootstrap: str) -> None:
    missing = f"onceflow txn {{}}: {missing_topic('nowhere')}"
    for command in (["producers", "nowhere", "0"], ["find-hanging", "--topic", "nowhere"], ["abort", "nowhere", "0", "7"]):
        status, out, err = onceflow("txn", *command, "--bootstrap-servers", bootstrap)
        assert (status, out, one_line(err)) == (1, "", missing.format(command[0]))
    make_topic(bootstrap, "two-partitions", 2)
    status, _, err = onceflow("txn", "producers", "two-partitions", "5", "--bootstrap-servers", bootstrap)
    assert (status, one_line(err)) == (1, "onceflow txn producers: topic 'two-partitions' has no partition 5 (it has 2: 0 to 1)")


def test_txn_describe_shows_a_duration_only_while_the_transaction_is_open(onceflow: Run, bootstrap: str) -> None:
    """KAFKA-15546: now minus the start time is how long an open transaction has run, but not a
    completed one's duration (the coordinator keeps no end time): that is shown as none."""
    make_topic(bootstrap, "durations")
    producer = txn_producer(bootstrap, "duration-app")
    producer.begin_transaction()
    producer.produce("durations", b"x", partition=0)
    assert producer.flush(30) == 0
    began = time.time() * 1000

    def described() -> dict[str, object]:
        status, out, err = onceflow("txn", "describe", "duration-app", "--bootstrap-servers", bootstrap, "--json")
        assert status == 0, err
        return json.loads(out)  # type: ignore[no-any-return]

    ongoing = described()
    assert ongoing["state"] == "Ongoing"
    assert 0 <= ongoing["transaction_duration_ms"] <= time.time() * 1000 - began + 5_000  # type: ignore[operator]
    producer.commit_transaction(30)
    done = wait_for(lambda: (d := described())["state"] == "CompleteCommit" and d, what="the commit")
    assert done["transaction_start_time_ms"] == ongoing["transaction_start_time_ms"]
    assert done["transaction_duration_ms"] is None
    status, out, _ = onceflow("txn", "describe", "duration-app", "--bootstrap-servers", bootstrap)
    assert status == 0 and "Transaction duration ms:   -" in out


# -- failures, Ctrl-C, pipes -----------------------------------------------------------------


def test_an_unexpected_failure_in_any_family_is_one_line_and_debug_logs_the_traceback(
        onceflow: Run, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A data directory whose meta.properties is damaged: the broker fails at start; the frame makes
    the failure one line, and --log-level DEBUG logs where it came from."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "meta.properties").write_text("garbage{\n")
    status, out, err = onceflow("broker", "--data-dir", str(data), "--listen", "127.0.0.1:0")
    assert (status, out) == (1, "")
    assert one_line(err).startswith("onceflow broker: ") and "meta.properties is damaged" in err
    with caplog.at_level(logging.DEBUG, logger="onceflow"):
        status, _, err = onceflow("broker", "--data-dir", str(data), "--listen", "127.0.0.1:0", "--log-level", "DEBUG")
    assert status == 1 and one_line(err).startswith("onceflow broker: ")
    assert any(r.exc_info for r in caplog.records if r.name == "onceflow" and r.levelno == logging.DEBUG)


def test_ctrl_c_while_a_silent_cluster_is_awaited_is_one_line_status_130_at_once() -> None:
    """Each command waits on a listener that never answers (its pre-flight's metadata request); Ctrl-C
    ends it within a fraction of a second, though a KeyboardInterrupt raised inside a librdkafka
    callback is lost (clienterrors.interruptible)."""
    commands = [("groups", "list"), ("cluster", "info"), ("topics", "produce", "t"), ("topics", "consume", "t")]
    listeners = [socket.create_server(("127.0.0.1", 0), backlog=16) for _ in commands]
    procs = [subprocess.Popen([sys.executable, "-m", "onceflow", *command, "--bootstrap-servers", address(listener),
                               "--timeout", "60"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for command, listener in zip(commands, listeners, strict=True)]
    held = []
    try:
        for listener in listeners:
            listener.settimeout(30)
            listener.accept()[0].close()  # the TCP pre-flight
            held.append(listener.accept()[0])  # the client, waiting for an answer that never comes
        for command, proc in zip(commands, procs, strict=True):
            started = time.monotonic()
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=30)
            assert (proc.returncode, out) == (130, ""), (command, err)
            assert one_line(err) == f"onceflow {command[0]} {command[1]}: interrupted"
            assert time.monotonic() - started < 3, (command, "not the whole --timeout, nor librdkafka's ~10s")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        for sock in [*held, *listeners]:
            sock.close()


def test_a_closed_pipe_ends_the_command_quietly(bootstrap: str) -> None:
    """``onceflow topics list | head -0``: the reader is gone before anything is written."""
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "onceflow", "topics", "list", "--bootstrap-servers", bootstrap],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (128 + signal.SIGPIPE, "")


def test_a_closed_pipe_ends_a_benchmark_quietly_after_its_cleanup(bootstrap: str) -> None:
    """``onceflow bench produce ... | head -0``: its result has nowhere to go; its topic is still deleted."""
    from confluent_kafka.admin import AdminClient

    topic = f"bench-pipe-{os.getpid()}"
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run([sys.executable, "-m", "onceflow", "bench", "produce", "--bootstrap-servers", bootstrap,
                               "--topic", topic, "--partitions", "1", "--record-size", "10", "--seconds", "0.3"],
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=60)
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (128 + signal.SIGPIPE, "")
    assert topic not in AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=20).topics


# -- help, --json, start-up, completion -------------------------------------------------------------


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action._name_parser_map.items():
            yield from _leaves(sub, (*path, name))


def filled_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).fill_all()  # type: ignore[attr-defined]
    return parser


def test_every_option_has_help_and_every_tool_command_takes_json() -> None:
    parser = filled_parser()
    for path, leaf in _leaves(parser, ()):
        bare = [a.option_strings or a.dest for a in leaf._actions if not a.help]
        assert bare == [], f"onceflow {' '.join(path)}: no help for {bare}"
        if path[0] in ("topics", "groups", "txn", "acls", "users", "cluster"):
            assert "--json" in leaf._option_string_actions, f"onceflow {' '.join(path)} has no --json"
    families = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for family in ("broker", "demo"):
        description = families._name_parser_map[family].description
        assert description and len(description) > 150, family


def test_start_up_imports_no_client_library_rich_or_spark() -> None:
    """``--version`` and ``topics --help`` are answered before any client library, rich, Spark or
    argcomplete is imported (they cost their import time on every command)."""
    script = ("import json, sys\nfrom onceflow.cli import main\n"
              "for argv in (['--version'], ['topics', '--help'], ['txn', 'list', '--help']):\n"
              "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
              "print('MODULES', json.dumps(sorted(sys.modules)))\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("onceflow ") and "usage: onceflow topics" in proc.stdout
    modules = json.loads(proc.stdout.rsplit("MODULES ", 1)[1])
    loaded = {m.split(".")[0] for m in modules} & {"confluent_kafka", "rich", "kafka", "pyspark", "argcomplete", "asyncio"}
    assert loaded == set(), loaded


def complete(line: str, answer: Path) -> list[str]:
    """What ``onceflow`` offers for ``line``: argcomplete's protocol as its bash hook speaks it
    (``_ARGCOMPLETE`` the index of the first word, ``COMP_LINE``, ``COMP_POINT``), the answer written
    to ``_ARGCOMPLETE_STDOUT_FILENAME`` instead of file descriptor 8."""
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)), "_ARGCOMPLETE_IFS": "\n",
           "_ARGCOMPLETE_STDOUT_FILENAME": str(answer)}
    proc = subprocess.run([sys.executable, "-c", "from onceflow.cli import main\nmain()\n"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [word.strip() for word in answer.read_text().split("\n") if word.strip()]


def test_shell_completion_offers_families_commands_and_options(tmp_path: Path) -> None:
    answer = tmp_path / "completions"
    assert complete("onceflow top", answer) == ["topics"]
    assert complete("onceflow topics de", answer) == ["describe", "delete", "delete-records"]
    assert complete("onceflow txn list --st", answer) == ["--state"]
