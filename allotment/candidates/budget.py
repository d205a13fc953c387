"""What one candidates search may cost a worker: memory, time and threads.

Granular groups over identical children multiply: ten one-unit children and
ten groups under ``group_policy=none`` are 10! = 3,628,800 candidates, and
nothing in the API bounds that (``max_allocation_candidates`` is -1, as
upstream's). Without bounds one such request grows a worker until it dies,
and a few of them take every thread. So every search runs under a
``Budget``:

* **entries**: an answer holds at most ``max_entries`` allocation entries
  (one provider in one candidate; memory grows with them, about 0.4 KiB each
  while the answer is built and written). Past that the search stops and the
  client is told to narrow the query or pass ``limit``. Upstream's largest
  answers that it can make at all (bug 2126751's 40,320 candidates of 8
  providers, 322,560 entries) fit.
* **time**: the search stops after ``time_limit`` seconds.
* **large searches**: a search that may produce more than ``large_entries``
  entries (an upper bound known once the groups are matched: the product of
  each tree's options, ``limit`` applied) must hold one of the worker's
  ``large_slots``. When they are all taken it is refused at once (503 with
  ``Retry-After``), so large searches can never occupy every thread and the
  cheap requests (nova's ``limit=1000`` queries, claims, health checks) are
  always served. A search that has run ``grace`` seconds without a slot
  (one whose bound looked small but whose tree walk is slow) must take one
  to go on.
* **gone clients**: when the server can tell that the client has closed
  its connection, the search stops.

The checks are a countdown per search step, so they cost the normal paths
next to nothing. Pure domain code: the handler builds the budget from the
configuration and the WSGI environment.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from allotment import memory
from allotment.ledger import errors

if TYPE_CHECKING:
    from oslo_config import cfg

LOG = logging.getLogger(__name__)

# Search steps between two looks at the clock (a step is a node of a tree walk
# or one candidate): a few microseconds of work each, so about every millisecond.
_STEPS_BETWEEN_CHECKS = 512

# Answers of more entries than this leave enough freed memory behind to be worth
# giving back (about 8 MiB).
TRIM_AFTER_ENTRIES = 20_000

T = TypeVar("T")


@dataclass(frozen=True)
class Limits:
    """The ``[allotment] candidates_*`` options."""

    max_entries: int = 1_000_000
    time_limit: float = 20.0
    large_entries: int = 100_000
    large_slots: int = 1
    grace: float = 1.0

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> Limits:
        opts = conf.allotment
        return cls(max_entries=opts.candidates_max_entries,
                   time_limit=float(opts.candidates_time_limit),
                   large_entries=opts.candidates_large_entries,
                   large_slots=opts.candidates_large_slots,
                   grace=float(opts.candidates_grace))


class Slots:
    """The worker's places for large searches (one set per process)."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._free = threading.BoundedSemaphore(count)

    def take(self) -> bool:
        return self._free.acquire(blocking=False)

    def give_back(self) -> None:
        self._free.release()


class Budget:
    """One search's allowance; ``close`` (or ``with``) gives back its slot.

    ``clock`` is what the time limit is counted on; ``steps_between_checks``
    how many search steps pass between two looks at the clock and the client
    (default ``_STEPS_BETWEEN_CHECKS``); ``trimmer`` gives a large answer's
    memory back once the search is closed (default the process's).
    """

    def __init__(self, limits: Limits, slots: Slots | None = None,
                 client_gone: Callable[[], bool] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 steps_between_checks: int | None = None,
                 trimmer: memory.Trimmer | None = None) -> None:
        self.limits = limits
        self.slots = slots
        self.client_gone = client_gone
        self.clock = clock
        # Read here, not bound as the argument's default: the app's budgets are
        # built from the configuration without one, and count the module's
        # value at the time.
        self.steps_between_checks = (_STEPS_BETWEEN_CHECKS if steps_between_checks is None
                                     else steps_between_checks)
        self.trimmer = memory.PROCESS if trimmer is None else trimmer
        self.started = clock()
        self.entries = 0
        self.holding = False
        self._countdown = self.steps_between_checks

    @classmethod
    def unlimited(cls) -> Budget:
        """No bounds (tests and tools that call the engine directly)."""
        return cls(Limits(max_entries=2**62, time_limit=float("inf"),
                          large_entries=2**62, grace=float("inf")))

    def __enter__(self) -> Budget:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        if self.holding and self.slots is not None:
            self.holding = False
            self.slots.give_back()
        if self.entries > TRIM_AFTER_ENTRIES:
            self.trimmer.release_freed_soon()

    # --- the three questions the engine asks ---------------------------------

    def admit(self, entries_bound: int) -> None:
        """The search may produce up to ``entries_bound`` entries: take a slot if large."""
        if entries_bound > self.limits.large_entries:
            self._take_slot(f"may return up to {entries_bound} allocation entries")

    def take_slot(self, why: str) -> None:
        """Take a large-search slot now: work that is large by its kind (the
        audit reads whole tables), refused at once when none is free."""
        self._take_slot(why)

    def step(self) -> None:
        """One unit of search work done (called very often: keep it cheap)."""
        self._countdown -= 1
        if self._countdown <= 0:
            self._countdown = self.steps_between_checks
            self.check()

    def spend(self, entries: int) -> None:
        """A candidate of ``entries`` allocation entries joins the answer."""
        self.entries += entries
        if self.entries > self.limits.max_entries:
            raise errors.TooManyCandidates(self.limits.max_entries)
        self.step()

    def metered(self, candidates: Iterable[T], size: Callable[[T], int]) -> Iterator[T]:
        """``candidates``, each paid for with ``spend`` as it is taken."""
        for candidate in candidates:
            self.spend(size(candidate))
            yield candidate

    # -----------------------------------------------------------------------------

    def check(self) -> None:
        elapsed = self.clock() - self.started
        if elapsed > self.limits.time_limit:
            raise errors.CandidatesTooSlow(self.limits.time_limit)
        if not self.holding and elapsed > self.limits.grace:
            self._take_slot(f"has run for {elapsed:.1f} s")
        if self.client_gone is not None and self.client_gone():
            raise errors.ClientGone()

    def _take_slot(self, why: str) -> None:
        if self.holding or self.slots is None:
            return
        if not self.slots.take():
            LOG.info("large candidates search refused: it %s and all %d large-search "
                     "slots of this worker are taken", why, self.slots.count)
            raise errors.CandidatesBusy(self.slots.count)
        self.holding = True


def bounded_product(sizes: Iterable[int], cap: int) -> int:
    """The product of ``sizes``, or ``cap + 1`` as soon as it exceeds ``cap``."""
    product = 1
    for size in sizes:
        product *= size
        if product > cap:
            return cap + 1
    return product
