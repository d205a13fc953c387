"""A value that costs a read of the database, read by one thread at a time and
kept for some seconds: what every costly family of a scrape is made of.

Ten scrapers, or ten scrapes at once, cost one read: the first scrape to find
the kept value stale reads it again; scrapes that come meanwhile answer the
value kept (only the first scrapes of a worker, when nothing is kept yet, wait
for the read). So scrapes never hold more than one thread and one connection
for a read, and need no slot of their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class KeptRead(Generic[T]):
    """``read()`` returns (value, keep); a value not to keep (a failed read)
    goes to its caller only, and the next call reads again. ``max_age()`` is
    asked each time (the module constants that give it can be changed)."""

    def __init__(self, read: Callable[[], tuple[T, bool]], max_age: Callable[[], float],
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._read = read
        self.max_age = max_age
        self.clock = clock
        self._reading = threading.Lock()
        self._kept: tuple[T, float] | None = None  # value, read at
        self.reads = 0

    def get(self) -> tuple[T, float]:
        """(the value, when it was read by ``clock``)."""
        kept = self._kept
        if (kept is None or self._stale(kept)) \
                and self._reading.acquire(blocking=kept is None):
            try:
                latest = self._kept  # another thread may have read meanwhile
                if latest is not None and not self._stale(latest):
                    return latest
                read_at = self.clock()
                value, keep = self._read()
                self.reads += 1
                self._kept = (value, read_at) if keep else None
                return value, read_at
            finally:
                self._reading.release()
        assert kept is not None
        return kept

    def _stale(self, kept: tuple[T, float]) -> bool:
        return self.clock() - kept[1] >= self.max_age()
