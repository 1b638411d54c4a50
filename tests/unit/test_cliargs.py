"""Values checked where they are typed (onceflow.cliargs), and usage errors as one line naming the
command that was given them; no cluster is needed: the parser refuses before anything connects."""

from __future__ import annotations

import argparse
import datetime

import pytest

from onceflow import cli, cliargs


@pytest.mark.parametrize(("kind", "text"), [
    (cliargs.timeout_seconds, "0"), (cliargs.timeout_seconds, "2h"), (cliargs.timeout_seconds, "1e-9"),
    (cliargs.timeout_seconds, "nan"), (cliargs.positive_seconds, "-1"), (cliargs.positive_seconds, "400d"),
    (cliargs.positive_seconds, "1e309"), (cliargs.positive_seconds, "5 m"), (cliargs.non_negative_seconds, "-0.5"),
    (cliargs.positive_int, "0"), (cliargs.positive_int, "99999999999999999999"), (cliargs.non_negative_int, "-1"),
    (cliargs.partition_count, "100001"), (cliargs.partition_count, "0"),
    (cliargs.topic_name, ""), (cliargs.topic_name, ".."), (cliargs.topic_name, "a b"), (cliargs.topic_name, "t\udcff"),
    (cliargs.topic_name, "x" * 250), (cliargs.name, ""), (cliargs.name, "g\udcff"), (cliargs.text_value, "\udcff"),
    (cliargs.timestamp_ms, "1969-12-31T23:59:59.999Z"), (cliargs.timestamp_ms, "-1"), (cliargs.timestamp_ms, "0001-01-01"),
    (cliargs.timestamp_ms, "99999999999999999999"), (cliargs.timestamp_ms, "yesterday"),
    (cliargs.port, "65536"), (cliargs.host_port, "127.0.0.1:99999"), (cliargs.bootstrap_servers, "a:1,b"),
    (cliargs.log_level, "bogus"),
])
def test_bad_values_are_refused_by_the_parser(kind: object, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        kind(text)  # type: ignore[operator]


def test_good_values_mean_what_they_say() -> None:
    assert cliargs.positive_seconds("1h30m") == 5400
    assert cliargs.timeout_seconds("500ms") == 0.5
    assert cliargs.timeout_seconds("1h") == 3600
    assert cliargs.integer("-5") == -5
    assert cliargs.partition_count("100_000") == 100_000
    assert cliargs.topic_name("orders.v2_x-y") == "orders.v2_x-y"
    assert cliargs.timestamp_ms("2026-11-27T15:30:00Z") == 1_795_793_400_000
    assert cliargs.timestamp_ms("1795793400000") == 1_795_793_400_000
    local = datetime.datetime(2026, 11, 27, 15, 30).astimezone()  # no zone: the local one, as Kafka's tool
    assert cliargs.timestamp_ms("2026-11-27T15:30:00") == int(local.timestamp() * 1000)
    assert cliargs.log_level("warn") == "WARNING"
    assert cliargs.host_port(":9092") == ("127.0.0.1", 9092)


@pytest.mark.parametrize(("argv", "prefix"), [
    (["topics", "list", "--bogus"], "onceflow topics list: unrecognized arguments: --bogus"),
    (["topics", "list", "extra"], "onceflow topics list: unrecognized arguments: extra"),
    (["--nope", "groups", "list"], "onceflow groups list: unrecognized arguments: --nope"),
    (["broker", "--nope"], "onceflow broker: unrecognized arguments: --nope"),
    (["topics", "list", "--timeout", "-1"], "onceflow topics list: argument --timeout: expected a timeout from 1ms to 1h"),
    (["broker", "--listen", "127.0.0.1:99999"], "onceflow broker: argument --listen: expected HOST:PORT"),
    (["--log-level", "bogus", "topics", "list"], "onceflow: argument --log-level: expected one of"),
    (["txn", "list", "--state", "bogus"], "onceflow txn list: argument --state: unknown transaction state 'bogus'"),
])
def test_a_usage_error_is_one_line_naming_the_command(argv: list[str], prefix: str,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(argv)
    out, err = capsys.readouterr()
    assert (exited.value.code, out) == (2, "")
    assert len(err.splitlines()) == 1 and err.startswith(prefix), err
