"""Waiting, in tests, for something another thread or process will do."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], within: float = 5.0,
             every: float = 0.02) -> bool:
    """Whether ``condition()`` became true within ``within`` seconds (asked every ``every``)."""
    deadline = time.monotonic() + within
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(every)
    return True
