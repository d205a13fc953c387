"""The classifier of driver errors (``allotment.db.errors``): each driver's words, one type.

What counts as a disconnect is tested with the outages
(tests/live/test_database_outage.py), the capacity guard's refusal on live
databases in tests/test_capacity_guard.py.
"""

from __future__ import annotations

import sqlite3
import time

import psycopg
import pymysql
import pytest
import sqlalchemy as sa

from allotment.db import availability, errors
from allotment.db import tables as t
from allotment.db.engine import PG_BEGIN_SNAPSHOT, SNAPSHOT_LEVEL, Database, create_engine
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


def _server_drops(database, dbapi_connection) -> None:
    """The server ends ``dbapi_connection``'s session, as a node cut off or killed does.

    Returns once the server has let it go, so the driver's next word on it fails.
    """
    admin = sa.create_engine(database.url, isolation_level="AUTOCOMMIT", poolclass=sa.NullPool)
    try:
        with admin.connect() as conn:
            if database.backend == "postgresql":
                pid = dbapi_connection.info.backend_pid
                conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
                alive = sa.text("SELECT count(*) FROM pg_stat_activity WHERE pid = :id")
            else:
                pid = dbapi_connection.thread_id()
                conn.execute(sa.text(f"KILL {int(pid)}"))
                alive = sa.text("SELECT count(*) FROM information_schema.processlist "
                                "WHERE id = :id")
            deadline = time.monotonic() + 10
            while conn.execute(alive, {"id": pid}).scalar():
                assert time.monotonic() < deadline, "the server kept the session"
                time.sleep(0.01)
    finally:
        admin.dispose()


def _one_connection(database) -> Database:
    # One pooled connection and no overflow: a slot that is not given back shows
    # as the next checkout timing out.
    return Database(create_engine(database.url, pool_size=1, max_overflow=0, pool_timeout=2))


def test_a_connection_lost_at_the_snapshots_first_statement_is_an_outage(database):
    # The fault campaign, a Galera node cut off: the connection died as the
    # snapshot began. An outage: 503 with Retry-After, and the next request works.
    if database.backend == "sqlite":
        return  # no server to drop a connection
    db = _one_connection(database)
    drops = {"left": 0}

    @sa.event.listens_for(db.engine, "before_cursor_execute")
    def _drop(conn, _cursor, statement, _parameters, _context, _many):
        if drops["left"] and statement in (SNAPSHOT_LEVEL, PG_BEGIN_SNAPSHOT):
            drops["left"] -= 1
            _server_drops(database, conn.connection.dbapi_connection)

    try:
        drops["left"] = 1
        with pytest.raises(availability.DatabaseUnavailable), db.snapshot():
            pass
        with db.snapshot() as conn:
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1

        drops["left"] = 1
        client = PlacementClient(make_app(make_conf(database.url), db=db, prepare=False))
        answer = client.get("/allocation_candidates?resources=VCPU:1",
                            headers={"OpenStack-API-Version": "placement 1.37"})
        assert drops["left"] == 0  # the candidates' read went through a snapshot
        assert answer.status == 503, answer.text
        assert "retry-after" in {k.lower() for k in answer.headers}
    finally:
        db.engine.dispose()


def test_a_connection_lost_on_its_way_back_after_a_snapshot_is_let_go(database):
    # The fault campaign's 30-minute run: three candidates GETs answered 500 with
    # the driver's own error (InterfaceError (0, ''), 2013, 1047), raised while
    # the connection of a finished snapshot went back to the pool, from a server
    # that had just dropped it. The read was done: it stands, the dead connection
    # is dropped, and its pool slot is given back.
    if database.backend == "sqlite":
        return  # no server to drop a connection
    db = _one_connection(database)
    drops = {"left": 0}

    def _drop(dbapi_connection, _record, _state):
        if drops["left"]:
            drops["left"] -= 1
            _server_drops(database, dbapi_connection)

    # Before the rollback on return, which tolerates a dropped connection.
    sa.event.listen(db.engine, "reset", _drop, insert=True)
    try:
        for _ in range(3):
            drops["left"] = 1
            with db.snapshot() as conn:
                assert conn.execute(sa.text("SELECT 1")).scalar() == 1
            assert drops["left"] == 0
        with db.read() as conn:  # the one slot is free, with a working connection
            assert conn.execute(sa.text("SELECT 2")).scalar() == 2
    finally:
        db.engine.dispose()


def test_a_pooled_connection_is_pinged_only_when_it_may_have_died(database, monkeypatch):
    # issue 40: a ping on every checkout was a round trip on every request.
    # A connection given back just now, whose socket has nothing to say, is
    # used as it is; one idle for PING_AFTER_IDLE, or whose server has ended
    # the session, is pinged, and a dead one replaced before the read.
    if database.backend == "sqlite":
        return  # no server, no ping
    db = _one_connection(database)
    pings = []
    ping = db.engine.dialect.do_ping

    def counted(dbapi_connection):
        pings.append(1)
        return ping(dbapi_connection)

    monkeypatch.setattr(db.engine.dialect, "do_ping", counted)
    try:
        for _ in range(5):
            with db.read() as conn:
                assert conn.execute(sa.text("SELECT 1")).scalar() == 1
        assert pings == []
        monkeypatch.setattr(availability, "PING_AFTER_IDLE", 0.0)
        with db.read() as conn:
            raw = conn.connection.dbapi_connection
            assert conn.execute(sa.text("SELECT 1")).scalar() == 1
        assert len(pings) == 1
        monkeypatch.undo()
        monkeypatch.setattr(db.engine.dialect, "do_ping", counted)
        _server_drops(database, raw)
        with db.read() as conn:
            assert conn.connection.dbapi_connection is not raw
            assert conn.execute(sa.text("SELECT 2")).scalar() == 2
        assert len(pings) == 2
    finally:
        db.engine.dispose()


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
