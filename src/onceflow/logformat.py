"""``--log-format json``: one JSON object per log line, for log shippers.

Each line has ``time`` (ISO 8601, UTC), ``level``, ``logger`` and ``message``,
plus the fields a component attached to the record (``extra=``): the
transaction coordinator adds ``transactional_id``, ``producer_id`` and
``producer_epoch`` to every change it logs at DEBUG, so one transaction's life
can be followed with ``jq 'select(.transactional_id == "...")'``.  An
exception's traceback goes in ``exception``.
"""

from __future__ import annotations

import datetime
import json
import logging

#: Attributes every LogRecord has: anything else on a record was attached by its caller.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                out[key] = value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)
