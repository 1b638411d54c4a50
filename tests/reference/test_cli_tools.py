"""``onceflow txn`` gives the same answers from Onceflow and from Apache Kafka where issue 24 changed
them: a transaction's duration only while it is open (KAFKA-15546: both coordinators keep a completed
transaction's start time, not its end), and a missing topic or partition worded as every tool words it.
The commands run in this process (``cli.main``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from onceflow.cli import main
from onceflow.tools.common import missing_topic
from tests.support.kafka import make_topic, txn_producer
from tests.support.reference import Target
from tests.support.waiting import wait_for


def onceflow(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(list(args))
    out, err = capsys.readouterr()
    return status, out, err


def test_txn_describe_and_producers_answer_alike(target: Target, unique: Callable[[str], str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    bs = target.bootstrap_servers
    topic, transactional_id = unique("durations"), unique("duration-app")
    make_topic(bs, topic)
    producer = txn_producer(bs, transactional_id)
    producer.begin_transaction()
    producer.produce(topic, b"x", partition=0)
    assert producer.flush(30) == 0

    def described() -> dict[str, Any]:
        status, out, err = onceflow(capsys, "txn", "describe", transactional_id, "--bootstrap-servers", bs, "--json")
        assert status == 0, err
        return json.loads(out)  # type: ignore[no-any-return]

    ongoing = described()
    assert ongoing["state"] == "Ongoing" and ongoing["transaction_duration_ms"] >= 0
    producer.commit_transaction(30)
    done = wait_for(lambda: (d := described())["state"] == "CompleteCommit" and d, what="the commit")
    assert done["transaction_start_time_ms"] == ongoing["transaction_start_time_ms"], "the start time is kept"
    assert done["transaction_duration_ms"] is None

    missing = unique("nowhere")
    status, out, err = onceflow(capsys, "txn", "producers", missing, "0", "--bootstrap-servers", bs)
    assert (status, out, err) == (1, "", f"onceflow txn producers: {missing_topic(missing)}\n")
    status, _, err = onceflow(capsys, "txn", "producers", topic, "3", "--bootstrap-servers", bs)
    assert (status, err) == (1, f"onceflow txn producers: topic {topic!r} has no partition 3 (it has 1: 0 to 0)\n")
