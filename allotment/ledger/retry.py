"""Running a write transaction again, from scratch, when it lost a race.

A claim reads generations, checks capacity, writes, and finally
compare-and-sets every generation it read. When another writer committed in
between, the compare-and-set finds nothing to update and the attempt raises
``Race``. The whole transaction is then rolled back and the work is done
again in a NEW transaction, which sees the other writer's commit: a retry
never counts its own earlier attempt as existing usage.

Database-level losses (deadlock, serialization failure, a unique key taken
by a concurrent insert) are treated the same way.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.exc import DBAPIError, IntegrityError

from allotment import errors
from allotment.db.engine import Database
from allotment.ledger.common import is_duplicate

LOG = logging.getLogger(__name__)

T = TypeVar("T")

# PostgreSQL SQLSTATEs and MySQL error numbers that mean "try again".
_PG_TRANSIENT = {"40001", "40P01", "55P03"}
_MYSQL_TRANSIENT = {1205, 1213}


class Race(Exception):
    """A generation compare-and-set found that somebody else committed first."""


class RetriesExhausted(errors.ConcurrentUpdate):
    """Still losing races after the configured number of retries."""

    def __init__(self) -> None:
        super().__init__("Another thread concurrently updated the resource provider "
                         "data. Please retry your update")


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


def write_with_retries(db: Database, attempt: Callable, retries: int) -> T:
    """Run ``attempt(conn)`` in a write transaction; on a race, again in a new one.

    ``retries`` is ``[placement] allocation_conflict_retry_count``: how many
    times a lost race is tried again before answering 409.
    """
    for number in range(retries + 1):
        try:
            with db.write() as conn:
                return attempt(conn)
        except Race as exc:
            LOG.debug("write attempt %d lost a race (%s); retrying", number + 1, exc)
        except DBAPIError as exc:
            if not is_transient(exc):
                raise
            LOG.debug("write attempt %d hit %s; retrying", number + 1, exc.orig)
        # A little jitter keeps two losers from colliding again in lockstep.
        time.sleep(random.uniform(0, 0.002 * (number + 1)))
    LOG.warning("Exceeded retry limit of %d on allocations write", retries)
    raise RetriesExhausted()
