"""``onceflow chaos``: a workload that records a history, faults, and a checker.

Clients record what they asked of the broker and what it answered in a
history (``history``); a nemesis records the faults it injects in the same
history; afterwards ``checker.check`` reads the history alone and reports
every anomaly an exactly-once Kafka workload must not show, each with the
minimal excerpt of the history around it.
"""
