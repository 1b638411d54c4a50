"""``onceflow bench`` options that take counts: ``txn-rate`` runs every shape it is given, and a
bad count is refused, naming the option, before any broker starts.  ``--scrape-every``: positive
seconds, only with the Onceflow broker the benchmark starts, and its scraper's counts."""

from __future__ import annotations

import http.server
import threading

import pytest

from onceflow.bench import _one, run_bench
from onceflow.bench.workloads import Scraper
from onceflow.cli import build_parser
from tests.support.waiting import wait_for


def parse(*args: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["bench", *args])


def test_txn_rate_takes_lists_of_shapes() -> None:
    args = parse("txn-rate", "--records-per-txn", "1,10,100", "--producers", "4")
    assert args.records_per_txn == [1, 10, 100] and args.producers == [4]
    assert parse("txn-rate").records_per_txn is None, "every default shape"


@pytest.mark.parametrize("bad", ["0", "ten", "1,,-2", ""])
def test_a_bad_count_names_the_option(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("txn-rate", "--producers", bad)
    assert "--producers" in capsys.readouterr().err


def test_a_list_where_one_count_is_meant_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert _one([25], 10, "--records-per-txn") == 25 and _one(None, 10, "--records-per-txn") == 10
    assert run_bench(parse("commit-latency", "--records-per-txn", "1,10")) == 2
    assert capsys.readouterr().err == "onceflow bench commit-latency: --records-per-txn takes one number for this workload, not 1,10\n"


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf", "soon"])
def test_scrape_every_takes_positive_seconds(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert parse("produce", "--scrape-every", "0.5").scrape_every == 0.5
    with pytest.raises(SystemExit):
        parse("produce", "--scrape-every", bad)
    assert "--scrape-every" in capsys.readouterr().err


@pytest.mark.parametrize("options", [
    ["produce", "--bootstrap-servers", "127.0.0.1:1"],
    ["txn-rate", "--broker", "kafka"],
    ["recovery"],
])
def test_scrape_every_is_refused_in_one_line_without_its_broker(options: list[str],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Refused before anything starts: no broker, no connection to the servers given."""
    assert run_bench(parse(*options, "--scrape-every", "1")) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"onceflow bench {options[0]}: --scrape-every ") and err.count("\n") == 1


def test_the_scraper_counts_scrapes_and_failures() -> None:
    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/metrics" else 404)
            self.end_headers()
            self.wfile.write(b"up 1.0\n")

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with Scraper(f"{base}/metrics", 0.02) as ok, Scraper(f"{base}/missing", 0.02) as missing:
            wait_for(lambda: len(ok.times_ms) >= 3 and missing.failures >= 3, timeout=10,
                     what="three scrapes of each")
    finally:
        server.shutdown()
        server.server_close()
    assert ok.summary()["scrapes"] >= 3 and ok.failures == 0 and ok.body_bytes == len(b"up 1.0\n")
    assert missing.summary()["scrapes"] == 0 and missing.failures >= 3 and "404" in missing.line()
