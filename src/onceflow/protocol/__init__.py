"""Kafka's wire protocol without I/O: frames, headers, the API table, error codes."""
