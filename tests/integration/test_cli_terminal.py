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
