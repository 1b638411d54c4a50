"""An error of the connector's, as Spark shows it: its own message on the first line, the traceback below.

Theory of operation
-------------------
PySpark's Python workers do not hand the JVM an exception, only the text
``traceback.TracebackException(...).format()`` makes of it
(``pyspark.util.handle_worker_exception``), and the JVM puts that text,
whole, after a sentence of its own: for ``load()``, ``[PYTHON_DATA_SOURCE_ERROR]
Failed to create Python data source instance: <text>``
(``QueryCompilationErrors.pythonDataSourceError``), and a streaming query
adds ``[STREAM_FAILED] Query [...] terminated with exception:`` in front of
that.  The text of an exception with a traceback starts with ``Traceback
(most recent call last):``; its message is its last line.  Nothing in the
JVM reads a PySpark error class out of the text, so raising a
``PySparkValueError`` instead would change neither ``getCondition()`` nor
the first line.

What Python formats before a traceback is the chain of exceptions before
it, the oldest first.  So ``headline`` puts, at the root of the error's
chain (as its ``__context__``), a copy of the error without a traceback:
formatted, that is one line, ``module.Type: message``, the very line the
traceback ends with, and the rest of the chain follows unchanged.

Where PySpark simplifies tracebacks
(``spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled``, on by
default, which the JVM passes to the planner's workers as
``SPARK_SIMPLIFIED_TRACEBACK``: ``load()``, a batch read's planning, a
write's start and commit), ``handle_worker_exception`` sets the error's
``__cause__`` to None, which also sets ``__suppress_context__``: no chain is
shown, the headline neither, and the text starts ``Traceback``.  The
streaming source's runner (``python_streaming_source_runner``) gets no such
setting, so its errors always start with their line.

``surfaced`` does this for every exception leaving a method Spark calls:
the adapters' methods (``datasource``, ``source``, ``writer``).  Code that
calls the connector from Python directly sees its exceptions unchanged
but for that context.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Generator
from typing import Any, TypeVar, cast

_F = TypeVar("_F", bound=Callable[..., Any])


def _next(exc: BaseException) -> BaseException | None:
    """The exception formatted before ``exc`` (its cause, or its context unless suppressed)."""
    if exc.__cause__ is not None:
        return exc.__cause__
    return None if exc.__suppress_context__ else exc.__context__


def headline(exc: BaseException) -> BaseException:
    """``exc``, its chain now starting with a copy of it that has no traceback (once: a second call
    changes nothing); returned for ``raise``.  An exception that cannot be copied is left as it is."""
    root, seen = exc, {id(exc)}
    while (earlier := _next(root)) is not None and id(earlier) not in seen:
        seen.add(id(earlier))
        root = earlier
    if root is not exc and root.__traceback__ is None and type(root) is type(exc) and str(root) == str(exc):
        return exc  # headed already
    try:
        head = copy.copy(exc)
    except Exception:  # noqa: BLE001 - an exception that cannot be copied goes as it came
        return exc
    head.__traceback__ = head.__context__ = head.__cause__ = None
    if str(head) != str(exc):
        return exc
    root.__context__ = head
    root.__suppress_context__ = False
    return exc


def surfaced(method: _F) -> _F:
    """``method`` (a generator function too), its exceptions going out with their ``headline``."""
    if inspect.isgeneratorfunction(method):
        @functools.wraps(method)
        def generator(*args: Any, **kwargs: Any) -> Generator[Any, Any, Any]:
            try:
                return (yield from method(*args, **kwargs))
            except Exception as exc:
                headline(exc)
                raise

        return cast(_F, generator)

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except Exception as exc:
            headline(exc)
            raise

    return cast(_F, wrapper)
