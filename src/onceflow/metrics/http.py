"""The metrics port: ``/metrics`` for Prometheus, ``/`` the console, ``/api/*`` its data, over HTTP/1.1.

Theory of operation: as the Kafka listener, a sans-I/O protocol core under a
thin asyncio server: h11 parses and frames HTTP, ``_HttpConnection`` moves
bytes.  It runs on the broker's event loop, so the views it serves read the
components directly (``metrics.views``), and it only reads: the one action,
aborting a hanging transaction, is off unless ``console.allow.abort=true``
and then goes through ``onceflow txn abort``'s own code, a Kafka client in a
worker thread, like any operator's.

It is bound to the listener's address (loopback unless told otherwise), and
it never disturbs the Kafka listener: headers are capped (431), bodies too
(413), a request must arrive whole within ``REQUEST_TIMEOUT_S`` and an idle
connection is closed after ``IDLE_TIMEOUT_S`` (slow clients), at most
``MAX_CONNECTIONS`` are served at once, and each bad request is logged in one
line and answered or closed, never raised.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import h11
from prometheus_client import CollectorRegistry, ProcessCollector
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from . import console
from .collector import BrokerCollector
from .exposition import render

if TYPE_CHECKING:
    from ..broker.broker import Broker

log = logging.getLogger(__name__)

MAX_HEADER_BYTES = 16 * 1024
MAX_BODY_BYTES = 4 * 1024
REQUEST_TIMEOUT_S = 10.0
IDLE_TIMEOUT_S = 60.0
MAX_CONNECTIONS = 64


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    content_type: str
    body: bytes


def _json(status: int, data: Any) -> Reply:
    return Reply(status, "application/json", json.dumps(data).encode())


class MetricsServer:
    def __init__(self, broker: Broker, host: str, port: int, allow_abort: bool) -> None:
        self._broker = broker
        self.host = host
        self.port = port
        self.allow_abort = allow_abort
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(BrokerCollector(broker))
        ProcessCollector(registry=self.registry)
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[_HttpConnection] = set()
        self._routes: dict[tuple[str, str], Callable[[bytes, dict[str, str]], Reply | Awaitable[Reply]]] = {
            ("GET", "/metrics"): lambda body, headers: Reply(200, CONTENT_TYPE_LATEST, render(self.registry.collect())),
            ("GET", "/"): lambda body, headers: Reply(200, "text/html; charset=utf-8", console.page()),
            ("GET", "/api/state"): lambda body, headers: _json(200, console.state(self._broker, self.allow_abort)),
            ("POST", "/api/abort"): self._abort,
        }

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _HttpConnection(self), self.host, self.port,
                                                reuse_address=True)
        self.port = self._server.sockets[0].getsockname()[1]
        log.info("metrics and console on http://%s:%d/ (console.allow.abort=%s)", self.host, self.port,
                 str(self.allow_abort).lower())

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply | Awaitable[Reply]:
        path = target.split("?", 1)[0]
        route = self._routes.get((method, path))
        if route is None:
            if any(p == path for _, p in self._routes):
                return _json(405, {"error": f"{method} is not allowed on {path}"})
            return _json(404, {"error": f"no such page: {path}"})
        return route(body, headers)

    async def _abort(self, body: bytes, headers: dict[str, str]) -> Reply:
        """Abort a hanging transaction on one partition: ``{"topic", "partition", "producer_id"}``."""
        if not self.allow_abort:
            return _json(403, {"error": "the console is read-only (set console.allow.abort=true to abort from it)"})
        # A JSON content type is not one a cross-site form can send without the browser asking first
        # (CORS preflight, which this server never grants): only a page of this origin can abort.
        if headers.get("content-type", "").split(";")[0].strip() != "application/json":
            return _json(415, {"error": "send the abort as application/json"})
        try:
            spec = json.loads(body)
            topic, partition, producer_id = str(spec["topic"]), int(spec["partition"]), int(spec["producer_id"])
        except (ValueError, KeyError, TypeError) as exc:
            return _json(400, {"error": f"expected topic, partition and producer_id: {exc}"})
        from ..tools.common import ToolError, error_line
        from ..tools.txn import abort_transaction

        bootstrap = f"{self._broker.advertised_host}:{self._broker.advertised_port}"
        log.info("console: aborting the transaction of producer %d on %s-%d", producer_id, topic, partition)
        try:
            result = await asyncio.get_running_loop().run_in_executor(
                None, lambda: abort_transaction(bootstrap, topic, partition, producer_id))
        except ToolError as exc:
            return _json(409, {"error": error_line(exc)})
        except Exception as exc:  # noqa: BLE001 - reported to the page, logged here
            log.warning("console: abort on %s-%d failed: %s", topic, partition, exc)
            return _json(500, {"error": str(exc)})
        return _json(200, {"aborted": result})


class _HttpConnection(asyncio.Protocol):
    """One HTTP connection: h11 frames it, requests are answered one after another."""

    def __init__(self, server: MetricsServer) -> None:
        self._server = server
        self._conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEADER_BYTES)
        self._transport: asyncio.Transport | None = None
        self._request: h11.Request | None = None
        self._body = bytearray()
        self._busy = False
        self._timer: asyncio.TimerHandle | None = None
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if len(self._server.connections) >= MAX_CONNECTIONS:
            log.warning("metrics port: refusing %s: %d connections already open", self.peer, MAX_CONNECTIONS)
            transport.close()
            return
        self._server.connections.add(self)
        self._arm(IDLE_TIMEOUT_S)

    def connection_lost(self, exc: Exception | None) -> None:
        self._server.connections.discard(self)
        if self._timer is not None:
            self._timer.cancel()

    def data_received(self, data: bytes) -> None:
        if self._conn.their_state is h11.IDLE and not self._busy:
            self._arm(REQUEST_TIMEOUT_S)  # the request has begun: it must arrive whole in time
        try:
            self._conn.receive_data(data)
        except RuntimeError:  # data after the connection was closed or errored: ignore it
            return
        self._process()

    def _process(self) -> None:
        while not self._busy and self._transport is not None and not self._transport.is_closing():
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                status = exc.error_status_hint
                log.warning("metrics port: bad request from %s: %s (%d)", self.peer, exc, status)
                self._send_error(status, str(exc))
                return
            if event is h11.NEED_DATA or event is h11.PAUSED:
                return
            if isinstance(event, h11.Request):
                self._request = event
                self._body.clear()
            elif isinstance(event, h11.Data):
                self._body += event.data
                if len(self._body) > MAX_BODY_BYTES:
                    log.warning("metrics port: request body from %s over %d bytes", self.peer, MAX_BODY_BYTES)
                    self._send_error(413, "request body too large")
                    return
            elif isinstance(event, h11.EndOfMessage):
                self._answer()
            elif isinstance(event, h11.ConnectionClosed):
                self.close()
                return

    def _answer(self) -> None:
        request = self._request
        assert request is not None
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in request.headers}
        method, target = request.method.decode("latin-1"), request.target.decode("latin-1")
        try:
            result = self._server.handle(method, target, headers, bytes(self._body))
        except Exception as exc:
            log.exception("metrics port: %s %s failed", method, target)
            result = _json(500, {"error": repr(exc)})
        if isinstance(result, Reply):
            self._respond(result)
            return
        self._busy = True
        task = asyncio.ensure_future(result)
        task.add_done_callback(self._answered)

    def _answered(self, task: asyncio.Future[Reply]) -> None:
        self._busy = False
        if task.cancelled():
            self.close()
            return
        exc = task.exception()
        self._respond(task.result() if exc is None else _json(500, {"error": repr(exc)}))
        self._process()

    def _respond(self, reply: Reply) -> None:
        headers = [("content-type", reply.content_type), ("content-length", str(len(reply.body))),
                   ("cache-control", "no-store"), ("x-content-type-options", "nosniff")]
        if self._write(h11.Response(status_code=reply.status, headers=headers)) and self._write(h11.Data(data=reply.body)):
            self._write(h11.EndOfMessage())
        if self._conn.our_state is h11.MUST_CLOSE or self._conn.their_state is h11.MUST_CLOSE:
            self.close()
            return
        try:
            self._conn.start_next_cycle()
        except h11.LocalProtocolError:
            self.close()
            return
        self._arm(IDLE_TIMEOUT_S)

    def _send_error(self, status: int, reason: str) -> None:
        body = json.dumps({"error": reason}).encode()
        try:
            self._write(h11.Response(status_code=status, headers=[
                ("content-type", "application/json"), ("content-length", str(len(body))), ("connection", "close")]))
            self._write(h11.Data(data=body))
            self._write(h11.EndOfMessage())
        except h11.LocalProtocolError:
            pass  # a response was already under way: just close
        self.close()

    def _write(self, event: Any) -> bool:
        if self._transport is None or self._transport.is_closing():
            return False
        data = self._conn.send(event)
        if data:
            self._transport.write(data)
        return True

    def _arm(self, seconds: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = asyncio.get_running_loop().call_later(seconds, self._timed_out)

    def _timed_out(self) -> None:
        if self._busy:
            self._arm(REQUEST_TIMEOUT_S)
            return
        if self._conn.their_state is not h11.IDLE:
            log.warning("metrics port: %s sent no complete request within %.0f s; closing", self.peer, REQUEST_TIMEOUT_S)
        self.close()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
