"""An error leaving a method Spark calls, formatted the way PySpark's workers format it for the JVM
(``pyspark.util.handle_worker_exception``): its own line first, the traceback below; what PySpark's
traceback switches do to that."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException

from onceflow.spark._errors import headline, surfaced
from onceflow.spark.options import OptionError

MESSAGE = "Unknown option 'subscrib' for the onceflow source; did you mean 'subscribe'?"
LINE = f"onceflow.spark.options.OptionError: {MESSAGE}"


def _worker_text(exc: BaseException, monkeypatch: pytest.MonkeyPatch, **env: str) -> str:
    """What a PySpark worker sends the JVM for ``exc`` (raised and caught here), with ``env`` set."""
    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.util import handle_worker_exception

    for name in ("SPARK_SIMPLIFIED_TRACEBACK", "SPARK_HIDE_TRACEBACK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    out = io.BytesIO()
    try:
        raise exc
    except BaseException as caught:  # noqa: BLE001 - as PySpark's worker_run catches it
        handle_worker_exception(caught, out)
    out.seek(0)
    read_int(out)
    text: str = UTF8Deserializer().loads(out)
    return text


@surfaced
def _parse() -> None:
    raise OptionError(MESSAGE, "subscrib")


def _raised(call: object) -> BaseException:
    with pytest.raises(Exception) as caught:
        call()  # type: ignore[operator]
    return caught.value


def test_a_surfaced_error_is_its_own_first_line_with_the_traceback_below(monkeypatch: pytest.MonkeyPatch) -> None:
    text = _worker_text(_raised(_parse), monkeypatch)
    lines = text.splitlines()
    assert lines[0] == LINE
    assert "Traceback (most recent call last):" in lines and lines[-1] == LINE
    assert "in _parse" in text, "the traceback is all there"


def test_pysparks_switches_decide_whether_the_chain_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    # spark.sql.execution.pyspark.udf.hideTraceback.enabled: the line alone.
    assert _worker_text(_raised(_parse), monkeypatch, SPARK_HIDE_TRACEBACK="1") == LINE + "\n"
    # ...simplifiedTraceback.enabled (Spark's default; the planner's workers, not the streaming source's, get it):
    # PySpark sets the error's __cause__ to None, which suppresses its whole chain, the headline with it.
    simplified = _worker_text(_raised(_parse), monkeypatch, SPARK_SIMPLIFIED_TRACEBACK="1").splitlines()
    assert simplified[0] == "Traceback (most recent call last):" and simplified[-1] == LINE


def test_the_chain_is_kept_and_the_headline_goes_before_all_of_it(monkeypatch: pytest.MonkeyPatch) -> None:
    @surfaced
    def retried() -> None:
        try:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "refused"))
        except KafkaException as exc:
            raise KafkaException(KafkaError(KafkaError._TRANSPORT, "h:1: still failing after 2 s")) from exc

    lines = _worker_text(_raised(retried), monkeypatch).splitlines()
    assert lines[0].startswith("cimpl.KafkaException: ") and "still failing after 2 s" in lines[0]
    assert "The above exception was the direct cause of the following exception:" in lines
    assert sum(line.startswith("cimpl.KafkaException") and 'str="refused"' in line for line in lines) == 1
    assert "still failing" in lines[-1]


def test_a_headline_is_added_once_and_changes_nothing_else() -> None:
    error = _raised(_parse)
    assert isinstance(error, OptionError) and error.option == "subscrib" and str(error) == MESSAGE
    head = error.__context__
    assert isinstance(head, OptionError) and head.__traceback__ is None and str(head) == MESSAGE
    assert headline(error) is error and error.__context__ is head and head.__context__ is None


def test_a_generator_method_is_surfaced_too() -> None:
    @surfaced
    def read() -> Iterator[int]:
        yield 1
        raise TimeoutError("no progress for 2 s")

    batches = read()
    assert next(batches) == 1
    error = _raised(lambda: next(batches))
    assert isinstance(error, TimeoutError) and isinstance(error.__context__, TimeoutError)
    assert error.__context__.__traceback__ is None
