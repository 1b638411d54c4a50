"""Onceflow: exactly-once streaming for Python.

A Kafka-wire-compatible broker (``onceflow broker``), an embedded form of it
for tests and notebooks (``EmbeddedBroker``), and the tools around them.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

__all__ = ["EmbeddedBroker", "__version__"]


def __getattr__(name: str) -> Any:  # lazy: importing onceflow does not start asyncio machinery
    if name == "EmbeddedBroker":
        from .broker.embedded import EmbeddedBroker

        return EmbeddedBroker
    raise AttributeError(name)
