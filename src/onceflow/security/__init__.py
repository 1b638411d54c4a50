"""Security: who a connection is, and what it may do.

A map of the package (Kafka's split, one module each):

* ``principal``: ``KafkaPrincipal`` (``User:alice``), and ``User:ANONYMOUS`` for a
  connection that did not authenticate.
* ``listeners``: the ``listeners`` / ``listener.security.protocol.map`` /
  ``advertised.listeners`` settings resolved into one ``Listener`` per port.
* ``tls``: a listener's ``ssl.SSLContext`` from Kafka's ``ssl.*`` PEM settings,
  and a client certificate's subject mapped to a principal
  (``ssl.principal.mapping.rules``).
* ``authenticator``: the per-connection SASL state machine of KIP-152
  (SaslHandshake, then SaslAuthenticate), with KIP-368 re-authentication.
* ``mechanisms``: the mechanisms served, their start-up checks, and
  ``create_server``; ``sasl``: the ``SaslServer`` interface every mechanism
  implements and its one failure, ``SaslAuthenticationFailed``.
* ``plain`` and ``scram``: the server side of the PLAIN and SCRAM-SHA-256/512
  mechanisms (sans-I/O), ``jaas``: PLAIN's users from a JAAS entry or file.
* ``credentials``: SCRAM credentials as Kafka stores them (salted, iterated;
  never the password), durable in the data directory (KIP-554).
* ``authorizer``: the ACL vocabulary (resource types, operations, patterns)
  and the ``Authorizer`` interface handlers ask; ``acls``: Kafka's
  StandardAuthorizer rules over a durable ACL store.
"""
