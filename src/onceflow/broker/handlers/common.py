"""Helpers shared by the request handlers."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from ...protocol import apis
from ...protocol.framing import Request
from ..appender import verification_error

__all__ = ["NO_THROTTLE", "Request", "build", "ms", "responses", "timestamp", "verification_error", "via_callback"]

#: throttle_time_ms = 0 (kio models durations as timedelta).
NO_THROTTLE = datetime.timedelta(0)

build = apis.build
T = TypeVar("T")


def responses(request: Request) -> ModuleType:
    """The kio module with the response entities for this request's API version."""
    return apis.response_module(request.api_key, request.api_version)


def ms(value: Any) -> int:
    """A kio duration (timedelta) or plain number as integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def timestamp(ms_since_epoch: int) -> Any:
    """A nullable kio timestamp field (``TZAware | None``): None for Kafka's -1 ("no timestamp").

    Not ``TZAware.parse``: kio's check wants ``microsecond == 0``, i.e. whole
    seconds, so it refused almost every broker time and the Produce answer
    to a LogAppendTime topic was never sent.  kio writes
    ``round(value.timestamp() * 1000)``, milliseconds and all.
    """
    if ms_since_epoch < 0:
        return None
    return datetime.datetime.fromtimestamp(ms_since_epoch / 1000, datetime.UTC)


def instant(ms_since_epoch: int) -> datetime.datetime:
    """A non-nullable kio datetime field; -1 ("none") is sent as -1, as Kafka does.

    kio writes ``round(value.timestamp() * 1000)``, so an aware datetime one
    millisecond before the epoch goes on the wire as -1.
    """
    return datetime.datetime.fromtimestamp(ms_since_epoch / 1000, datetime.UTC)


def via_callback(start: Callable[[Callable[[T], None]], None], respond: Callable[[T], Any]) -> Any:
    """Run a callback-style coordinator call; answer now if it finished, else later (a future
    the server waits on, resolved with the response in the callback: no task, no extra pass)."""
    answered: list[T] = []
    answer: asyncio.Future[Any] | None = None

    def done(result: T) -> None:
        if answer is None:
            if not answered:
                answered.append(result)
        elif not answer.done():
            try:
                answer.set_result(respond(result))
            except Exception as exc:  # noqa: BLE001 - a bug: handed to the server, which logs it and closes the connection
                answer.set_exception(exc)

    start(done)
    if answered:
        return respond(answered[0])
    answer = asyncio.get_running_loop().create_future()
    return answer
