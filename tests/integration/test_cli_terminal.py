"""The CLI in a real terminal (tmux, tests/support/terminal.py), as a user meets it: progress
shown while it works and gone from piped output, Ctrl-C ending a command cleanly with one line
and exit status 130, the records a consumer prints and the summary it ends with.

One broker process serves the module; each test makes its own topics."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.broker import BrokerProcess
from tests.support.kafka import make_topic, produce, read_all
from tests.support.terminal import Terminal, onceflow


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("terminal") / "data", {})
    proc.start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def terminal(broker: BrokerProcess) -> Iterator[Terminal]:
    with Terminal({"ONCEFLOW_BOOTSTRAP_SERVERS": broker.bootstrap_servers}) as term:
        yield term


def _topics(broker: BrokerProcess) -> set[str]:
    from confluent_kafka.admin import AdminClient

    return set(AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=20).topics)


def test_bench_shows_progress_in_a_terminal_and_ctrl_c_ends_it_cleanly(
        broker: BrokerProcess, terminal: Terminal) -> None:
    topic = f"bench-terminal-{uuid.uuid4().hex[:8]}"
    terminal.run(onceflow("bench", "produce", "--bootstrap-servers", broker.bootstrap_servers, "--topic", topic,
                          "--partitions", "1", "--record-size", "100", "--seconds", "120"))
    terminal.wait_for_text(r"records acknowledged")  # the progress line, redrawn in place
    terminal.keys("C-c")
    status, screen = terminal.wait_for_exit(timeout=60)
    assert status == 130, screen
    assert "Traceback" not in screen, screen
    assert re.search(r"^onceflow bench produce: interrupted", screen, re.MULTILINE), screen
    assert topic not in _topics(broker)  # the topic it made is gone, Ctrl-C or not


def test_piped_bench_output_has_no_progress(broker: BrokerProcess, terminal: Terminal, tmp_path: Path) -> None:
    out = tmp_path / "bench.out"
    terminal.run(onceflow("bench", "produce", "--bootstrap-servers", broker.bootstrap_servers, "--partitions", "1",
                          "--record-size", "100", "--seconds", "1") + f" > {out} 2>&1")
    status, screen = terminal.wait_for_exit(timeout=90)
    assert status == 0, screen + out.read_text()
    text = out.read_text()
    assert "\r" not in text and "\x1b[" not in text, repr(text)
    assert "records acknowledged" not in text, text


def test_consume_prints_records_as_they_come_and_ctrl_c_ends_it_with_a_count(
        broker: BrokerProcess, terminal: Terminal) -> None:
    topic = f"terminal-consume-{uuid.uuid4().hex[:8]}"
    make_topic(broker.bootstrap_servers, topic, partitions=2)
    produce(broker.bootstrap_servers, topic, [b"first-aa", b"first-bb"], partition=0)
    terminal.run(onceflow("topics", "consume", topic, "--from-beginning", "-f", "%p:%o %v\\n"))
    terminal.wait_for_text(r"^0:1 first-bb$")
    produce(broker.bootstrap_servers, topic, [b"later-cc"], partition=1)  # while it waits
    terminal.wait_for_text(r"^1:0 later-cc$")
    terminal.keys("C-c")
    status, screen = terminal.wait_for_exit(timeout=60)
    assert "Traceback" not in screen, screen
    assert re.search(r"Processed a total of 3 messages$", screen, re.MULTILINE), screen  # after the ^C echo
    assert status in (0, 130), screen


def test_produce_reads_what_is_typed_until_ctrl_d(broker: BrokerProcess, terminal: Terminal) -> None:
    topic = f"terminal-produce-{uuid.uuid4().hex[:8]}"
    make_topic(broker.bootstrap_servers, topic)
    terminal.run(onceflow("topics", "produce", topic, "--key-separator", ":"))
    for line in ("k1:typed one", "k2:typed two"):
        terminal.type(line)
        terminal.keys("Enter")
    terminal.keys("C-d")
    status, screen = terminal.wait_for_exit(timeout=60)
    assert status == 0, screen
    assert "Traceback" not in screen, screen
    assert read_all(broker.bootstrap_servers, topic, [0], "read_committed") == [b"typed one", b"typed two"]


def test_piped_consume_output_is_the_records_only(broker: BrokerProcess, terminal: Terminal, tmp_path: Path) -> None:
    topic = f"terminal-pipe-{uuid.uuid4().hex[:8]}"
    make_topic(broker.bootstrap_servers, topic)
    produce(broker.bootstrap_servers, topic, [b"one", b"two", b"three"])
    out = tmp_path / "records.out"
    terminal.run(onceflow("topics", "consume", topic, "--from-beginning", "--exit-at-end") + f" | cat > {out}")
    status, screen = terminal.wait_for_exit(timeout=60)
    assert status == 0, screen
    assert out.read_text() == "one\ntwo\nthree\n"
    assert "Processed a total of 3 messages" in screen  # stderr stays on the terminal
