"""Request handlers, one module per API family, and the dispatch table.

Each handler is ``handler(broker, request, connection)`` and returns a kio
response entity, an awaitable of one, or None (no response: acks=0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import admin, fetch, groups, metadata, produce, txn

HANDLERS: dict[int, Callable[..., Any]] = {}
for _module in (metadata, produce, fetch, admin, groups, txn):
    for _key, _handler in _module.HANDLERS.items():
        if _key in HANDLERS:
            raise RuntimeError(f"API key {_key} has two handlers")
        HANDLERS[_key] = _handler
