"""Consumer groups, classic and KIP-848: membership, rebalances and committed offsets.

* ``types``       what the broker exchanges with the coordinator (``GroupStore``,
                  ``StoredRecord``/``StoredMarker``, results);
* ``log_records`` the ``__consumer_offsets`` key/value layout (Kafka's bytes);
* ``metadata``    ``GroupMetadata``: a group's state machine, members and offsets;
* ``loader``      a ``__consumer_offsets`` partition read back into groups and
                  offsets (a pure function);
* ``context``     what the coordinator lends its managers;
* ``membership``  ``MembershipManager``: JoinGroup (``JoinRequest``), SyncGroup,
                  Heartbeat, LeaveGroup, rebalances and sessions;
* ``consumer_group``      a KIP-848 group: epochs, members, target and current
                          assignments, changed only by replaying its records;
                          reconciliation (Kafka's CurrentAssignmentBuilder);
* ``consumer_membership`` ``ConsumerMembershipManager``: ConsumerGroupHeartbeat,
                          leaving, sessions and rebalance timeouts;
* ``assignors``   the KIP-848 server-side assignors ``uniform`` and ``range``
                  (Kafka 4.3's, pure functions of the members and topics);
* ``offsets``     ``OffsetManager``: OffsetCommit, TxnOffsetCommit and transaction
                  completion, OffsetFetch, OffsetDelete, DeleteGroups, expiry;
* ``coordinator`` ``GroupCoordinator``: the facade the broker calls, with store
                  appends and timer dispatch on the coordinator runtime
                  (``coordinator/runtime.py``).
"""
