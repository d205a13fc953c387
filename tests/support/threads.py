"""Running test actions in threads released at the same instant."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def race(count: int, action: Callable[[int], Any]) -> list[Any]:
    """Run ``action(n)`` in ``count`` threads released at once; their results."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count

    def run(n: int) -> None:
        barrier.wait()
        results[n] = action(n)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results
