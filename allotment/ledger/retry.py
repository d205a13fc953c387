"""Running a write transaction again, from scratch, when it lost a race.

A claim reads generations, checks capacity, writes, and finally
compare-and-sets every generation it read. When another writer committed in
between, the compare-and-set finds nothing to update and the attempt raises
``Race``. The whole transaction is then rolled back and the work is done
again in a NEW transaction, which sees the other writer's commit: a retry
never counts its own earlier attempt as existing usage.

Database-level losses (deadlock, serialization failure, a unique key taken
by a concurrent insert) are treated the same way. A lost connection is not a
race: ``Database.write()`` raises it as ``DatabaseUnavailable``, which ends
the loop at once (the client gets 503, not 409; whether a commit cut off
midway landed is unknown, so the work is never run again blindly).

This is the one idiom for writes: a handler states the transaction and its
retry boundary in one line, ``retry.run_write(db, lambda conn: ledger_fn(conn,
...))`` (through ``Resource.run_write``, which hands it the service's
metrics as the ``RetryObserver``), and the ledger function does every step
of the write on ``conn``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import Protocol, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from allotment.db.engine import Database
from allotment.db.errors import BrokenTrigger, DuplicateKey, LostRace, meaning
from allotment.db.writer import NO_REQUEST, RequestIds
from allotment.ledger.errors import Race, RetriesExhausted

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# MariaDB parses a table's triggers each time it opens a new instance of the
# table. On Galera (10.11, under certification conflicts) that parse sometimes
# fails although the stored definition is fine, and the instance stays in the
# table cache with a "broken" trigger: every statement that gets it fails with
# 1064 "Trigger '...' has an error in its body" (``db.errors.BrokenTrigger``),
# for seconds and more. The loop then has the server open the table anew
# (``Database.reopen_tables_of_trigger``) and runs the write again; a trigger
# that really does not parse fails every attempt and is raised as it is, not
# as a 409. Retries, each after reopening the table: about 1 s of waiting in all.
BROKEN_TRIGGER_RETRIES = 8

# Retries of writes other than claims (which use the configured
# ``allocation_conflict_retry_count``): losses there are rare (MySQL
# deadlocks between concurrent inserts, SQLite's busy timeout).
WRITE_RETRIES = 5


__all__ = ["WRITE_RETRIES", "Race", "RetriesExhausted", "RetryObserver", "attempts",
           "run_write"]


class RetryObserver(Protocol):
    """Who hears of lost races (the service's metrics): plain labels, no exceptions."""

    def write_retried(self, cause: str) -> None:
        """An attempt lost and the write runs again: ``cause`` is 'generation' (a
        ``Race``), 'database' (deadlock, lock, busy, duplicate key) or 'broken_trigger'."""

    def write_retries_exhausted(self) -> None:
        """Every retry lost: the write ends in ``RetriesExhausted``."""


def is_transient(exc: DBAPIError) -> bool:
    """True for database errors that a fresh transaction can avoid: a lost race
    (deadlock, serialization failure, lock wait, SQLite's busy database), a
    unique key taken meanwhile, a trigger broken in the table cache."""
    return isinstance(meaning(exc), (LostRace, DuplicateKey, BrokenTrigger))


def broken_trigger(exc: BaseException | None) -> str | None:
    """The trigger's name in MariaDB's 1064 for a trigger it failed to parse
    when opening the table ("" when it did not know the name); None for any
    other error."""
    found = meaning(exc) if isinstance(exc, DBAPIError) else None
    return found.trigger if isinstance(found, BrokenTrigger) else None


def _database_errors(exc: BaseException | None) -> Iterator[DBAPIError]:
    """``exc`` and the database errors it was raised over, while they are such.

    When MySQL kills a transaction inside a savepoint (a deadlock, a broken
    trigger), what surfaces is the failed ROLLBACK TO SAVEPOINT, the real
    error behind it. SQLAlchemy raises its error from the driver's, and the
    driver's error is the one raised while the real error was handled: the
    walk steps over the driver's error to what it was raised over.
    """
    seen: set[int] = set()
    while isinstance(exc, DBAPIError) and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        inner = exc.__cause__ or exc.__context__
        driver_error = exc.orig
        if driver_error is not None and inner is driver_error:
            inner = driver_error.__cause__ or driver_error.__context__
        exc = inner


def _broken_trigger_behind(exc: BaseException) -> str | None:
    """``broken_trigger`` of ``exc`` or of a database error it was raised over."""
    return next((name for error in _database_errors(exc)
                 if (name := broken_trigger(error)) is not None), None)


def is_broken_trigger(exc: BaseException | None) -> bool:
    return broken_trigger(exc) is not None


class Attempt:
    """One write transaction of a retry loop (see ``attempts``).

    Entering opens the transaction; leaving commits it, or rolls it back and
    swallows the exception when it was a lost race, so the loop goes on.
    """

    def __init__(self, db: Database, ids: RequestIds = NO_REQUEST) -> None:
        self._db = db
        self._ids = ids
        self._transaction: contextlib.AbstractContextManager[Connection] | None = None
        self.lost_to: BaseException | None = None

    def __enter__(self) -> Connection:
        self._transaction = self._db.write(self._ids)
        return self._transaction.__enter__()

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        assert self._transaction is not None
        try:
            self._transaction.__exit__(kind, value, traceback)
        except BaseException as exc:  # the commit itself can lose (deadlock, lock)
            if not _lost_race(exc):
                raise
            self.lost_to = exc
            return True
        if value is not None and _lost_race(value):
            self.lost_to = value
            return True
        return False


def _lost_race(exc: BaseException | None) -> bool:
    # Domain errors other than Race stay what the ledger made them, even when
    # raised while handling a duplicate key: only database errors are looked behind.
    return isinstance(exc, Race) or any(is_transient(error) for error in _database_errors(exc))


def attempts(db: Database, retries: int = WRITE_RETRIES,
             observer: RetryObserver | None = None,
             ids: RequestIds = NO_REQUEST) -> Iterator[Attempt]:
    """Write transactions until one commits; ``RetriesExhausted`` after ``retries`` more.

    Use as::

        for attempt in retry.attempts(db):
            with attempt as conn:
                ...

    A body that loses a race (``Race``, a deadlock, a lock timeout, a unique
    key taken meanwhile) is rolled back and run again from the top in a new
    transaction, which sees the winner's commit. Any other exception ends the
    loop at once. ``observer``, when given, hears of each retry and of the end;
    ``ids`` are the request's, which the history records for each transaction.
    """
    number = 0  # races lost so far
    broken = 0  # attempts that met a trigger the server could not parse
    while True:
        attempt = Attempt(db, ids)
        yield attempt
        lost_to = attempt.lost_to
        if lost_to is None:
            # Committed, or the body left the ``with`` some other way.
            return
        trigger = _broken_trigger_behind(lost_to)
        if trigger is not None:
            # Not a race, and it does not count as one.
            if broken == BROKEN_TRIGGER_RETRIES:
                # The trigger as stored does not parse: say so (a 500).
                raise lost_to
            broken += 1
            tables = db.reopen_tables_of_trigger(trigger or None)
            LOG.warning("A write found trigger %s broken in the database's table cache; "
                        "reopened %s and trying again (%d of %d)", trigger or "(unnamed)",
                        ", ".join(tables) or "nothing", broken, BROKEN_TRIGGER_RETRIES)
            if observer is not None:
                observer.write_retried("broken_trigger")
            time.sleep(min(0.2, 0.01 * 2 ** broken))
            continue
        if number == retries:
            break
        number += 1
        if observer is not None:
            observer.write_retried("generation" if isinstance(lost_to, Race) else "database")
        LOG.debug("write attempt %d lost a race (%s); retrying", number, lost_to)
        # A little jitter keeps two losers from colliding again in lockstep.
        time.sleep(random.uniform(0, 0.002 * number))
    LOG.warning("Exceeded retry limit of %d on a write", retries)
    if observer is not None:
        observer.write_retries_exhausted()
    raise RetriesExhausted()


def run_write(db: Database, work: Callable[[Connection], T],
              retries: int = WRITE_RETRIES, observer: RetryObserver | None = None,
              ids: RequestIds = NO_REQUEST) -> T:
    """Run ``work(conn)`` in a write transaction; on a lost race, again in a new one.

    ``retries`` is how many times a lost race is tried again before
    ``RetriesExhausted``: for claims and reshapes ``[placement]
    allocation_conflict_retry_count``, for other writes ``WRITE_RETRIES``
    (an operator who sets the option to 0 to see claim conflicts at once
    keeps the protection of other writes against deadlocks). ``observer``
    and ``ids``: as for ``attempts``.
    """
    for transaction in attempts(db, retries, observer, ids):
        with transaction as conn:
            result = work(conn)
        # Returned only once the commit (on leaving the ``with``) held: a
        # commit that lost (a deadlock, a Galera certification failure) is
        # swallowed there and run again, and a ``return`` inside the block
        # would have answered success for a rolled-back transaction.
        if transaction.lost_to is None:
            return result
    raise AssertionError("attempts() either yields until success or raises")
