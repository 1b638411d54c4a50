"""Request handlers, one module per API family, and the dispatch table.

Each handler is ``handler(broker, request, connection)`` and returns a kio
response entity, an awaitable of one, or None (no response: acks=0).  The
broker and the connection are seen through ``context.BrokerContext`` and
``context.Connection``: what handlers may use, listed in one place.
"""

from __future__ import annotations

from . import acls, admin, fetch, groups, metadata, produce, sasl, scram, txn
from .context import BrokerContext, Connection, Handler

__all__ = ["HANDLERS", "BrokerContext", "Connection", "Handler"]

HANDLERS: dict[int, Handler] = {}
for _module in (metadata, produce, fetch, admin, groups, txn, sasl, scram, acls):
    for _key, _handler in _module.HANDLERS.items():
        if _key in HANDLERS:
            raise RuntimeError(f"API key {_key} has two handlers")
        HANDLERS[_key] = _handler
