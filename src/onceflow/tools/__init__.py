"""Operator tools: ``onceflow topics``, ``groups``, ``txn``, ``acls``, ``users`` and ``cluster``.

Rule: no home-made Kafka client.  These tools must work unchanged against an
Apache Kafka cluster, so they talk to brokers only through real Kafka client
libraries and standard Kafka APIs:

* topics, groups, ACLs, SCRAM users and the cluster go through confluent-kafka
  (librdkafka): its ``AdminClient`` for metadata, configs, topic creation/deletion,
  partitions, offsets (ListOffsets), record deletion (DeleteRecords), consumer
  groups and their offsets, ACLs (CreateAcls, DescribeAcls, DeleteAcls), SCRAM
  credentials (Describe/AlterUserScramCredentials) and DescribeCluster; a
  ``Consumer`` (never subscribed) for partition watermarks; and a ``Producer`` and a
  ``Consumer`` for ``topics produce`` and ``topics consume`` (:mod:`.records`);
* transactions go through kafka-python's ``KafkaAdminClient``, because
  confluent-kafka has no KIP-664 APIs: ``list_transactions``
  (ListTransactions), ``describe_transactions`` (DescribeTransactions),
  ``describe_producers`` (DescribeProducers) and ``abort_transaction``
  (WriteTxnMarkers to the partition leader).  ``find-hanging`` is KIP-664's
  algorithm built on those calls (kafka-python's own
  ``find_hanging_transactions`` only looks at the coordinators' view, so it
  cannot see a transaction the coordinator never heard of); ``cluster info`` asks it
  for each broker's API versions (ApiVersions), which librdkafka does not expose.

Every command is a small function that returns plain data (a list of dicts, or
a dict of scalars and such lists) and is rendered separately, as an aligned
table or as JSON (``--json``); see :mod:`onceflow.tools.common`.  Only
``topics produce`` and ``topics consume`` write their own output (records on
stdout, a line on stderr).

Every command takes ``-X key=value`` and ``--command-config FILE`` for a
secured cluster (:mod:`onceflow.clientconfig`), and gives them to every
client it makes.
"""

from __future__ import annotations

from . import acls, cluster, groups, records, topics, txn, users

__all__ = ["acls", "cluster", "groups", "records", "topics", "txn", "users"]
