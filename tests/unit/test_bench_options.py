"""``onceflow bench`` options that take counts: ``txn-rate`` runs every shape it is given, and a
bad count is refused, naming the option, before any broker starts."""

from __future__ import annotations

import pytest

from onceflow.bench import _one
from onceflow.cli import build_parser


def parse(*args: str):  # type: ignore[no-untyped-def]
    return build_parser().parse_args(["bench", *args])


def test_txn_rate_takes_lists_of_shapes() -> None:
    args = parse("txn-rate", "--records-per-txn", "1,10,100", "--producers", "4")
    assert args.records_per_txn == [1, 10, 100] and args.producers == [4]
    assert parse("txn-rate").records_per_txn is None, "every default shape"


@pytest.mark.parametrize("bad", ["0", "ten", "1,,-2", ""])
def test_a_bad_count_names_the_option(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("txn-rate", "--producers", bad)
    assert "--producers" in capsys.readouterr().err


def test_a_list_where_one_count_is_meant_is_refused() -> None:
    assert _one([25], 10, "--records-per-txn") == 25 and _one(None, 10, "--records-per-txn") == 10
    with pytest.raises(SystemExit, match="--records-per-txn takes one number"):
        _one([1, 10], 10, "--records-per-txn")
