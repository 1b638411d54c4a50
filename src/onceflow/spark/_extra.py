"""What the connector needs beyond a base install, said in one line when it is missing.

``onceflow.spark``'s modules that run PySpark or build Arrow batches import this first, so that
``pip install onceflow`` without the ``spark`` extra ends in "pip install 'onceflow[spark]'", not
in a bare ``ModuleNotFoundError`` from deep inside.  The package itself (``onceflow.spark``) and
its light modules (options, ranges, protocol, faults, the worker launcher) import without it.
"""

from __future__ import annotations

from . import missing_modules

if missing := missing_modules():
    raise ModuleNotFoundError(f"onceflow.spark needs {', '.join(missing)}, which the spark extra installs: "
                              "pip install 'onceflow[spark]'", name=missing[0])
