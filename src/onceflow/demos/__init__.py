"""``onceflow demo``: ``payments`` (the main job, an exactly-once Spark pipeline under faults) and
``broker-crash`` (a smaller example: a consumer group across a broker killed with SIGKILL)."""
