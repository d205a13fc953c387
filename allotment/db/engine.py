"""Engine set-up and the two kinds of transaction every operation runs in.

``Database.read()`` and ``Database.write()`` are the visible transaction
boundaries: domain functions receive the connection and never commit.

Isolation: PostgreSQL and MySQL/MariaDB run READ COMMITTED, so a retried
write (a fresh transaction) always sees the latest committed state, and
generation compare-and-set updates serialise concurrent writers. SQLite runs
in WAL mode and every write transaction starts with ``BEGIN IMMEDIATE``, so
writers queue for the single write lock (bounded by a busy timeout) instead
of failing with "database is locked".

Every engine classifies its driver errors as SQLAlchemy raises them
(``allotment.db.errors``). A database that cannot be reached (shut down,
restarting, refusing, a connection lost mid-transaction) surfaces from both as
``availability.DatabaseUnavailable``; the transaction was rolled back (or
never began). Pooled connections idle for a second or more are checked
before use (``availability.install``) and the pool is invalidated on a
disconnect, so service resumes with the first request after the database is
back.

Round trips: every request pays for its statements' and for the transaction
around them. On PostgreSQL a plain read (``Database.read()``) runs its
statements in autocommit, each its own snapshot as under READ COMMITTED
anyway, so it sends no BEGIN and no COMMIT; writes and snapshots send their
BEGIN themselves (``_configure_postgresql``), a snapshot's with its
isolation level in the same statement.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import psycopg
import sqlalchemy as sa
from psycopg import sql as psycopg_sql
from sqlalchemy import event
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from allotment.db import availability, errors
from allotment.db.writer import (
    NO_REQUEST,
    PG_CONTEXT_AT_BEGIN,
    RequestIds,
    WriteContext,
    pg_context_statement,
)

LOG = logging.getLogger(__name__)

SQLITE_BUSY_TIMEOUT_MS = 60_000

# Seconds to wait for a new server connection (libpq waits forever by default,
# so a host that drops packets would hold a request thread for minutes).
CONNECT_TIMEOUT = 10

# The first statement of a snapshot's transaction on MySQL/MariaDB (this
# transaction only, the session keeps READ COMMITTED); PostgreSQL begins one
# with the level in its BEGIN (``PG_BEGIN_SNAPSHOT``).
SNAPSHOT_LEVEL = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"
PG_BEGIN = "BEGIN ISOLATION LEVEL READ COMMITTED"
PG_BEGIN_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ"

# Execution options of a Connection: what its transaction is (PostgreSQL).
PLAIN_READ = "allotment_plain_read"
ONE_SNAPSHOT = "allotment_one_snapshot"

# See Database.reopen_tables_of_trigger.
REOPEN_INTERVAL = 0.2


def normalize_url(url: str | URL) -> URL:
    """Accept upstream's URL spellings; pick our drivers (psycopg 3, PyMySQL)."""
    parsed = make_url(url) if isinstance(url, str) else url
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    elif backend in ("mysql", "mariadb"):
        query = dict(parsed.query)
        query.setdefault("charset", "utf8mb4")
        parsed = parsed.set(drivername="mysql+pymysql", query=query)
    elif backend == "sqlite":
        parsed = parsed.set(drivername="sqlite")
    return parsed


def create_engine(url: str | URL, *, sqlite_synchronous: bool = True,
                  pool_size: int | None = None, max_overflow: int | None = None,
                  pool_timeout: int | None = None, recycle: int = 3600,
                  echo: bool = False) -> Engine:
    parsed = normalize_url(url)
    backend = parsed.get_backend_name()
    kwargs: dict = {"echo": echo, "future": True}
    if backend == "sqlite":
        database = parsed.database or ""
        if database and database != ":memory:":
            directory = os.path.dirname(os.path.abspath(database))
            os.makedirs(directory, exist_ok=True)
        kwargs["connect_args"] = {"check_same_thread": False,
                                  "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000}
    else:
        kwargs["isolation_level"] = "READ COMMITTED"
        if "connect_timeout" not in parsed.query:
            kwargs["connect_args"] = {"connect_timeout": CONNECT_TIMEOUT}
        # The rollback of a connection coming back to the pool is
        # availability.install's, which tolerates a connection just dropped;
        # so is the ping of a connection idle in the pool.
        kwargs["pool_reset_on_return"] = None
        kwargs["pool_recycle"] = recycle
        kwargs["pool_size"] = pool_size if pool_size else 10
        kwargs["max_overflow"] = max_overflow if max_overflow is not None else 20
        if pool_timeout is not None:
            kwargs["pool_timeout"] = pool_timeout
    engine = sa.create_engine(parsed, **kwargs)
    # First of the engine's handle_error listeners: the others (metrics) see
    # the disconnects it finds.
    errors.install(engine)
    if backend == "sqlite":
        _configure_sqlite(engine, sqlite_synchronous)
    else:
        availability.install(engine)
        if backend == "postgresql":
            _configure_postgresql(engine)
    return engine


def _configure_postgresql(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: DBAPIConnection, _record: sa.pool.ConnectionPoolEntry) -> None:
        # No JIT: on a freshly loaded database (no statistics yet) the planner's
        # estimates for the candidate statements exceed jit_above_cost, and
        # compiling took 365 of a 384 ms provider-summary statement at 10,000
        # providers; our statements are short OLTP reads that never gain from it.
        cursor = dbapi_conn.cursor()
        cursor.execute("SET jit = off")
        # A plan for the values at hand, every time: psycopg prepares a
        # statement from its fifth execution, and a generic plan made while
        # the tables were small was then kept while they grew, until an
        # ANALYZE that a database without autovacuum never runs (each claim
        # read every consumer). Planning these short statements costs less
        # than one such scan. The trigger functions keep their plans, made
        # index-first (migration 0007).
        cursor.execute("SET plan_cache_mode = force_custom_plan")
        cursor.close()
        dbapi_conn.commit()
        # Statements outside a transaction commit themselves; every transaction
        # sends its own BEGIN (below), a plain read none.
        dbapi_conn.autocommit = True

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        raw = conn.connection.dbapi_connection
        if raw is not None and not raw.autocommit:
            # Something set an isolation level through SQLAlchemy (Alembic's
            # autocommit block), whose reset turned autocommit off: psycopg would
            # begin a transaction of its own before ours, and a snapshot's level
            # would be lost in it.
            raw.autocommit = True
        options = conn.get_execution_options()
        if options.get(PLAIN_READ):
            return
        ids = options.get(PG_CONTEXT_AT_BEGIN)
        if ids is not None:
            # A write's context in its BEGIN's round trip: without parameters
            # psycopg sends both statements as one simple query. Passed none
            # at all (not even empty ones): psycopg would read the literals'
            # "%s" and "%%" as placeholders.
            quote = functools.partial(_pg_literal, cast("psycopg.Connection[Any]", raw))
            conn.exec_driver_sql(f"{PG_BEGIN}; {pg_context_statement(ids, quote)}",
                                 execution_options={"no_parameters": True})
            return
        conn.exec_driver_sql(PG_BEGIN_SNAPSHOT if options.get(ONE_SNAPSHOT) else PG_BEGIN)


def _pg_literal(dbapi_conn: psycopg.Connection[Any], value: str) -> str:
    """``value`` as a string literal, quoted by psycopg for this connection."""
    return psycopg_sql.Literal(value).as_string(dbapi_conn)


def _configure_sqlite(engine: Engine, synchronous: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: DBAPIConnection, _record: sa.pool.ConnectionPoolEntry) -> None:
        # Take transaction control from the driver so that BEGIN is ours.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA synchronous={'FULL' if synchronous else 'OFF'}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        if conn.get_execution_options().get("allotment_write"):
            conn.exec_driver_sql("BEGIN IMMEDIATE")
        else:
            conn.exec_driver_sql("BEGIN")


@contextlib.contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A write transaction (on SQLite: holding the write lock from BEGIN)."""
    with engine.connect() as conn:
        conn.execution_options(allotment_write=True)
        with conn.begin():
            yield conn


class Database:
    """An engine plus the read and write transaction helpers."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.backend = engine.dialect.name
        self.outage = availability.Outage(engine.url)
        # Marks our write transactions for the history triggers (allotment.db.writer).
        self.write_context = WriteContext(self.backend)
        self._reopen_lock = threading.Lock()
        self._reopened_at: dict[str, float] = {}

    def read(self) -> contextlib.AbstractContextManager[Connection]:
        return self._transaction(write=False)

    def write(self, ids: RequestIds = NO_REQUEST) -> contextlib.AbstractContextManager[Connection]:
        """A write transaction; its history entries carry ``ids`` (the request's)."""
        return self._transaction(write=True, ids=ids)

    def snapshot(self) -> contextlib.AbstractContextManager[Connection]:
        """A read transaction whose statements all see one snapshot.

        Under READ COMMITTED each statement sees the commits made before it
        began, so several statements that read related tables may disagree (a
        link to a trait whose row an earlier statement did not see). REPEATABLE
        READ takes one snapshot at the first statement, on PostgreSQL and
        InnoDB alike; a SQLite read transaction is one snapshot already.
        Locking reads must not run in it: on InnoDB they would take gap locks.
        """
        return self._transaction(write=False, one_snapshot=self.backend != "sqlite")

    @contextlib.contextmanager
    def _transaction(self, write: bool, one_snapshot: bool = False,
                     ids: RequestIds = NO_REQUEST) -> Iterator[Connection]:
        lost: DBAPIError | PoolTimeout | None = None
        try:
            with self.engine.connect() as conn:
                if write:
                    conn.execution_options(allotment_write=True)
                    if self.write_context.with_begin:
                        conn.execution_options(**{PG_CONTEXT_AT_BEGIN: ids})
                elif self.backend == "postgresql":
                    conn.execution_options(**{ONE_SNAPSHOT if one_snapshot else PLAIN_READ: True})
                with conn.begin():
                    if one_snapshot and self.backend != "postgresql":
                        # For this transaction only, as a statement: SQLAlchemy's
                        # per-connection ``isolation_level`` would reset the session
                        # when the connection is checked in, outside its error
                        # handling, so a server that dropped the connection just then
                        # (a Galera node cut off, killed, or not yet primary) raised
                        # the driver's own error out of a finished read (a 500) and
                        # kept the pool slot. As a statement, a lost connection is
                        # classified like any other (503), and nothing is left to undo.
                        conn.exec_driver_sql(SNAPSHOT_LEVEL)
                    if write:
                        self.write_context.begin(conn, ids)
                    yield conn
                    if write:
                        self.write_context.end(conn)
            # Back only once a whole transaction has worked: during a PostgreSQL
            # shutdown a session may still pass the checkout's ping, then die
            # at its next statement (a "back" then "gone" again in the log).
            self.outage.ended()
        except (DBAPIError, PoolTimeout) as exc:
            if not availability.is_disconnect(exc):
                raise
            lost = exc
        if lost is not None:
            # Outside the ``except``: oslo.log would add the exception to the line.
            raise self.outage.refused(lost) from lost

    def reopen_tables_of_trigger(self, trigger: str | None) -> list[str]:
        """MySQL/MariaDB: make the server open the table of ``trigger`` anew
        (of every table with triggers when the name is not known).

        For a table instance the server cached with a trigger it failed to
        parse (see ``allotment.ledger.retry``): such an instance fails every
        statement that uses it until it leaves the table cache. ``REPAIR LOCAL
        TABLE`` closes the table's cached instances (on InnoDB it repairs
        nothing) and needs only the SELECT and INSERT privileges on it, where
        ``FLUSH TABLES`` would need RELOAD. LOCAL: not written to the binary
        log. Returns the tables reopened: none when there was nothing to do
        or it could not be done (logged). Several requests meeting the same
        instance at once reopen it once: a repeat within ``REOPEN_INTERVAL``
        seconds does nothing.
        """
        if self.backend != "mysql":
            return []
        key = trigger or ""
        with self._reopen_lock:
            now = time.monotonic()
            if now - self._reopened_at.get(key, -REOPEN_INTERVAL) < REOPEN_INTERVAL:
                return []
            self._reopened_at[key] = now
        query = ("SELECT DISTINCT event_object_table FROM information_schema.triggers "
                 "WHERE trigger_schema = DATABASE()")
        params = {}
        if trigger is not None:
            query += " AND trigger_name = :name"
            params["name"] = trigger
        try:
            with self.engine.connect() as conn:
                tables = sorted(str(name) for name in
                                conn.execute(sa.text(query), params).scalars())
                conn.commit()
                if not tables:
                    return []
                # Waits for the transactions using the tables; not for long.
                conn.exec_driver_sql("SET SESSION lock_wait_timeout = 5")
                quote = conn.dialect.identifier_preparer.quote
                conn.exec_driver_sql(
                    "REPAIR LOCAL TABLE " + ", ".join(quote(t) for t in tables)).fetchall()
                conn.commit()
                # The pool's next user must not inherit the short timeout.
                conn.invalidate()
        except DBAPIError as exc:
            LOG.warning("Could not reopen the tables of trigger %s: %s", trigger,
                        errors.driver_exception(exc))
            return []
        return tables

    def dispose(self) -> None:
        self.engine.dispose()
