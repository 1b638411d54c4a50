"""Kafka outcomes as values, protocol failures as exceptions.

Theory of operation: everything a client can be told (``NOT_COORDINATOR``,
``OFFSET_OUT_OF_RANGE``...) is an ``ErrorCode`` value, kio's IntEnum of
Kafka's error codes, returned by the log and the coordinators and copied into
the response by the handler.  Exceptions are kept for two things only:

* ``ProtocolError``: the bytes on a connection cannot be understood (a frame
  too large, a garbled header, an API key or version the broker does not
  serve).  The server logs one line and closes that connection, as Kafka's
  SocketServer does; nothing stored is touched.
* ``AssertionError``/``RuntimeError`` for broken invariants: bugs, loud.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

__all__ = ["ErrorCode", "FrameTooLarge", "InvalidRequest", "ProtocolError", "UnsupportedApi"]


class ProtocolError(Exception):
    """The peer sent something the broker cannot parse; its connection is closed."""


class FrameTooLarge(ProtocolError):
    """A size prefix beyond ``socket.request.max.bytes`` (or negative)."""


class InvalidRequest(ProtocolError):
    """A frame whose header or body does not decode (Kafka's InvalidRequestException)."""


class UnsupportedApi(ProtocolError):
    """An API key or version this broker does not serve (other than ApiVersions, see KIP-511)."""

    def __init__(self, api_key: int, api_version: int, correlation_id: int) -> None:
        super().__init__(f"unsupported API key {api_key} version {api_version}")
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
