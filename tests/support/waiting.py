"""Waiting for a condition, bounded: the one polling loop the tests use."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 30.0, interval: float = 0.02,
             what: str | Callable[[], str] = "condition") -> T:
    """Poll ``condition`` until it returns something truthy, and return that; fail after ``timeout``
    seconds.  ``interval`` is the pause between calls (0 when the condition blocks by itself, a
    consumer's poll say); ``what`` names the condition in the failure, or makes its text then."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)
