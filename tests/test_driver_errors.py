"""The classifier of driver errors (``allotment.db.errors``): each driver's words, one type.

What counts as a disconnect is tested with the outages
(tests/live/test_database_outage.py), the capacity guard's refusal on live
databases in tests/test_capacity_guard.py.
"""

from __future__ import annotations

import sqlite3

import psycopg
import pymysql
import pytest
import sqlalchemy as sa

from allotment.db import errors
from allotment.db import tables as t


def _wrapped(orig: BaseException) -> sa.exc.DBAPIError:
    return sa.exc.DBAPIError.instance("INSERT ...", {}, orig, type(orig).__mro__[1])


@pytest.mark.parametrize("orig, kind", [
    (pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"),
     errors.LostRace),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), errors.LockWaitTimeout),
    (pymysql.err.OperationalError(3572, "Statement aborted because lock(s) could not be "
                                        "acquired immediately and NOWAIT is set."),
     errors.LockNotGranted),
    (pymysql.err.IntegrityError(1062, "Duplicate entry 'x' for key 'uniq_traits0name'"),
     errors.DuplicateKey),
    (pymysql.err.IntegrityError(1452, "Cannot add or update a child row: a foreign key "
                                      "constraint fails"), None),
    (pymysql.err.ProgrammingError(1064, "Trigger 'allotment_guard_insert' has an error in "
                                        "its body: '...'"), errors.BrokenTrigger),
    (pymysql.err.ProgrammingError(1064, "You have an error in your SQL syntax"), None),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"),
     errors.Disconnect),
    (psycopg.errors.DeadlockDetected("deadlock detected"), errors.LostRace),
    (psycopg.errors.SerializationFailure("could not serialize access"), errors.LostRace),
    (psycopg.errors.LockNotAvailable("could not obtain lock"), errors.LockWaitTimeout),
    (psycopg.errors.UniqueViolation("duplicate key value violates unique constraint"),
     errors.DuplicateKey),
    (psycopg.errors.ForeignKeyViolation("violates foreign key constraint"), None),
    (psycopg.errors.AdminShutdown("terminating connection"), errors.Disconnect),
    (sqlite3.OperationalError("database is locked"), errors.LostRace),
    (sqlite3.IntegrityError("UNIQUE constraint failed: traits.name"), errors.DuplicateKey),
    (sqlite3.OperationalError("no such table: x"), None),
])
def test_each_drivers_error_gets_its_type(orig, kind):
    found = errors.meaning(_wrapped(orig))
    if kind is None:
        assert found is None
    else:
        assert type(found) is kind


def test_which_lock_errors_are_races():
    # A lock wait timed out: retried as a race, and what the feed's NOWAIT probe
    # takes for a lock held. MySQL 8's NOWAIT refusal: only the latter.
    waited = errors.meaning(_wrapped(pymysql.err.OperationalError(1205, "Lock wait timeout")))
    assert isinstance(waited, errors.LostRace) and isinstance(waited, errors.LockNotGranted)
    refused = errors.meaning(_wrapped(pymysql.err.OperationalError(3572, "NOWAIT is set")))
    assert not isinstance(refused, errors.LostRace)


def test_the_engine_hook_classifies_as_the_error_is_raised(database, monkeypatch):
    # A duplicate key raised by a real statement: SQLAlchemy's exception, its
    # class unchanged, already carries its meaning when it leaves execute().
    with database.engine.begin() as conn:
        conn.execute(t.traits.insert().values(name="CUSTOM_TWICE"))
    with pytest.raises(sa.exc.IntegrityError) as raised, database.engine.begin() as conn:
        conn.execute(t.traits.insert().values(name="CUSTOM_TWICE"))

    def not_again(_exc: BaseException) -> None:
        raise AssertionError("classified after the hook")

    monkeypatch.setattr(errors, "classify", not_again)
    found = errors.meaning(raised.value)
    assert isinstance(found, errors.DuplicateKey)
    assert found.error is raised.value
