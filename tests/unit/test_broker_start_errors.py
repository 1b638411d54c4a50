"""``onceflow broker`` that cannot start says why in one ERROR line and exits 1; when the disk is
full (recovery after a crash rewrites indexes) the line says what to do."""

from __future__ import annotations

import errno
import logging
from pathlib import Path

import pytest

from onceflow import cli
from onceflow.broker import broker


def test_a_full_disk_at_start_says_to_free_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    async def no_space(self: broker.Broker) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(broker.Broker, "start", no_space)
    monkeypatch.setattr(cli, "_setup_logging", lambda level, log_format="text": None)  # leave the test run's logging as it is
    with caplog.at_level(logging.DEBUG, logger="onceflow"):
        code = cli.main(["--log-level", "DEBUG", "broker", "--data-dir", str(tmp_path / "data"), "--listen", "127.0.0.1:0"])
    assert code == 1
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert errors == [f"onceflow broker cannot run: [Errno 28] No space left on device; free space under "
                      f"{tmp_path / 'data'} and start it again"]
    assert any(r.exc_info for r in caplog.records if r.levelno == logging.DEBUG), "the traceback, at DEBUG"
