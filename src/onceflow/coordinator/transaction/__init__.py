"""The transaction coordinator: KIP-98 transactions over ``__transaction_state``.

* ``types``         the protocols the broker implements (``TxnLogStore``,
                    ``ProducerIdAllocator``, ``MarkerWriter``) and result types;
* ``metadata``      ``TransactionState``, its transition table and the
                    prepare -> persist -> complete protocol of one transactional id;
* ``log_records``   the ``__transaction_state`` key/value layout (Kafka's bytes);
* ``state_manager`` the metadata cache, log appends, loading, expiration;
* ``coordinator``   ``TransactionCoordinator``, the decisions: InitProducerId,
                    AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, KIP-664, KIP-890
                    part 1 verification;
* ``markers``       ``TransactionMarkerChannelManager``: a decided transaction's
                    markers, their retries, then its Complete record;
* ``timeouts``      ``TransactionTimeouts``: aborting timed-out transactions and
                    expiring idle transactional ids.
"""
