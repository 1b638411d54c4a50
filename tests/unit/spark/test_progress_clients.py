"""The progress store's client cache: bounded, least recently used first out, nothing closed under
a thread that still holds it."""

from __future__ import annotations

import gc
import weakref
from collections import OrderedDict
from typing import Any

from onceflow.spark import progress


class Client:
    """Stands for a librdkafka client: all the cache does with one is keep or drop it."""


def test_clients_of_clusters_beyond_the_bound_are_dropped_least_recently_used_first() -> None:
    cache: OrderedDict[Any, Any] = OrderedDict()
    first = progress._kept(cache, "a", Client)
    gone = weakref.ref(progress._kept(cache, "b", Client))
    for key in ("c", "d"):
        progress._kept(cache, key, Client)
    assert progress._kept(cache, "a", Client) is first, "a hit is not made again"
    progress._kept(cache, "e", Client)  # evicts "b", the least recently used
    gc.collect()
    assert list(cache) == ["c", "d", "a", "e"] and len(cache) == progress.CLIENTS_KEPT
    assert gone() is None, "nothing else held it, so it was released"
    held = progress._kept(cache, "f", Client)
    for key in ("g", "h", "i", "j"):
        progress._kept(cache, key, Client)
    assert "f" not in cache and isinstance(held, Client), "a holder keeps its client after eviction"
