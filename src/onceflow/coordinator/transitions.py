"""The one check both coordinators' state machines make before a state changes.

Each machine keeps its legal moves as data: a table from each state to the
states it may be entered from (Kafka's ``validPreviousStates``).  Every
state change of a group (``GroupMetadata.transition_to``) and of a
transactional id (``TransactionMetadata``'s prepare/complete steps) goes
through ``check_transition``, which raises the machine's own
``IllegalTransition`` for a move its table forbids: that is a coordinator
bug, never a client's doing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Set
from typing import TypeVar

S = TypeVar("S")


class IllegalTransition(RuntimeError):
    """A state change a state machine's table forbids: a coordinator bug."""


def check_transition(table: Mapping[S, Set[S]], current: S, target: S,
                     illegal: Callable[[S, S], IllegalTransition]) -> None:
    """Raise ``illegal(current, target)`` unless ``table`` lets ``target`` be entered from ``current``."""
    if current not in table[target]:
        raise illegal(current, target)
