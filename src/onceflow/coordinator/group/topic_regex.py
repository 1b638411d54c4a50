"""Regular-expression subscriptions of KIP-848 members, matched as Kafka matches them.

Kafka compiles a member's ``SubscribedTopicRegex`` with RE2J (Utils.
throwIfRegularExpressionIsInvalid, TopicRegexResolver): RE2's syntax, and a
match in time linear in the topic's name.  Python's ``re`` backtracks: a
pattern such as ``(.*.*)*x`` against a 25-character name runs for hours, on
the broker's only event-loop thread.  So the patterns are compiled with RE2
(``google-re2``), whose syntax is RE2J's, and matched whole (Java's
``Matcher.matches``).
"""

from __future__ import annotations

import functools
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # an invalid pattern is the member's error, answered to it


class InvalidRegex(ValueError):
    """Not a pattern RE2 accepts; the message is RE2's description."""


@functools.lru_cache(maxsize=256)
def _compile(regex: str) -> tuple[Any, str | None]:
    """(the compiled pattern, None) or (None, RE2's reason); refusals are cached too."""
    try:
        return re2.compile(regex, options=_OPTIONS), None
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid pattern"
        return None, reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)


def validate(regex: str) -> None:
    """Raises ``InvalidRegex`` if RE2 does not accept ``regex``."""
    _, reason = _compile(regex)
    if reason is not None:
        raise InvalidRegex(reason)


def matches(regex: str, topic: str) -> bool:
    """Whether ``regex`` matches all of ``topic``; an invalid pattern matches nothing."""
    pattern, _ = _compile(regex)
    return pattern is not None and pattern.fullmatch(topic) is not None
