"""Giving the memory a large answer used back to the system.

CPython frees a large answer's objects when the request ends, but glibc keeps
the freed pages in its heap, so without this a worker would stay as large as
its largest answer made it (hundreds of MiB after one big candidates answer).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections.abc import Callable

# The answer (and a refusal's traceback) is still alive while its request
# ends: trim a moment later. A trim costs a few milliseconds on a large heap.
TRIM_DELAY = 0.5

# A trim function: malloc_trim's signature (padding to keep in, 1 if any memory
# was given back).
Trim = Callable[[int], int]


def _find_malloc_trim() -> Trim | None:
    """glibc's ``malloc_trim``, or None where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):  # not glibc
        return None


def resident_bytes() -> int | None:
    """The process's resident memory now (Linux's /proc), or None where unknown."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


class Trimmer:
    """Trims the heap ``delay`` seconds after it is asked to, one trim at a time.

    ``trim`` is the function that gives the memory back (default: glibc's
    ``malloc_trim``, looked up on the first trim; nothing where there is none).
    """

    def __init__(self, trim: Trim | None = None, delay: float = TRIM_DELAY) -> None:
        self.delay = delay
        self._trim = trim
        self._looked_up = trim is not None
        self._pending = threading.Lock()

    def release_freed_soon(self) -> None:
        """Trim the heap shortly, in a thread of its own (ctypes lets go of the
        interpreter lock meanwhile); one trim at a time."""
        if self._pending.acquire(blocking=False):
            timer = threading.Timer(self.delay, self._trim_now)
            timer.daemon = True
            timer.start()

    def _trim_now(self) -> None:
        try:
            if not self._looked_up:
                self._looked_up = True
                self._trim = _find_malloc_trim()
            if self._trim is not None:
                self._trim(0)
        finally:
            self._pending.release()


# The process's trimmer: one heap, so one trim at a time for all its callers.
PROCESS = Trimmer()


def release_freed_soon() -> None:
    """``PROCESS.release_freed_soon()``: trim the process's heap shortly."""
    PROCESS.release_freed_soon()
