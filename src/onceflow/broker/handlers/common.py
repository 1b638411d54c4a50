"""Helpers shared by the request handlers."""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from ...protocol import apis
from ...protocol.errors import ErrorCode
from ...protocol.framing import Request

__all__ = ["NO_THROTTLE", "Request", "build", "ms", "responses", "timestamp", "verification_error"]

#: throttle_time_ms = 0 (kio models durations as timedelta).
NO_THROTTLE = datetime.timedelta(0)

build = apis.build


def responses(request: Request) -> ModuleType:
    """The kio module with the response entities for this request's API version."""
    return apis.response_module(request.api_key, request.api_version)


def ms(value: Any) -> int:
    """A kio duration (timedelta) or plain number as integer milliseconds."""
    if isinstance(value, datetime.timedelta):
        return round(value.total_seconds() * 1000)
    return int(value)


def timestamp(ms_since_epoch: int) -> Any:
    """A kio TZAware timestamp, or None for Kafka's -1 ("no timestamp")."""
    if ms_since_epoch < 0:
        return None
    from kio.static.primitive import TZAware

    return TZAware.parse(datetime.datetime.fromtimestamp(ms_since_epoch / 1000, datetime.UTC))


def instant(ms_since_epoch: int) -> datetime.datetime:
    """A non-nullable kio datetime field; -1 ("none") is sent as -1, as Kafka does.

    kio writes ``round(value.timestamp() * 1000)``, so an aware datetime one
    millisecond before the epoch goes on the wire as -1.
    """
    return datetime.datetime.fromtimestamp(ms_since_epoch / 1000, datetime.UTC)


def verification_error(error: ErrorCode, generic_error_supported: bool) -> ErrorCode:
    """A transaction-verification outcome (``TransactionCoordinator.partition_in_transaction``)
    as the request that asked for it answers it: Kafka's AddPartitionsToTxnManager.

    PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH ("producers expect it
    here"); TRANSACTION_ABORTABLE (KIP-890) reaches only clients that know
    it (Produce v11+, TxnOffsetCommit v4+) and is INVALID_TXN_STATE for the
    others.
    """
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.transaction_abortable and not generic_error_supported:
        return ErrorCode.invalid_txn_state
    return error
