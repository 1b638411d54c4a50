"""Reference pipelines built on ``onceflow.spark``: ``payments`` is the one ``onceflow demo`` runs."""
