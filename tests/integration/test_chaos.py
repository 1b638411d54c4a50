"""``onceflow chaos`` end to end: the proxy's resets, the short campaign ``make test`` runs (every
kind of fault against the real broker process, the history checked), and the checker finding
anomalies planted in that real history."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from kio.schema.metadata.v12.request import MetadataRequest

from onceflow.chaos.checker import check
from onceflow.chaos.history import Event, load
from onceflow.chaos.proxy import TcpProxy
from tests.support.broker import BrokerProcess
from tests.support.waiting import wait_for
from tests.support.wire import WireClient, api_versions_ok

#: The short campaign: about two minutes with ten kills, and one of every other fault.
SHORT = ["--seconds", "100", "--kills", "10", "--pauses", "1", "--resets", "2", "--crash-rolls", "1",
         "--crash-compactions", "1", "--disk-fulls", "1", "--disk-mib", "128", "--seed", "11", "--ctp-group", "consumer"]


def test_the_proxy_resets_every_connection_and_the_broker_serves_the_next(make_broker_process: Any) -> None:
    proxy = TcpProxy(("127.0.0.1", 0))
    broker: BrokerProcess = make_broker_process(**{"advertised.listeners": f"PLAINTEXT://{proxy.address}"})
    proxy.target = ("127.0.0.1", broker.port)
    proxy.start()
    try:
        with WireClient(proxy.address) as first, WireClient(proxy.address) as second:
            metadata = first.request(MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                     include_topic_authorized_operations=False))
            assert [(b.host, b.port) for b in metadata.brokers] == [("127.0.0.1", proxy.port)], "clients stay on the proxy"
            assert api_versions_ok(proxy.address)
            wait_for(lambda: proxy.open_connections() == 2, what="both connections through the proxy")
            assert proxy.reset_all() == 2
            assert first.is_closed_by_peer() and second.is_closed_by_peer()
        assert broker.proc is not None and broker.proc.poll() is None, "the broker lives on"
        assert api_versions_ok(proxy.address), "a new connection is served"
    finally:
        proxy.close()


def _chaos(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "onceflow", "--log-level", "WARNING", "chaos", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.timeout(600)
def test_the_short_campaign_finds_no_anomaly_and_the_checker_finds_planted_ones(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("the short chaos campaign mounts a tmpfs for its full-disk fault: run the tests as root")
    workdir = tmp_path / "chaos"
    proc = _chaos(*SHORT, "--workdir", str(workdir), "--json", timeout=540)
    assert proc.returncode == 0, f"exit {proc.returncode}\n{_what_failed(proc.stdout)}\n{proc.stderr[-4000:]}"
    report = json.loads(proc.stdout)
    assert report["valid"] and not report["errors"]
    assert report["faults"] == {"kill": 10, "pause": 1, "reset": 2, "crash-roll": 1, "crash-compaction": 1, "disk-full": 1}
    committed = report["transactions"]["txn"]["committed"]
    assert committed > 200 and report["transactions"]["ctp"]["committed"] > 20, report["transactions"]
    assert report["records_read"] > 1000

    events = load(workdir / "history.jsonl")
    assert check(events).valid, "the saved history checks as the campaign did"
    faults = [e for e in events if e.f == "fault" and e.type == "info"]
    assert len(faults) == 16

    # Plant anomalies in the real history: the checker must see each.
    found = {k for k, anomalies in check(_drop_one_committed_value(events)).anomalies.items() if anomalies}
    assert "lost-write" in found and found <= {"lost-write", "torn-transaction"}, found  # torn if it had company
    found = {k for k, anomalies in check(_read_an_aborted_value(events)).anomalies.items() if anomalies}
    assert found == {"aborted-read"}, found


def _what_failed(stdout: str) -> str:
    """The anomalies' kinds and descriptions, not the tail of the history they quote."""
    try:
        report = json.loads(stdout)
    except json.JSONDecodeError:
        return stdout[-4000:]
    lines = [f"errors: {report.get('errors')}", f"transactions: {report.get('transactions')}"]
    for kind, found in report.get("anomalies", {}).items():
        lines += [f"{kind}: {a['description']}" for a in found[:5]]
        lines += [f"    {str(e)[:300]}" for a in found[:2] for e in a["events"][:6]]
    return "\n".join(lines)[-8000:]


def _final_committed(events: list[Event]) -> Event:
    return [e for e in events if e.f == "final-read" and e.value["isolation"] == "read_committed"][-1]


def _drop_one_committed_value(events: list[Event]) -> list[Event]:
    final = _final_committed(events)
    partitions = json.loads(json.dumps(final.value["partitions"]))
    tp = next(tp for tp, read in partitions.items() if read["records"] and not tp.split("/")[0].endswith("-out"))
    partitions[tp]["records"].pop()
    doctored = dataclasses.replace(final, value={**final.value, "partitions": partitions})
    return [doctored if e is final else e for e in events]


def _read_an_aborted_value(events: list[Event]) -> list[Event]:
    invokes = {e.value["id"]: e for e in events if e.f == "txn" and e.type == "invoke"}
    aborted = next(e for e in events if e.f == "txn" and e.type == "fail" and e.value["commit_time"] is None)
    topic, partition, value = invokes[aborted.value["id"]].value["writes"][0]
    offset = aborted.value["offsets"].get(value, 10**9)
    poll = Event(len(events), events[-1].time + 1, "reader-planted", "ok", "poll",
                 {"isolation": "read_committed", "records": [[topic, partition, offset, value]]})
    return [*events, poll]
