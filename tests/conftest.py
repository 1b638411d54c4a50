"""Fixtures: the real broker as a child process, on free loopback ports.  What they are built
from, and what tests share besides fixtures, is in tests/support."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# The helpers in tests/support assert as test code does: rewrite their asserts like a test
# module's (this must happen before anything imports them).
pytest.register_assert_rewrite("tests.support")

from tests.support.broker import FAST_GROUPS, BrokerProcess  # noqa: E402


@pytest.fixture
def broker_process(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BrokerProcess]:
    """The broker process; indirect parametrization may add settings (e.g. ``SEGMENT_SHAPES``)."""
    proc = BrokerProcess(tmp_path / "data", {**FAST_GROUPS, **getattr(request, "param", {})})
    proc.start()
    try:
        yield proc
    finally:
        if proc.proc is not None:
            proc.proc.kill()
            proc.proc.wait()


@pytest.fixture
def make_broker_process(tmp_path: Path) -> Iterator[Callable[..., BrokerProcess]]:
    """``make_broker_process(**settings)`` starts another broker process with these settings."""
    made: list[BrokerProcess] = []

    def make(**overrides: str) -> BrokerProcess:
        proc = BrokerProcess(tmp_path / f"data{len(made)}", {**FAST_GROUPS, **overrides})
        made.append(proc)
        return proc.start()

    try:
        yield make
    finally:
        for proc in made:
            if proc.proc is not None:
                proc.proc.kill()
                proc.proc.wait()
