"""A TCP proxy in front of the broker, that can reset every client connection at once.

Theory of operation: the proxy listens on a loopback port and forwards each accepted connection
to the broker, one thread per direction copying bytes as they come (it never parses Kafka
frames).  ``reset_all`` closes every open pair with SO_LINGER 0, so both the client and the
broker see a TCP RST mid-stream, as when a NAT or load balancer drops its state: requests in
flight are lost and their answers never arrive.  The broker must advertise the proxy's address
(``advertised.listeners``), or clients would bypass it after their first Metadata answer.

``capture`` (optional) sees every chunk of bytes the proxy forwards, before it is forwarded:
``capture(connection, from_client, data)``, with connections numbered from 1 in accept order.
The network fuzzer (tests/fuzz/network.py) records real client traffic this way.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import struct
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

_CHUNK = 256 << 10


#: ``capture(connection, from_client, data)``: a forwarded chunk, seen before it is sent on.
Capture = Callable[[int, bool, bytes], None]


class TcpProxy:
    """Forward ``127.0.0.1:<port>`` to ``target``; ``reset_all`` drops every connection."""

    def __init__(self, target: tuple[str, int], port: int = 0, capture: Capture | None = None) -> None:
        self.target = target
        self.capture = capture
        self._listener = socket.create_server(("127.0.0.1", port))
        self.port: int = self._listener.getsockname()[1]
        self._pairs: set[tuple[socket.socket, socket.socket]] = set()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self.accepted = 0
        self.resets = 0
        self._acceptor = threading.Thread(target=self._accept, name="chaos-proxy-accept", daemon=True)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> TcpProxy:
        self._acceptor.start()
        return self

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                _reset(client)  # the broker is down: the client sees its connection refused-like reset
                continue
            for sock in (client, upstream):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = (client, upstream)
            with self._lock:
                self._pairs.add(pair)
                self.accepted += 1
                number = self.accepted
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, pair, number, src is client), name="chaos-proxy-pump",
                                 daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket], number: int,
              from_client: bool) -> None:
        capture = self.capture
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                if capture is not None:
                    capture(number, from_client, data)
                dst.sendall(data)
        except OSError:
            pass
        self._drop(pair, reset=False)

    def _drop(self, pair: tuple[socket.socket, socket.socket], reset: bool) -> None:
        with self._lock:
            if pair not in self._pairs:
                return
            self._pairs.discard(pair)
        for sock in pair:
            if reset:
                _reset(sock)
            else:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()

    def reset_all(self) -> int:
        """Reset every open connection (both sides); returns how many pairs were dropped."""
        with self._lock:
            pairs = list(self._pairs)
        for pair in pairs:
            self._drop(pair, reset=True)
        self.resets += len(pairs)
        return len(pairs)

    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        self.reset_all()


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN.  SHUT_RD first wakes the pump blocked in ``recv`` on
    it (closing alone would not, on Linux) without sending anything."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RD)
    sock.close()
