"""The hand-written context every handler test here drives its handler through."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .context import InMemoryContext


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[InMemoryContext]:
    """A context with one topic, ``t``, of two partitions."""
    context = InMemoryContext(tmp_path)
    context.create_topic("t", 2, {})
    yield context
    context.close()
