"""What the long-running commands share: ``onceflow bench``, ``onceflow chaos`` and ``onceflow demo``.

Theory of operation
-------------------
Each run of one of them is a ``Session`` (``Session.run(body)``), which gives it, as a user meets it:

* **One line per failure** (issue 24): ``onceflow bench produce: MESSAGE`` on stderr and exit
  status 1; a ``UsageError`` (options that cannot go together) exit status 2; Ctrl-C the one line
  ``interrupted`` and exit status 130.  Never a traceback: ``--log-level DEBUG`` logs it.
* **A pre-flight** (``reach``: ``clienterrors.preflight``, which the tools run too) before anything
  is created on a cluster named by ``--bootstrap-servers``: a TCP connection (a refused or unknown
  address is named at once), then one metadata request through confluent-kafka answered within
  ``--timeout``.  An address that takes the connection and never answers is thus one line naming
  it, within the timeout, not a minute of the client's own retries.
* **The clients' logs kept** (``clienterrors.ClientLog``): ``client`` is the user's settings (``-X``,
  ``--command-config``) with the log's ``logger`` and ``error_cb`` merged in, so every librdkafka
  client the command makes, in the modules it calls too (``pipelines.payments``), reports there
  instead of printing.  The first connection error explains a failure; what was hidden is one
  line at the end; ``--log-level DEBUG`` lets every line through as it comes.
* **Cleanup**: the topics (and consumer groups) the command created on a cluster it was given are
  deleted when it ends, whichever way it ends (success, failure, Ctrl-C), unless ``--keep``; then
  one line says what was kept.  Only what it created: a ``--topic`` that already existed stays.
* **Progress** (``status``, a ``progressline.ProgressLine``): one line on stderr, rewritten in place (``\\r``) at most five times a
  second, only when stderr is a terminal.  Piped, nothing extra is written, so the outputs that
  scripts and tests parse stay as they were.  ``say`` prints a line of its own above it.

Ctrl-C: the SIGINT handler marks the session interrupted, then raises ``KeyboardInterrupt`` as
Python's own does.  confluent-kafka loses an exception raised inside a librdkafka callback that
runs during ``flush`` or ``consume`` (the log callback, here): the call runs on to its timeout and
fails with ``SystemError`` ("returned NULL without setting an exception"); after a SIGINT that too
is an interruption.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import shutil
import signal
import sys
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any, TextIO, cast

from .clientconfig import NO_SETTINGS, ClientSettings
from .clienterrors import ClientLog, error_line, preflight
from .progressline import ProgressLine
from .tools.common import UsageError, stdout_gone

log = logging.getLogger("onceflow")

#: ``--timeout``'s default: how long the cluster may take to answer the pre-flight, a topic's creation or deletion.
DEFAULT_TIMEOUT_S = 30.0
#: Exit status after Ctrl-C (128 + SIGINT), as a shell reports it.
INTERRUPTED = 130

__all__ = ["DEFAULT_TIMEOUT_S", "Session", "UsageError", "add_options"]


def add_options(parser: argparse.ArgumentParser, keep_help: str) -> None:
    """``--timeout`` and ``--keep`` (``keep_help`` says what is kept)."""
    from .cliargs import timeout_seconds

    parser.add_argument("--timeout", type=timeout_seconds, default=DEFAULT_TIMEOUT_S, metavar="SECONDS",
                        help=f"how long a cluster named by --bootstrap-servers may take to answer at the start, and to "
                             f"create or delete a topic (default {DEFAULT_TIMEOUT_S:g}; 500ms, 10s, 1m also work; at most 1h)")
    parser.add_argument("--keep", action="store_true", help=keep_help)


class Session:
    """One run of a long command: its one-line failures, clients' logs, cleanup and progress."""

    def __init__(self, name: str, args: argparse.Namespace, client: ClientSettings = NO_SETTINGS,
                 stream: TextIO | None = None) -> None:
        #: ``onceflow bench produce``: the prefix of every line the command prints on stderr.
        self.name = name
        self.debug = str(getattr(args, "log_level", "INFO")).upper() == "DEBUG"
        self.timeout = float(getattr(args, "timeout", DEFAULT_TIMEOUT_S))
        self.keep = bool(getattr(args, "keep", False))
        self.log = ClientLog(self.debug)
        #: The user's client settings with the log's callbacks in: give it to every client made.
        self.client = with_callbacks(client, self.log.settings())
        self.interrupted = False
        self._stream = stream or sys.stderr
        self._progress = ProgressLine(self._stream)
        #: (bootstrap, topics, groups) the command created, to delete at the end.
        self._made: list[tuple[str, list[str], list[str]]] = []
        #: What to run at the end after the cleanup, whichever way the command ends.
        self._finally: list[Callable[[], None]] = []

    # -- running -------------------------------------------------------------------

    def run(self, body: Callable[[Session], int]) -> int:
        """``body(self)``'s exit status; a failure, a usage error or Ctrl-C as one line."""
        previous = self._handle_sigint()
        status, line = 0, None
        try:
            status = body(self)
        except KeyboardInterrupt:
            status, line = INTERRUPTED, "interrupted"
        except UsageError as exc:
            status, line = 2, error_line(exc)
        except Exception as exc:  # every failure is one line; the traceback only with --log-level DEBUG
            if isinstance(exc, BrokenPipeError) and stdout_gone():
                raise  # its output piped into ``| head``: onceflow.cli ends it quietly (141), after the cleanup
            if self.interrupted:
                status, line = INTERRUPTED, "interrupted"
            else:
                if self.debug:
                    log.exception("%s failed", self.name)
                status, line = 1, self.log.explain(error_line(exc))
        finally:
            self.clear()
            left = self._cleanup()
            for action in reversed(self._finally):
                action()
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        if self.interrupted and line is None:  # Ctrl-C during the cleanup of a run that went well
            status, line = INTERRUPTED, "interrupted"
        hidden = self.log.summary()
        if line is not None or left:
            said = "; ".join(x for x in (line, f"could not delete {left}" if left else None) if x)
            self.error(said + (f" {hidden}" if hidden else ""))
        elif hidden:
            print(hidden, file=self._stream, flush=True)
        return status

    def _handle_sigint(self) -> Any:
        def interrupt(_signum: int, _frame: FrameType | None) -> None:
            if self.interrupted:
                return  # once is enough: the brokers, clients and topics are being put away (each wait bounded)
            self.interrupted = True
            raise KeyboardInterrupt

        try:
            return signal.signal(signal.SIGINT, interrupt)
        except ValueError:  # not the main thread: Ctrl-C is not ours to handle
            return None

    def error(self, message: str) -> None:
        """``onceflow FAMILY COMMAND: message`` on stderr."""
        self.clear()
        print(f"{self.name}: {' '.join(message.split())}", file=self._stream, flush=True)

    def at_end(self, action: Callable[[], None]) -> None:
        """Run ``action`` when the session ends (after the topics are deleted), whichever way."""
        self._finally.append(action)

    def remove_at_end(self, path: Any, keep: bool) -> None:
        """Remove the directory ``path`` when the session ends, unless ``keep``."""
        if not keep:
            self.at_end(lambda: shutil.rmtree(path, ignore_errors=True))

    # -- the cluster ---------------------------------------------------------------

    def reach(self, bootstrap: str) -> None:
        """The pre-flight (``clienterrors.preflight``) with this command's settings and timeout."""
        preflight(bootstrap, self.timeout, self.client.librdkafka(bootstrap), self.log)

    def made(self, bootstrap: str, topics: Sequence[str] = (), groups: Sequence[str] = ()) -> None:
        """``topics`` and ``groups`` were created on ``bootstrap`` by this command: delete them at the end."""
        self._made.append((bootstrap, list(topics), list(groups)))

    def _cleanup(self) -> str:
        """Delete what ``made`` recorded (or say it is kept); what could not be deleted, as words."""
        made, self._made = self._made, []
        if not made:
            return ""
        if self.keep:
            for bootstrap, topics, groups in made:
                what = _things(topics, groups)
                if what:
                    print(f"{self.name}: kept {what} on {bootstrap}", file=self._stream, flush=True)
            return ""
        left = []
        for bootstrap, topics, groups in made:
            try:
                left += self._delete(bootstrap, topics, groups)
            except KeyboardInterrupt:
                self.interrupted = True
                left.append(_things(topics, groups))
        return ", ".join(x for x in left if x)

    def _delete(self, bootstrap: str, topics: list[str], groups: list[str]) -> list[str]:
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(self.client.librdkafka(bootstrap))
        left = []
        if topics:
            futures = admin.delete_topics(list(topics), operation_timeout=self.timeout, request_timeout=self.timeout)
            left += [f"topic {name}" for name, future in futures.items()
                     if not self._done(future, KafkaError.UNKNOWN_TOPIC_OR_PART)]
        if groups:  # after the topics, whose deletion takes the group's offsets for them
            futures = admin.delete_consumer_groups(list(groups), request_timeout=self.timeout)
            left += [f"group {name}" for name, future in futures.items()
                     if not self._done(future, KafkaError.GROUP_ID_NOT_FOUND)]
        return left

    def _done(self, future: Any, gone: int) -> bool:
        """The admin request succeeded, or found the thing already gone (error code ``gone``)."""
        from confluent_kafka import KafkaException

        try:
            future.result(self.timeout + 5)
        except KafkaException as exc:
            return bool(exc.args) and exc.args[0].code() == gone
        except Exception:  # noqa: BLE001 - no answer in time: it stays, and is named
            return False
        return True

    # -- what the user sees meanwhile ----------------------------------------------------

    def status(self, text: str) -> None:
        """The progress line (``progressline``: terminals only, rewritten in place)."""
        self._progress.show(text)

    def clear(self) -> None:
        """Take the progress line away (before a line of output)."""
        self._progress.clear()

    def say(self, text: str) -> None:
        """A line on stderr (piped too), above the progress line."""
        self.clear()
        print(text, file=self._stream, flush=True)


def with_callbacks(client: ClientSettings, callbacks: dict[str, Any]) -> ClientSettings:
    """``client`` with librdkafka callbacks (``logger``, ``error_cb``) under its ``config``, so that
    ``client.librdkafka(...)`` puts them into every configuration made from it."""
    config = cast(dict[str, str], {**callbacks, **client.config})
    return dataclasses.replace(client, config=config)


def _things(topics: list[str], groups: list[str]) -> str:
    parts = []
    if topics:
        parts.append(("topic " if len(topics) == 1 else "topics ") + ", ".join(topics))
    if groups:
        parts.append(("group " if len(groups) == 1 else "groups ") + ", ".join(groups))
    return " and ".join(parts)
