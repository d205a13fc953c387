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

from allotment.db import availability, errors
from allotment.db import tables as t
from allotment.wsgi import make_app
from tests.conftest import make_conf
from tests.support.client import PlacementClient


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


# What each server driver raises when the server dropped the connection.
_DROPPED = {
    "mysql": lambda: pymysql.err.OperationalError(
        2013, "Lost connection to MySQL server during query ([Errno 104] Connection reset)"),
    "postgresql": lambda: psycopg.OperationalError(
        "server closed the connection unexpectedly"),
}


def test_a_connection_lost_setting_the_snapshot_level_is_an_outage(database, monkeypatch):
    # SQLAlchemy sets REPEATABLE READ outside its error handling: the driver's own
    # exception came out of db.snapshot() and a candidates GET answered 500 (the
    # fault campaign, a Galera node cut off). It is an outage: 503, Retry-After.
    if database.backend not in _DROPPED:
        return  # SQLite's snapshot sets no level
    dialect = database.engine.dialect
    original = dialect.set_isolation_level
    failing = {"left": 1}

    def set_level(dbapi_connection, level):
        if failing["left"] and level == "REPEATABLE READ":
            failing["left"] -= 1
            raise _DROPPED[database.backend]()
        return original(dbapi_connection, level)

    monkeypatch.setattr(dialect, "set_isolation_level", set_level)
    with pytest.raises(availability.DatabaseUnavailable), database.db.snapshot():
        pass
    # The next snapshot gets a working connection.
    with database.db.snapshot() as conn:
        assert conn.execute(sa.text("SELECT 1")).scalar() == 1

    failing["left"] = 1
    client = PlacementClient(make_app(make_conf(database.url), db=database.db, prepare=False))
    answer = client.get("/allocation_candidates?resources=VCPU:1",
                        headers={"OpenStack-API-Version": "placement 1.37"})
    assert failing["left"] == 0  # the candidates' read went through a snapshot
    assert answer.status == 503, answer.text
    assert "retry-after" in {k.lower() for k in answer.headers}


_LOCK_NOT_GRANTED = {
    "mysql": lambda: pymysql.err.OperationalError(
        1205, "Lock wait timeout exceeded; try restarting transaction"),
    "postgresql": lambda: psycopg.errors.DeadlockDetected("deadlock detected"),
    "sqlite": lambda: sqlite3.OperationalError("database is locked"),
}


def test_a_read_that_is_not_granted_a_lock_is_a_503(database, monkeypatch):
    # The fault campaign's 30-minute run: a GET /allocations/{consumer} on a Galera
    # node whose causal wait (wsrep_sync_wait) timed out got 1205 and answered 500.
    # Writes retry such races; a read that meets one is told to come back.
    client = PlacementClient(make_app(make_conf(database.url), db=database.db, prepare=False))
    dialect = database.engine.dialect
    original = dialect.do_execute
    failing = {"left": 1}

    def execute(cursor, statement, parameters, context=None):
        if failing["left"] and "allocations" in statement and \
                statement.lstrip().upper().startswith("SELECT"):
            failing["left"] -= 1
            raise _LOCK_NOT_GRANTED[database.backend]()
        return original(cursor, statement, parameters, context)

    monkeypatch.setattr(dialect, "do_execute", execute)
    consumer = "9f1c5c3e-7e0a-4a47-9c5b-2a4d3f0e8b11"
    answer = client.get(f"/allocations/{consumer}")
    assert failing["left"] == 0
    assert answer.status == 503, answer.text
    assert {k.lower(): v for k, v in answer.headers.items()}["retry-after"] == "2"
    assert "busy" in answer.text
    # Tried again, it answers.
    assert client.get(f"/allocations/{consumer}").status == 200
