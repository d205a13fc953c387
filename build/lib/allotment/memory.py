"""Giving the memory a large answer used back to the system.

CPython frees a large answer's objects when the request ends, but glibc keeps
the freed pages in its heap, so without this a worker would stay as large as
its largest answer made it (hundreds of MiB after one big candidates answer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable

# The answer (and a refusal's traceback) is still alive while its request
# ends: trim a moment later. A trim costs a few milliseconds on a large heap.
TRIM_DELAY = 0.5

_malloc_trim: Callable[[int], int] | None = None
_looked_up = False
_pending = threading.Lock()


def release_freed_soon() -> None:
    """Trim the heap shortly, in a thread of its own (ctypes lets go of the
    interpreter lock meanwhile); one trim at a time."""
    if _pending.acquire(blocking=False):
        timer = threading.Timer(TRIM_DELAY, _trim)
        timer.daemon = True
        timer.start()


def _trim() -> None:
    global _malloc_trim, _looked_up
    try:
        if not _looked_up:
            _looked_up = True
            name = ctypes.util.find_library("c")
            try:
                _malloc_trim = ctypes.CDLL(name).malloc_trim if name else None
            except (OSError, AttributeError):  # not glibc
                _malloc_trim = None
        if _malloc_trim is not None:
            _malloc_trim(0)
    finally:
        _pending.release()
