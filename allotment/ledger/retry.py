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
...))``, and the ledger function does every step of the write on ``conn``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError, IntegrityError

from allotment import metrics
from allotment.db.engine import Database
from allotment.ledger.common import is_duplicate
from allotment.ledger.errors import Race, RetriesExhausted

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# PostgreSQL SQLSTATEs and MySQL error numbers that mean "try again".
_PG_TRANSIENT = {"40001", "40P01", "55P03"}
_MYSQL_TRANSIENT = {1205, 1213}

# Retries of writes other than claims (which use the configured
# ``allocation_conflict_retry_count``): losses there are rare (MySQL
# deadlocks between concurrent inserts, SQLite's busy timeout).
WRITE_RETRIES = 5


__all__ = ["Race", "RetriesExhausted", "WRITE_RETRIES", "attempts", "run_write"]


def is_transient(exc: DBAPIError) -> bool:
    """True for database errors that a fresh transaction can avoid."""
    if isinstance(exc, IntegrityError):
        return is_duplicate(exc)
    orig = exc.orig
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if sqlstate in _PG_TRANSIENT:
        return True
    args = getattr(orig, "args", ())
    if args and isinstance(args[0], int) and args[0] in _MYSQL_TRANSIENT:
        return True
    text = str(orig).lower()
    return "database is locked" in text or "deadlock" in text


class Attempt:
    """One write transaction of a retry loop (see ``attempts``).

    Entering opens the transaction; leaving commits it, or rolls it back and
    swallows the exception when it was a lost race, so the loop goes on.
    """

    def __init__(self, db: Database) -> None:
        self._db = db
        self._transaction: contextlib.AbstractContextManager[Connection] | None = None
        self.lost_to: BaseException | None = None

    def __enter__(self) -> Connection:
        self._transaction = self._db.write()
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
    if isinstance(exc, Race):
        return True
    if not isinstance(exc, DBAPIError):
        # Domain errors stay what the ledger made them, even when raised
        # while handling a duplicate key.
        return False
    if is_transient(exc):
        return True
    # When MySQL kills a transaction in a deadlock inside a savepoint, what
    # surfaces is the failed ROLLBACK TO SAVEPOINT, the deadlock its context.
    inner = exc.__cause__ or exc.__context__
    return inner is not exc and _lost_race(inner)


def attempts(db: Database, retries: int = WRITE_RETRIES) -> Iterator[Attempt]:
    """Write transactions until one commits; ``RetriesExhausted`` after ``retries`` more.

    Use as::

        for attempt in retry.attempts(db):
            with attempt as conn:
                ...

    A body that loses a race (``Race``, a deadlock, a lock timeout, a unique
    key taken meanwhile) is rolled back and run again from the top in a new
    transaction, which sees the winner's commit. Any other exception ends the
    loop at once.
    """
    for number in range(retries + 1):
        attempt = Attempt(db)
        yield attempt
        if attempt.lost_to is None:
            # Committed, or the body left the ``with`` some other way.
            return
        if number < retries:
            metrics.write_retry(attempt.lost_to)
        LOG.debug("write attempt %d lost a race (%s); retrying", number + 1, attempt.lost_to)
        # A little jitter keeps two losers from colliding again in lockstep.
        time.sleep(random.uniform(0, 0.002 * (number + 1)))
    LOG.warning("Exceeded retry limit of %d on a write", retries)
    metrics.write_retries_exhausted()
    raise RetriesExhausted()


def run_write(db: Database, work: Callable[[Connection], T],
              retries: int = WRITE_RETRIES) -> T:
    """Run ``work(conn)`` in a write transaction; on a lost race, again in a new one.

    ``retries`` is how many times a lost race is tried again before
    ``RetriesExhausted``: for claims and reshapes ``[placement]
    allocation_conflict_retry_count``, for other writes ``WRITE_RETRIES``
    (an operator who sets the option to 0 to see claim conflicts at once
    keeps the protection of other writes against deadlocks).
    """
    for transaction in attempts(db, retries):
        with transaction as conn:
            result = work(conn)
        # Returned only once the commit (on leaving the ``with``) held: a
        # commit that lost (a deadlock, a Galera certification failure) is
        # swallowed there and run again, and a ``return`` inside the block
        # would have answered success for a rolled-back transaction.
        if transaction.lost_to is None:
            return result
    raise AssertionError("attempts() either yields until success or raises")
