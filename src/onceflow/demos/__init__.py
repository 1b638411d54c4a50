"""``onceflow demo``: ``payments`` (the main job, an exactly-once Spark pipeline under faults) and
``broker-crash`` (a smaller example: a consumer group across a broker killed with SIGKILL)."""

from __future__ import annotations

import argparse

from ..longcommand import UsageError


def checked_bootstrap(text: str) -> str:
    """``--bootstrap-servers`` checked as the parser of the other families checks it
    (``cliargs.bootstrap_servers``): the demo's option is defined by ``onceflow.cli``."""
    from ..cliargs import bootstrap_servers

    try:
        return bootstrap_servers(text)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"argument --bootstrap-servers: {exc}") from None
