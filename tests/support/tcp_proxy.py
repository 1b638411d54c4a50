"""A TCP proxy between real clients and one broker that recognises Kafka requests, to hold one back
or to keep a copy of it and deliver that copy again later: the stragglers of KAFKA-17754.

Theory of operation: ``RequestProxy`` is the chaos campaign's ``TcpProxy`` (``onceflow.chaos.proxy``:
a loopback listener, one thread per direction of each connection, ``close`` resets them all) with
the client-to-broker direction cut into requests: a 4-byte size, then the header's api key,
api version and correlation id.  Each complete request is forwarded unchanged, as one write; the
broker-to-client direction is copied as it comes, never parsed.  A size below 8 or above
``MAX_FRAME`` stops the parsing for that connection, which is then copied as it comes.

Armed, it acts on the next request that matches (api key, and ``predicate`` when given):

* ``hold``: the request is not forwarded until ``release`` (or ``max_hold_s``, after which it is
  forwarded and the hold marked ``expired``).  The connection's thread waits with it, so nothing
  after it on that connection is read or forwarded either, as TCP would keep it; its answer then
  flows back as usual.
* ``copy``: the request is forwarded as usual and a copy kept; ``replay`` sends that copy to the
  broker again on a new connection (a retry of the client's, or the network delivering a
  duplicate late) and returns the broker's answer.
* ``tap``: every matching request is recorded (the versions a client used, say).

The broker must advertise the proxy's address (``advertised.listeners``), or clients bypass it after
their first Metadata answer.  Every wait is bounded.
"""

from __future__ import annotations

import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from onceflow.chaos.proxy import TcpProxy

#: Kafka's ``socket.request.max.bytes`` (100 MiB): a larger size is not a request; stop parsing.
MAX_FRAME = 100 * 1024 * 1024
_CHUNK = 256 << 10
#: How long ``replay`` waits for the broker's answer, and a hold for ``release``, by default.
REPLAY_TIMEOUT_S = 30.0
MAX_HOLD_S = 60.0


@dataclass(frozen=True)
class Request:
    """One client request as it went through: its connection (numbered from 1 in accept order), the
    header's first fields, and the whole frame, size prefix included."""

    connection: int
    api_key: int
    api_version: int
    correlation_id: int
    frame: bytes

    def mentions(self, text: str) -> bool:
        """The frame holds ``text`` (UTF-8): a transactional id, a topic name."""
        return text.encode() in self.frame


Predicate = Callable[[Request], bool]


@dataclass(eq=False)
class _Arm:
    api_key: int
    predicate: Predicate | None
    matched: threading.Event = field(default_factory=threading.Event)
    request: Request | None = None

    def matches(self, request: Request) -> bool:
        return request.api_key == self.api_key and (self.predicate is None or self.predicate(request))

    def wait(self, timeout: float) -> Request:
        if not self.matched.wait(timeout):
            raise AssertionError(f"no request of api key {self.api_key} matched within {timeout}s")
        assert self.request is not None
        return self.request


@dataclass(eq=False)
class Hold(_Arm):
    """An armed hold; ``wait`` returns the held request once one matched."""

    max_hold_s: float = MAX_HOLD_S
    released: threading.Event = field(default_factory=threading.Event)
    expired: bool = False


@dataclass(eq=False)
class Copy(_Arm):
    """An armed copy; ``wait`` returns the copied request once one went through."""


class RequestProxy(TcpProxy):
    """Forward ``127.0.0.1:<port>`` to ``target``, request by request on the way in."""

    def __init__(self, target: tuple[str, int]) -> None:
        super().__init__(target)
        self._arms: list[_Arm] = []
        self._taps: list[tuple[Predicate, list[Request]]] = []
        self._holds: list[Hold] = []
        self._arms_lock = threading.Lock()

    @property
    def listener(self) -> str:
        """What the broker advertises so that clients stay on the proxy."""
        return f"PLAINTEXT://{self.address}"

    # -- arming -----------------------------------------------------------------------------------

    def hold(self, api_key: int, predicate: Predicate | None = None, max_hold_s: float = MAX_HOLD_S) -> Hold:
        """Hold the next matching request, and what follows it on its connection, until ``release``."""
        arm = Hold(api_key, predicate, max_hold_s=max_hold_s)
        with self._arms_lock:
            self._arms.append(arm)
        return arm

    def copy(self, api_key: int, predicate: Predicate | None = None) -> Copy:
        """Keep a copy of the next matching request (forwarded as usual)."""
        arm = Copy(api_key, predicate)
        with self._arms_lock:
            self._arms.append(arm)
        return arm

    def tap(self, predicate: Predicate) -> list[Request]:
        """Every request matching ``predicate`` from now on, appended as it goes through."""
        seen: list[Request] = []
        with self._arms_lock:
            self._taps.append((predicate, seen))
        return seen

    def release(self) -> int:
        """Forward every held request (and let their connections go on); how many there were."""
        with self._arms_lock:
            holds, self._holds = self._holds, []
        for hold in holds:
            hold.released.set()
        return len(holds)

    def disarm(self) -> None:
        """Forget every arm and tap, and release what is held."""
        with self._arms_lock:
            self._arms.clear()
            self._taps.clear()
        self.release()

    def close(self) -> None:
        self.disarm()
        super().close()

    # -- replaying --------------------------------------------------------------------------------

    def replay(self, request: Request, timeout: float = REPLAY_TIMEOUT_S) -> bytes:
        """Send ``request``'s frame to the broker on a new connection; the answer's frame (after its
        size: the response header, then the body)."""
        with socket.create_connection(self.target, timeout=timeout) as sock:
            sock.sendall(request.frame)
            (size,) = struct.unpack(">i", _read_exact(sock, 4))
            answer = _read_exact(sock, size)
        (correlation_id,) = struct.unpack_from(">i", answer, 0)
        assert correlation_id == request.correlation_id, (correlation_id, request.correlation_id)
        return answer

    # -- forwarding -------------------------------------------------------------------------------

    def _pump(self, src: socket.socket, dst: socket.socket, pair: tuple[socket.socket, socket.socket], number: int,
              from_client: bool) -> None:
        if not from_client:
            super()._pump(src, dst, pair, number, from_client)
            return
        buffer = bytearray()
        parsing = True
        try:
            while True:
                data = src.recv(_CHUNK)
                if not data:
                    break
                if not parsing:
                    dst.sendall(data)
                    continue
                buffer += data
                while len(buffer) >= 4:
                    (size,) = struct.unpack_from(">i", buffer, 0)
                    if not 8 <= size <= MAX_FRAME:  # not Kafka framing: copy the rest as it comes
                        parsing = False
                        dst.sendall(buffer)
                        buffer.clear()
                        break
                    if len(buffer) < 4 + size:
                        break
                    frame = bytes(buffer[:4 + size])
                    del buffer[:4 + size]
                    api_key, api_version, correlation_id = struct.unpack_from(">hhi", frame, 4)
                    self._forward(Request(number, api_key, api_version, correlation_id, frame), dst)
        except OSError:
            pass
        self._drop(pair, reset=False)

    def _forward(self, request: Request, dst: socket.socket) -> None:
        hold = self._match(request)
        if hold is not None:
            hold.expired = not hold.released.wait(hold.max_hold_s) and not self._closed.is_set()
        dst.sendall(request.frame)

    def _match(self, request: Request) -> Hold | None:
        """Record ``request`` where it is tapped or copied; the hold it triggers, if any."""
        with self._arms_lock:
            for predicate, seen in self._taps:
                if predicate(request):
                    seen.append(request)
            arm = next((a for a in self._arms if a.matches(request)), None)
            if arm is None:
                return None
            self._arms.remove(arm)
            arm.request = request
            if isinstance(arm, Hold):
                self._holds.append(arm)
        arm.matched.set()
        return arm if isinstance(arm, Hold) else None


def _read_exact(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        out += chunk
    return bytes(out)

