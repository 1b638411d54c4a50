"""``EmbeddedBroker``: the real broker on a private event loop thread, for tests and notebooks.

    with EmbeddedBroker() as broker:
        producer = confluent_kafka.Producer({"bootstrap.servers": broker.bootstrap_servers})

It binds a free loopback port, keeps its data in a temporary directory
(removed on exit) unless ``data_dir`` is given, and accepts Kafka broker
settings as keyword overrides: ``EmbeddedBroker(**{"num.partitions": 3})``
or ``EmbeddedBroker(config={"num.partitions": 3})``.  ``scram_users={"alice":
"secret"}`` stores SCRAM credentials (both mechanisms) before it starts, so a
broker whose listeners all need SASL can be reached (docs/security.md).  A
setting neither Onceflow nor Kafka knows (``num.partitons``) is a
``UserWarning`` besides the broker's log line, so a notebook shows it; a bad
value is a ``ConfigError`` from the constructor.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
import warnings
from pathlib import Path
from typing import Any

from ..config import BrokerConfig
from .broker import Broker

START_TIMEOUT_S = 60


class EmbeddedBroker:
    def __init__(
        self,
        data_dir: str | Path | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        config: dict[str, Any] | None = None,
        scram_users: dict[str, str] | None = None,
        **overrides: Any,
    ) -> None:
        settings = dict(config or {})
        settings.update(overrides)
        self.config = BrokerConfig(settings)
        # Logged as WARNING by BrokerConfig; a notebook shows no log, so a typo is a warning too.
        for message in self.config.unknown.values():
            warnings.warn(message, UserWarning, stacklevel=2)
        self._own_dir = data_dir is None
        self.data_dir = Path(tempfile.mkdtemp(prefix="onceflow-")) if data_dir is None else Path(data_dir)
        #: SCRAM users stored before the start, for both mechanisms (``onceflow broker --add-scram``).
        self._scram_users = dict(scram_users or {})
        self._host = host
        self._port = port
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._broker: Broker | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._broker is None:
            raise RuntimeError("the broker is not running")
        return f"{self._broker.host}:{self._broker.port}"

    @property
    def listeners(self) -> dict[str, str]:
        """``host:port`` of each listener by name (``listeners``): ``{"SASL_SSL": "127.0.0.1:40123"}``."""
        return {listener.name: f"{listener.host or '127.0.0.1'}:{listener.port}" for listener in self.broker.listeners}

    @property
    def metrics_url(self) -> str:
        """``http://host:port/`` of the metrics and console (``metrics.port``; 0 picks a free one)."""
        metrics = self.broker.metrics
        if metrics is None:
            raise RuntimeError("metrics are off: start it with metrics.port set (0: any free port)")
        return f"http://{metrics.host}:{metrics.port}/"

    @property
    def broker(self) -> Broker:
        if self._broker is None:
            raise RuntimeError("the broker is not running")
        return self._broker

    def start(self) -> EmbeddedBroker:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(target=self._run, name="onceflow-embedded-broker", daemon=True)
        self._thread.start()
        if not self._ready.wait(START_TIMEOUT_S):
            self.stop()  # and its temporary data directory removed
            raise TimeoutError("the embedded broker did not start in time")
        if self._error is not None:
            self.stop()
            raise RuntimeError("the embedded broker failed to start") from self._error
        return self

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: BLE001 - surfaced to start(), which re-raises it
            self._error = exc
        finally:
            self._ready.set()
            loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        if self._scram_users:
            from ..security.credentials import add_users, upsertion
            from ..security.scram import MECHANISMS

            add_users(self.data_dir, [upsertion(mechanism, name, password) for mechanism in MECHANISMS
                                      for name, password in self._scram_users.items()])
        broker = Broker(self.config, self.data_dir, self._host, self._port)
        await broker.start()
        self._broker = broker
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await broker.stop()

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the broker's loop thread and return its result (for tests)."""
        assert self._loop is not None
        async def run() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(timeout=START_TIMEOUT_S)

    def stop(self) -> None:
        if self._thread is None:
            return
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(START_TIMEOUT_S)
        self._thread = None
        self._broker = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> EmbeddedBroker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
