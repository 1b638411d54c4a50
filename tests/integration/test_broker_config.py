"""``onceflow broker`` and its settings, as an operator meets them: a garbage ``--config`` file is
refused in one line before anything starts; a misspelt setting starts the broker with a warning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.broker import BrokerProcess


def test_a_config_file_with_nul_bytes_is_refused_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "server.properties"
    config.write_bytes(b"num.partitions=3\n\x00\x00\x00\x01garbage")
    data_dir = tmp_path / "data"
    proc = subprocess.run([sys.executable, "-m", "onceflow", "broker", "--config", str(config), "--data-dir", str(data_dir),
                           "--listen", "127.0.0.1:0"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert proc.stdout == ""
    assert proc.stderr.splitlines() == [f"onceflow broker: not a .properties file: {config} contains NUL bytes "
                                        "(the first at byte 17), so it is binary, not text"], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not data_dir.exists(), "refused before anything was written"


def test_a_misspelt_setting_starts_the_broker_with_a_warning(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", {"num.partitons": "3", "num.network.threads": "8"}) as broker:
        log = broker.log()
    warnings = [line for line in log.splitlines() if " WARNING " in line]
    assert [line.partition(" WARNING ")[2] for line in warnings] == [
        "onceflow.config: The configuration 'num.partitons' was supplied but isn't a known config (did you mean num.partitions?)",
    ], log
    assert "INFO onceflow.config: ignoring configuration num.network.threads: Onceflow does not use it" in log
