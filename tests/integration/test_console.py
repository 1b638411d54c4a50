"""The console (``metrics.port``'s ``/``) in a real browser: Debian's chromium, headless, driven by
Playwright against broker processes, as an operator would use it.

Two broker processes serve the module's tests, each started once: one that lets the console abort
(``console.allow.abort=true``) and one left read-only, its default.  Both accept transactional
batches from producers no coordinator knows (``transaction.partition.verification.enable=false``),
which is how a hanging transaction is made.  Each test uses its own topics and transactional ids
and looks only at its own rows, so the tests run in any order.  The page redraws from
``/api/state`` once a second; every wait on it is Playwright's ``expect`` with a deadline.

``make test`` checks that /usr/bin/chromium is there first (scripts/check-chromium.sh); Playwright
never downloads a browser of its own.  The screenshot test leaves ``console.png`` in
``$ONCEFLOW_TEST_ARTIFACTS``, or in build/test-artifacts/ when that is not set.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from playwright.sync_api import Browser, Dialog, Locator, Page, expect, sync_playwright

from onceflow.broker.process import free_port
from onceflow.spark.protocol import SlotRecord, Written, progress_topic
from tests.support.broker import FAST_GROUPS, BrokerProcess
from tests.support.kafka import TIMEOUT, make_topic, produce, read_all, txn_producer
from tests.support.txn_wire import make_hanging_transaction
from tests.support.waiting import wait_for

CHROMIUM = "/usr/bin/chromium"
#: How long the page may take to show a change: it redraws every second; the rest is slack for a busy machine.
SHOWN_MS = 15_000
REPO = Path(__file__).resolve().parents[2]
#: Transactional batches from producers no coordinator knows are accepted: how a hanging transaction is made.
UNVERIFIED = {"transaction.partition.verification.enable": "false"}


class Console:
    """A broker process and the address of its console."""

    def __init__(self, broker: BrokerProcess, port: int) -> None:
        self.broker = broker
        self.bootstrap = broker.bootstrap_servers
        self.url = f"http://127.0.0.1:{port}/"

    def state(self) -> Any:
        with urllib.request.urlopen(self.url + "api/state", timeout=TIMEOUT) as reply:
            return json.load(reply)

    def post(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        request = urllib.request.Request(self.url + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as reply:
                return reply.status, json.load(reply)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)


def _console(tmp_path_factory: pytest.TempPathFactory, name: str, **settings: str) -> Iterator[Console]:
    port = free_port()
    broker = BrokerProcess(tmp_path_factory.mktemp(name) / "data",
                           {**FAST_GROUPS, **UNVERIFIED, "metrics.port": str(port), **settings})
    broker.start()
    try:
        yield Console(broker, port)
    finally:
        broker.kill()


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """The broker whose console may abort hanging transactions."""
    yield from _console(tmp_path_factory, "console", **{"console.allow.abort": "true"})


@pytest.fixture(scope="module")
def read_only_console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    """A broker with the console's default: read-only."""
    yield from _console(tmp_path_factory, "read-only-console")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"no {CHROMIUM}: run scripts/check-chromium.sh (make test does) to install Debian's chromium")
    with sync_playwright() as playwright:
        # Root cannot run Chromium's sandbox; the pages are our own console.
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; any uncaught error in the console's script fails the test."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    context.set_default_timeout(SHOWN_MS)
    expect.set_options(timeout=SHOWN_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield page
        assert errors == [], f"the console's script failed: {errors}"
    finally:
        context.close()


def transaction_row(page: Page, **attrs: str | int) -> Locator:
    """The open-transactions row with these data attributes (``transactional_id=``, ``producer_id=``)."""
    match = "".join(f'[data-{name.replace("_", "-")}="{value}"]' for name, value in attrs.items())
    return page.locator(f"#transactions tbody tr{match}")


def cell(page: Page, table: str, row: str, heading: str) -> Locator:
    """The cell of the rows ``row`` (a selector) in the column headed ``heading`` of ``#table``."""
    headings = [text.strip() for text in page.locator(f"#{table} thead th").all_inner_texts()]
    return page.locator(f"#{table} tbody {row} > td:nth-child({headings.index(heading) + 1})")


def partition_cell(page: Page, partition: str, heading: str) -> Locator:
    return cell(page, "partitions", f'tr[data-partition="{partition}"]', heading)


# -- a transaction's life on the page ---------------------------------------------------------------


def test_an_open_transaction_is_listed_until_it_commits(console: Console, page: Page) -> None:
    bs = console.bootstrap
    make_topic(bs, "orders", 2)
    producer = txn_producer(bs, "console-orders")
    producer.begin_transaction()
    for partition in (0, 1):
        producer.produce("orders", f"order-{partition}".encode(), partition=partition)
    assert producer.flush(TIMEOUT) == 0

    page.goto(console.url)
    row = transaction_row(page, transactional_id="console-orders")
    expect(row).to_have_count(1)
    expect(row).not_to_have_class(re.compile(r"\bhanging\b"))
    expect(row.locator("td.partitions")).to_have_text("orders-0, orders-1")
    [listed] = [t for t in console.state()["transactions"] if t["transactional_id"] == "console-orders"]
    assert row.get_attribute("data-producer-id") == str(listed["producer_id"])
    age = row.locator("td.age")
    first = age.inner_text()
    assert re.fullmatch(r"\d+\.\d s", first), first
    expect(age).not_to_have_text(first)  # the page is live: the age grows from one redraw to the next
    for name in ("orders-0", "orders-1"):
        expect(partition_cell(page, name, "Open txns")).to_have_text("1")
        expect(partition_cell(page, name, "LSO lag")).to_have_text("1")
        expect(partition_cell(page, name, "Oldest txn age")).to_have_text(re.compile(r"\d+\.\d s"))

    producer.commit_transaction(TIMEOUT)
    producer.close()  # nothing left to send: it returns at once
    expect(row).to_have_count(0)
    for name in ("orders-0", "orders-1"):  # each partition: its record and the commit marker
        expect(partition_cell(page, name, "Open txns")).to_have_text("0")
        expect(partition_cell(page, name, "LSO lag")).to_have_text("0")
        expect(partition_cell(page, name, "High watermark")).to_have_text("2")
        expect(partition_cell(page, name, "Last stable")).to_have_text("2")


def test_the_console_aborts_a_hanging_transaction(console: Console, page: Page) -> None:
    bs = console.bootstrap
    make_topic(bs, "stuck", 1)
    pid = make_hanging_transaction(bs, "stuck")
    later = [f"later-{i}".encode() for i in range(3)]
    produce(bs, "stuck", later, partition=0)
    assert read_all(bs, "stuck", [0], "read_committed") == [], "the hanging transaction holds back the LSO"

    page.goto(console.url)
    row = transaction_row(page, producer_id=pid)
    expect(row).to_have_count(1)
    expect(row).to_have_class(re.compile(r"\bhanging\b"))
    expect(row).to_contain_text("no transaction coordinator knows this producer id")
    expect(row.locator("td.partitions")).to_have_text("stuck-0")
    expect(partition_cell(page, "stuck-0", "LSO lag")).to_have_text("5")  # 2 ghost records, 3 later ones
    button = row.locator("button.abort")
    expect(button).to_have_text("abort stuck-0")

    asked: list[str] = []

    def accept(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.once("dialog", accept)
    button.click()
    # The abort is onceflow txn abort's code, a Kafka client the broker runs: allow it a client's timeout.
    expect(page.locator("#notice")).to_have_text(f"aborted the transaction of producer {pid} on stuck-0",
                                                 timeout=TIMEOUT * 1000)
    assert asked == [f"Abort the transaction of producer {pid} on stuck-0?"]

    wait_for(lambda: read_all(bs, "stuck", [0], "read_committed") == later, timeout=TIMEOUT,
             what="the later records to be readable read_committed")
    expect(row).to_have_count(0)
    expect(partition_cell(page, "stuck-0", "LSO lag")).to_have_text("0")
    expect(partition_cell(page, "stuck-0", "Open txns")).to_have_text("0")


def test_the_console_is_read_only_by_default(read_only_console: Console, page: Page) -> None:
    console = read_only_console
    bs = console.bootstrap
    make_topic(bs, "stuck", 1)
    pid = make_hanging_transaction(bs, "stuck")
    produce(bs, "stuck", [b"later"], partition=0)

    page.goto(console.url)
    row = transaction_row(page, producer_id=pid)
    expect(row).to_have_count(1)
    expect(row).to_have_class(re.compile(r"\bhanging\b"))
    expect(row.locator("td.partitions")).to_have_text("stuck-0")
    expect(page.locator("button.abort")).to_have_count(0)
    assert console.state()["allow_abort"] is False

    status, answer = console.post("api/abort", {"topic": "stuck", "partition": 0, "producer_id": pid})
    assert status == 403, answer
    assert "read-only" in answer["error"]
    assert read_all(bs, "stuck", [0], "read_committed") == [], "still hanging"
    [still] = [t for t in console.state()["transactions"] if t["producer_id"] == pid]
    assert still["hanging"] and still["open_on"] == [["stuck", 0]]
    assert "console: aborting" not in console.broker.log()
    expect(row).to_have_count(1)
    expect(page.locator("button.abort")).to_have_count(0)


# -- the whole page, for a person to look at ------------------------------------------------------


def test_screenshot_of_every_section(console: Console, page: Page) -> None:
    """Every section with something in it, checked, and saved as console.png for a person to look at."""
    bs = console.bootstrap
    make_topic(bs, "payments", 3)
    make_topic(bs, "ledger", 1)
    produce(bs, "payments", [f"payment-{i}".encode() for i in range(30)])
    # A consumer group reading read_committed, its offsets committed part-way.
    consumer = Consumer({"bootstrap.servers": bs, "group.id": "payments-audit", "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    try:
        consumer.subscribe(["payments"])
        wait_for(lambda: consumer.poll(0.2) is not None, interval=0, what="the group to read a payment")
        consumer.commit(offsets=[TopicPartition("payments", p, 4) for p in range(3)], asynchronous=False)
        # An open transaction on two partitions, and a hanging one on the ledger.
        producer = txn_producer(bs, "payments-enricher")
        producer.begin_transaction()
        for p in (0, 1):
            producer.produce("payments", b"enriched", partition=p)
        assert producer.flush(TIMEOUT) == 0
        pid = make_hanging_transaction(bs, "ledger")
        # A Spark sink's progress topic: slot 0 wrote micro-batch 7, slot 1 is one behind.
        progress = progress_topic("daily-totals", "")
        make_topic(bs, progress, 2)
        for slot, batch in ((0, 7), (1, 6)):
            record = SlotRecord(slot, Written(batch, "run-1", 120 + slot, "fp", "onceflow-sink"))
            produce(bs, progress, [record.encode()], partition=slot)

        page.goto(console.url)
        expect(transaction_row(page, transactional_id="payments-enricher")).to_have_count(1)
        expect(transaction_row(page, producer_id=pid).locator("button.abort")).to_have_text("abort ledger-0")
        expect(partition_cell(page, "payments-0", "Open txns")).to_have_text("1")
        expect(partition_cell(page, "payments-0", "LSO lag")).to_have_text("1")
        # The group reads read_committed: its lag is measured to the last stable offset, not the high watermark.
        group = 'tr[data-group="payments-audit"]'
        expect(page.locator(f"#groups {group}")).to_have_count(3)
        expect(cell(page, "groups", group, "Reads").first).to_have_text("read_committed")
        stable = int(partition_cell(page, "payments-0", "Last stable").inner_text().replace(",", ""))
        expect(cell(page, "groups", f"{group}:has(td:text-is('payments-0'))", "End")).to_have_text(str(stable))
        expect(cell(page, "groups", f"{group}:has(td:text-is('payments-0'))", "Lag")).to_have_text(str(stable - 4))
        pipeline = f'tr[data-pipeline="{progress}"]'
        expect(cell(page, "pipelines", pipeline, "Last micro-batch")).to_have_text(["7", "6"])
        expect(cell(page, "pipelines", pipeline, "Behind")).to_have_text(["0", "1"])

        artifacts = Path(os.environ.get("ONCEFLOW_TEST_ARTIFACTS") or REPO / "build" / "test-artifacts")
        artifacts.mkdir(parents=True, exist_ok=True)
        shot = artifacts / "console.png"
        page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 10_000
        producer.abort_transaction(TIMEOUT)
        producer.close()
    finally:
        consumer.close()
