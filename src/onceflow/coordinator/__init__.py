"""Coordinators: consumer groups (``group``) and transactions (``transaction``), sans-I/O.

The internal topics they keep their state in have their one home here.
"""

#: The group coordinator's topic: committed offsets and group metadata.
OFFSETS_TOPIC = "__consumer_offsets"
#: The transaction coordinator's topic: every transactional id's state.
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
