"""The asyncio network layer: bytes between sockets and the sans-I/O protocol core.

Theory of operation (after uvicorn's H11Protocol): one ``KafkaProtocol``
per connection lets the socket read straight into its ``FrameReader``'s
buffer (``asyncio.BufferedProtocol``: no copy of the request bytes), parses
each complete frame into a ``Request`` and hands it to its handler at once,
in arrival order.  A handler returns a response entity, an awaitable of one
(a produce waiting for fsync, a fetch long-polling, a JoinGroup waiting for
the rebalance), or None (acks=0 produce: no response).

Requests are *pipelined*: the next request is handled while an earlier one
is still waiting, so a producer with several requests in flight shares one
group-committed fsync among all of them.  Responses still leave strictly in
request order (Kafka's rule): each request takes a slot in a FIFO and a slot
is written only once it and every slot before it are complete.

Back-pressure: when a connection has ``queued.max.requests`` requests in
flight, or the transport's write buffer is above its high-water mark, the
connection neither reads nor starts another request until it drains.  The
frame reader's buffer is sized to about one frame, so a client that
sends requests and never reads the answers costs the broker about one
answer and the write buffer's high-water mark, not an answer per pipelined
request (``tests/integration/test_connection_memory.py`` measures it).

Security (``onceflow.security``): each connection belongs to one listener.
On an SSL listener the principal comes from the client's certificate, if
it sent one (``ssl.principal.mapping.rules``); on a SASL listener every
request passes the connection's ``Authenticator`` gate before its handler,
and until the client has authenticated its frames are held to
``sasl.server.max.receive.size``.  A refused exchange is answered, then the
connection is closed (``close_after_response``).

A connection on which nothing has moved for ``connections.max.idle.ms``
(and no request is in flight) is closed by the broker's timer, as Kafka's
Selector does; this also bounds what a client that sends half a frame and
stops can hold.

Failures stay on their connection: a frame that is too large or cannot be
parsed, or an unknown API key or version, is logged in one line and closes
that connection only (with the KIP-511 ApiVersions exception); a handler
that raises is logged with its traceback and closes its connection, and the
broker keeps serving everyone else.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import struct
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ..metrics.stats import RequestStats
from ..protocol import apis
from ..protocol.errors import ProtocolError
from ..protocol.framing import NEED_DATA, FrameReader, Request, UnknownApiVersions, encode_response, parse_request
from ..security.authenticator import Authenticator
from ..security.principal import ANONYMOUS, KafkaPrincipal, user
from ..security.tls import NoMatchingRule, PrincipalMapper, subject_name

log = logging.getLogger(__name__)

#: handler(request, connection) -> response | awaitable response | None
Handler = Callable[[Request, "KafkaProtocol"], Any]


class _Slot:
    __slots__ = ("body", "correlation_id", "future", "raw", "request", "started")

    def __init__(self, request: Request | None, correlation_id: int, started: float) -> None:
        self.request = request
        self.correlation_id = correlation_id
        self.started = started
        self.body: Any = None
        self.future: asyncio.Future[Any] | None = None
        #: A frame written as it is (a bare SASL token after SaslHandshake v0), not a response.
        self.raw: bytes | None = None


@dataclass(frozen=True, slots=True)
class ListenerSecurity:
    """How a listener's connections are authenticated."""

    name: str = "PLAINTEXT"
    #: SASL listeners: a new connection's authenticator, given its peer address.
    new_authenticator: Callable[[str], Authenticator] | None = None
    #: SSL listeners: client certificate subject -> principal name.
    principal_mapper: PrincipalMapper | None = None
    #: ``sasl.server.max.receive.size``: the largest frame before authentication.
    sasl_max_receive: int = 524288


PLAINTEXT_SECURITY = ListenerSecurity()


#: How long a TLS client has to finish its handshake (asyncio's default is 60 s).
TLS_HANDSHAKE_TIMEOUT_S = 10.0


class TlsAcceptor(asyncio.Protocol):
    """A TLS listener's connection until its handshake is done, then handed to a ``KafkaProtocol``.

    asyncio's ``create_server(ssl=...)`` drops a failed handshake without a word above DEBUG;
    upgrading with ``loop.start_tls`` instead lets the broker log one line for each client that
    fails it (no certificate where one is required, an expired one, garbage, a plaintext Kafka
    request on the TLS port) and bound the handshake's time."""

    def __init__(self, make_protocol: Callable[[], KafkaProtocol], context: ssl.SSLContext, listener: str) -> None:
        self._make_protocol = make_protocol
        self._context = context
        self._listener = listener
        self._task: asyncio.Task[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # the ClientHello waits in the socket for start_tls
        self._task = asyncio.get_running_loop().create_task(self._upgrade(transport))

    async def _upgrade(self, transport: asyncio.Transport) -> None:
        peer = transport.get_extra_info("peername")
        protocol = self._make_protocol()
        try:
            tls_transport = await asyncio.get_running_loop().start_tls(
                transport, protocol, self._context, server_side=True, ssl_handshake_timeout=TLS_HANDSHAKE_TIMEOUT_S)
        except (OSError, TimeoutError, ConnectionError) as exc:  # ssl.SSLError is an OSError
            reason = getattr(exc, "reason", None) or str(exc) or type(exc).__name__
            log.info("TLS handshake from %s on listener %s failed: %s", _address(peer), self._listener, reason)
            transport.close()
            return
        if tls_transport is None:  # the connection went away during the handshake
            transport.close()
            return
        protocol.connection_made(tls_transport)

    def data_received(self, data: bytes) -> None:  # reading is paused until start_tls takes over
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()


def _address(peer: Any) -> str:
    return f"{peer[0]}:{peer[1]}" if peer else "?"


class ServerState:
    """What the server shares across connections."""

    def __init__(self, now_ms: Callable[[], int] = lambda: time.monotonic_ns() // 1_000_000) -> None:
        #: The broker's clock (injected), for ``connections.max.idle.ms``.
        self.now_ms = now_ms
        self.connections: set[KafkaProtocol] = set()
        self.total_requests = 0
        #: Per-request counts for the metrics endpoint (``onceflow.metrics``).
        self.stats = RequestStats()


class KafkaProtocol(asyncio.BufferedProtocol):
    def __init__(
        self,
        dispatch: Callable[[Request, KafkaProtocol], Any],
        unknown_api_versions: Callable[[UnknownApiVersions], Any],
        state: ServerState,
        max_frame_bytes: int,
        max_in_flight: int,
        security: ListenerSecurity = PLAINTEXT_SECURITY,
    ) -> None:
        self._dispatch = dispatch
        self._unknown_api_versions = unknown_api_versions
        self._state = state
        self._reader = FrameReader(max_frame_bytes)
        self._max_in_flight = max_in_flight
        self._slots: deque[_Slot] = deque()
        self._transport: asyncio.Transport | None = None
        self._read_paused = False
        self._write_paused = False
        self._closing = False
        self._close_after_response = False
        self._max_frame_bytes = max_frame_bytes
        self._security = security
        self.peer = "?"
        self.client_host = ""
        self.listener_name = security.name
        self.principal: KafkaPrincipal = ANONYMOUS
        self.authenticator: Authenticator | None = None
        #: When bytes last came or went (``connections.max.idle.ms``).
        self.last_active_ms = state.now_ms()
        if security.new_authenticator is not None:  # from the first byte, even one before connection_made
            self._reader.max_frame_bytes = security.sasl_max_receive

    # -- asyncio.Protocol -----------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername")
        if peer:
            self.client_host = str(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        self._state.connections.add(self)
        self._state.stats.connections_created += 1
        security = self._security
        if security.principal_mapper is not None:
            self._principal_from_certificate(transport, security.principal_mapper)
        if security.new_authenticator is not None:
            self.authenticator = security.new_authenticator(self.peer)
        if self._reader.buffered and not self._closing:
            self._process_frames()

    def _principal_from_certificate(self, transport: asyncio.Transport, mapper: PrincipalMapper) -> None:
        ssl_object = transport.get_extra_info("ssl_object")
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if not der:
            return  # ssl.client.auth=requested and no certificate given: User:ANONYMOUS
        try:
            self.principal = user(mapper.name(subject_name(der)))
        except (NoMatchingRule, ValueError) as exc:
            self._fail(f"client certificate refused: {exc}")

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self in self._state.connections:
            self._state.connections.discard(self)
            self._state.stats.connections_closed += 1
        for slot in self._slots:
            if slot.future is not None and not slot.future.done():
                slot.future.cancel()
        self._slots.clear()

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self._reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active_ms = self._state.now_ms()
        self._reader.buffer_updated(nbytes)
        # After a TLS handshake (TlsAcceptor) bytes can come before connection_made: kept until then.
        if not self._closing and self._transport is not None:
            self._process_frames()

    def data_received(self, data: bytes) -> None:
        """Feed bytes by hand (tests drive the protocol this way, without a socket)."""
        if self._closing:
            return
        self._reader.receive_data(data)
        self._process_frames()

    def _process_frames(self) -> None:
        while not self._closing and not self._close_after_response and not self._blocked():
            try:
                frame = self._reader.next_frame()
            except ProtocolError as exc:
                self._fail(f"{exc}")
                return
            if frame is NEED_DATA:
                break
            self._handle_frame(frame)  # type: ignore[arg-type]
        self._update_reading()

    # -- requests -------------------------------------------------------------

    def _handle_frame(self, frame: memoryview) -> None:
        if self.authenticator is not None and self.authenticator.expects_raw_token:
            self._raw_token(self.authenticator, bytes(frame))
            return
        try:
            request = parse_request(frame)
        except ProtocolError as exc:
            self._fail(str(exc))
            return
        started = time.perf_counter()
        self._state.total_requests += 1
        if self.authenticator is not None:
            api_key = apis.API_VERSIONS if isinstance(request, UnknownApiVersions) else request.api_key
            if (refused := self.authenticator.gate(api_key)) is not None:
                self._fail(refused)
                return
        if isinstance(request, UnknownApiVersions):
            self._push(_Slot(None, request.correlation_id, started), self._unknown_api_versions(request))
            return
        self._state.stats.received(request.api_key, request.api_version, request.size, request.client_id,
                                   self.client_host, request.body)
        try:
            result = self._dispatch(request, self)
        except Exception:
            log.exception("%s v%d from %s failed; closing the connection", request.name, request.api_version, self.peer)
            self._abort()
            return
        if result is None:
            return  # acks=0 produce: Kafka sends no response
        self._push(_Slot(request, request.correlation_id, started), result)

    def _raw_token(self, auth: Authenticator, token: bytes) -> None:
        """A bare SASL token (after SaslHandshake v0): answered with a bare token, or, refused,
        the connection closed without an answer, as Kafka does (the authenticator logs why)."""
        outcome = auth.authenticate(token, 0)
        if outcome.close:
            self._abort()
            return
        if auth.authenticated and auth.principal is not None:
            self.on_authenticated(auth.principal)
        slot = _Slot(None, -1, time.perf_counter())
        slot.raw = struct.pack(">i", len(outcome.reply)) + outcome.reply
        self._slots.append(slot)
        self._flush_ready()

    def _push(self, slot: _Slot, result: Any) -> None:
        if isinstance(result, Awaitable):
            slot.future = asyncio.ensure_future(result)
            slot.future.add_done_callback(self._on_done)
        else:
            slot.body = result
        self._slots.append(slot)
        self._flush_ready()

    def _on_done(self, _fut: asyncio.Future[Any]) -> None:
        self._flush_ready()
        self._process_frames()

    def _flush_ready(self) -> None:
        transport = self._transport
        while self._slots and not self._closing:
            slot = self._slots[0]
            if slot.future is not None:
                if not slot.future.done():
                    return
                if slot.future.cancelled():
                    self._abort()
                    return
                exc = slot.future.exception()
                if exc is not None:
                    request = slot.request
                    name = f"{request.name} v{request.api_version}" if request else "request"
                    log.error("%s from %s failed; closing the connection", name, self.peer, exc_info=exc)
                    self._abort()
                    return
                slot.body = slot.future.result()
            self._slots.popleft()
            if slot.raw is not None:
                assert transport is not None
                transport.write(slot.raw)
                continue
            if slot.body is None:
                continue
            assert transport is not None
            frame = encode_response(slot.correlation_id, slot.body)
            transport.write(frame)
            self.last_active_ms = self._state.now_ms()
            if slot.request is not None:
                self._state.stats.answered(slot.request.api_key, slot.body,
                                           (time.perf_counter() - slot.started) * 1000, len(frame))
        if self._close_after_response and not self._slots:
            self._abort()  # the refusal is written first: close() sends what is buffered

    # -- flow control and closing ---------------------------------------------

    def _blocked(self) -> bool:
        """No further request may start now (see Back-pressure above)."""
        return self._write_paused or len(self._slots) >= self._max_in_flight

    def _update_reading(self) -> None:
        if self._transport is None or self._closing:
            return
        should_pause = self._blocked()
        if should_pause and not self._read_paused:
            self._read_paused = True
            self._state.stats.paused("write_buffer" if self._write_paused else "in_flight")
            self._transport.pause_reading()
        elif not should_pause and self._read_paused:
            self._read_paused = False
            self._transport.resume_reading()
            if self._reader.buffered:
                asyncio.get_running_loop().call_soon(self._process_frames)

    def _fail(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self._abort()

    def _abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        self._abort()

    def idle_ms(self, now_ms: int) -> int:
        """How long nothing has moved on the connection; 0 while a request is in flight."""
        return 0 if self._slots else now_ms - self.last_active_ms

    def close_after_response(self) -> None:
        self._close_after_response = True

    def on_authenticated(self, principal: KafkaPrincipal) -> None:
        self.principal = principal
        self._reader.max_frame_bytes = self._max_frame_bytes
