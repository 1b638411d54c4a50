"""``onceflow`` commands run in the test's own process (``onceflow.cli.main``): cheaper than a child
process where the process is not the point.  stdin is the bytes a test gives, stdout and stderr
are pytest's capture (``capsysbinary``)."""

from __future__ import annotations

import io
import json
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from onceflow import cli
from tests.support.broker import FAST_GROUPS, BrokerProcess

#: ``--timeout`` of every command run here.
TIMEOUT = "20"


class Run:
    """``run(*args)`` is ``onceflow ARGS --bootstrap-servers BOOTSTRAP``: stdout (bytes) and stderr,
    after asserting its exit status."""

    def __init__(self, capsys: pytest.CaptureFixture[bytes], monkeypatch: pytest.MonkeyPatch, bootstrap: str) -> None:
        self.capsys, self.monkeypatch, self.bootstrap = capsys, monkeypatch, bootstrap

    def __call__(self, *args: str, stdin: bytes = b"", status: int = 0) -> tuple[bytes, str]:
        self.monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
        try:
            code = cli.main([*args, "--bootstrap-servers", self.bootstrap, "--timeout", TIMEOUT])
        except SystemExit as exc:  # the parser's usage errors
            code = int(exc.code or 0)
        out, err = self.capsys.readouterr()
        assert code == status, f"onceflow {' '.join(args)}: exit {code}\nstdout: {out!r}\nstderr: {err.decode()}"
        return out, err.decode()

    def json(self, *args: str, stdin: bytes = b"") -> Any:
        return json.loads(self(*args, "--json", stdin=stdin)[0])

    def records(self, *args: str) -> list[dict[str, Any]]:
        """``topics consume ARGS --json``: one dict per record."""
        return [json.loads(line) for line in self("topics", "consume", *args, "--json")[0].splitlines()]

    def fails(self, *args: str, status: int = 1, stdin: bytes = b"") -> str:
        """The one line a failing command says (nothing on stdout, no traceback)."""
        out, err = self(*args, stdin=stdin, status=status)
        assert out == b"" and len(err.splitlines()) == 1 and "Traceback" not in err, err
        return err.strip()


def module_broker(tmp_path_factory: pytest.TempPathFactory, name: str) -> Iterator[str]:
    """The body of a module-scoped fixture: one broker process for the module's commands
    (``yield from module_broker(tmp_path_factory, "cli-admin")``), its bootstrap address."""
    proc = BrokerProcess(tmp_path_factory.mktemp(name) / "data", FAST_GROUPS).start()
    try:
        yield proc.bootstrap_servers
    finally:
        proc.stop()
