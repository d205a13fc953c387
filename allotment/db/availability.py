"""Whether the database can be reached: lost connections told from refusals, and outages.

A database that restarts, shuts down, refuses connections or drops them is a
failure of the service, not of the request: ``Database.read()`` and
``write()`` turn such an error into ``DatabaseUnavailable``, which the HTTP
layer answers with 503 and ``Retry-After`` (``allotment.http.errors``). Any
other database error (a deadlock, a constraint) stays what it was, for the
write retry loop and the error renderer to handle as before.

``is_disconnect`` is the one classification; the engine's ``handle_error``
hook feeds it back to SQLAlchemy, so every connection it condemns is
invalidated with its pool (and replaced at the next checkout, where
``pool_pre_ping`` also catches connections that died while idle).

``Outage`` logs one line when the database goes away and one when it is back
(how long, how many requests were refused), per process, instead of a
traceback per request. ``wait_until_reachable`` is the start-up wait of
``allotment serve`` and ``allotment db``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError

LOG = logging.getLogger(__name__)

# PostgreSQL SQLSTATEs of a lost or refused session: class 08 (connection
# exception) and these. 40P01 (deadlock) and 55P03 (lock) are races, not outages.
_PG_GONE = {
    "57P01",  # admin_shutdown: the server is shutting down (fast/immediate)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
    "57P05",  # idle_session_timeout
    "53300",  # too_many_connections
}

# What PostgreSQL says (without SQLSTATE) when it refuses a session for a reason
# that waiting will not cure: a wrong name, password or pg_hba.conf rule.
_PG_REFUSED_FOR_GOOD = ("does not exist", "authentication failed", "no pg_hba.conf entry",
                        "permission denied", "not permitted to log in",
                        "password is required")

# MySQL/MariaDB client (2xxx) and server error numbers of a lost or refused
# connection. 1205 (lock wait) and 1213 (deadlock) are races, not outages.
_MYSQL_GONE = {
    1040,  # too many connections
    1047,  # Galera: "WSREP has not yet prepared node for application use" (joining,
           # not synced, or cut off from the cluster's primary component)
    1053,  # server shutdown in progress
    1927,  # connection was killed (MariaDB)
    2002,  # can't connect through the socket
    2003,  # can't connect (refused, timed out)
    2006,  # server has gone away
    2013,  # lost connection during query
    2014,  # commands out of sync (a half-read answer of a dropped connection)
    2045,  # can't open a shared-memory connection
    2055,  # lost connection (system error)
    4031,  # disconnected by the server (idle timeout)
}


# Galera's words in a 1180 ("error during COMMIT") when the node has left the
# cluster's primary component while the commit was on its way: the node is leaving
# or cut off, like 1047 for the statements after it. Other 1180s are the storage
# engine's own failures and stay errors.
_GALERA_CUT_OFF = ("Primary Component", "provider status")


def _cut_off_from_galera(args: tuple) -> bool:
    message = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
    return any(marker in message for marker in _GALERA_CUT_OFF)


class DatabaseUnavailable(Exception):
    """The database cannot be reached now; the transaction was rolled back or never began.

    (A commit whose answer was lost on the way back is the one case only the
    server knows the outcome of; it is not run again.) ``str(exc)`` is the
    reason (the driver's first line, no password), for logs only.
    """


def lost_connection(orig: BaseException | None) -> bool:
    """True for a driver exception that means the connection is gone or refused."""
    if orig is None:
        return False
    sqlstate = getattr(orig, "sqlstate", None)
    module = type(orig).__module__
    if module.startswith("psycopg"):
        if sqlstate is None:
            # libpq's own failures (connect, send, receive) carry no SQLSTATE,
            # nor does the server's refusal of a new session, whether it will
            # pass ("the database system is starting up") or not.
            import psycopg

            text = str(orig)
            return (isinstance(orig, psycopg.OperationalError)
                    and not any(marker in text for marker in _PG_REFUSED_FOR_GOOD))
        return sqlstate.startswith("08") or sqlstate in _PG_GONE
    if module.startswith("pymysql"):
        args = getattr(orig, "args", ())
        code = args[0] if args else None
        if code == 0:
            # PyMySQL's "(0, '')": a statement on a connection it already closed.
            return type(orig).__name__ == "InterfaceError"
        if code == 1180:
            return _cut_off_from_galera(args)
        return isinstance(code, int) and code in _MYSQL_GONE
    return False


def is_disconnect(exc: BaseException) -> bool:
    """True when ``exc`` means the database is unreachable, not that the statement failed.

    A lost, refused, invalidated or shut-down connection, or no pooled
    connection free within ``pool_timeout``.
    """
    if isinstance(exc, sa.exc.TimeoutError):
        return True
    if isinstance(exc, DBAPIError):
        return bool(exc.connection_invalidated) or lost_connection(exc.orig)
    return False


def reason(exc: BaseException, url: sa.URL | None = None) -> str:
    """The first line of what the driver said, without SQL, parameters or password."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    args: tuple = getattr(orig, "args", ())
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
        text = f"ERROR {args[0]}: {args[1]}"  # PyMySQL's (number, message), as mysql shows it
    else:
        text = str(orig).split(" (Background on this error at:")[0]
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else type(orig).__name__
    password = url.password if url is not None else None
    if password:
        first = first.replace(str(password), "***")
    return first


def install(engine: Engine) -> None:
    """Teach ``engine`` (created with ``pool_reset_on_return=None``) about lost connections.

    SQLAlchemy then treats every failure ``lost_connection`` knows as a
    disconnect: it invalidates the connection and the pool's older ones, so
    none of them is handed out again after the database is back. And the
    rollback of a connection returned to the pool, which fails when the
    server has just dropped it (a restart between a commit and the check-in),
    does so quietly instead of logging a traceback: the dead connection is
    replaced at its next checkout (``pool_pre_ping``).
    """
    @event.listens_for(engine, "handle_error")
    def _classify(context: sa.engine.ExceptionContext) -> None:
        if not context.is_disconnect and lost_connection(context.original_exception):
            context.is_disconnect = True

    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection, _record, state: sa.pool.PoolResetState) -> None:
        if state.transaction_was_reset or not state.asyncio_safe:
            return  # what SQLAlchemy's own reset-on-return skips too
        try:
            dbapi_connection.rollback()
        except Exception as exc:
            if not lost_connection(exc):
                raise
            LOG.debug("connection lost before its return to the pool: %s", reason(exc))


class Outage:
    """When this process's database went away and how many requests it refused since.

    Thread-safe; the path taken on every transaction (``ended`` while all is
    well) reads one attribute.
    """

    def __init__(self, url: sa.URL) -> None:
        self._url = url
        self._shown = url.render_as_string(hide_password=True)
        self._lock = threading.Lock()
        self._since: float | None = None
        self._refused = 0

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def refused(self, exc: BaseException) -> DatabaseUnavailable:
        """Count one refused request; the first one of an outage logs why."""
        why = reason(exc, self._url)
        with self._lock:
            self._refused += 1
            first = self._since is None
            if first:
                self._since = time.monotonic()
        if first:
            LOG.warning("Database %s unavailable, answering 503 until it is back: %s",
                        self._shown, why)
        return DatabaseUnavailable(why)

    def ended(self) -> None:
        """A connection works again: log the end of an ongoing outage."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            lasted, refused = time.monotonic() - self._since, self._refused
            self._since, self._refused = None, 0
        LOG.warning("Database %s is back after %.1f s; %d requests were refused meanwhile",
                    self._shown, lasted, refused)


class GaveUp(Exception):
    """The database stayed unreachable (or refused us for good) at start-up; one line."""


def wait_until_reachable(engine: Engine, max_retries: int, retry_interval: float,
                         say: Callable[[str], None]) -> None:
    """Return once a connection to ``engine``'s database works.

    While the database is unreachable, ``say`` is told so once and the
    connection is tried again every ``retry_interval`` seconds, at most
    ``max_retries`` times in all as upstream's ``[placement_database]``
    options mean it (-1: forever; 0 still tries once). Raises ``GaveUp``
    after the last attempt, or at once for a failure that waiting cannot cure
    (a wrong password, a database that does not exist).
    """
    shown = engine.url.render_as_string(hide_password=True)
    attempts = 0
    started = time.monotonic()
    while True:
        attempts += 1
        try:
            with engine.connect():
                return
        except (DBAPIError, sa.exc.TimeoutError) as exc:
            why = reason(exc, engine.url)
            if not is_disconnect(exc):
                raise GaveUp(f"cannot use the database {shown}: {why}") from None
        if max_retries >= 0 and attempts >= max(1, max_retries):
            raise GaveUp(f"giving up: the database {shown} is still unreachable after "
                         f"{attempts} attempts in {time.monotonic() - started:.0f} s: {why}")
        if attempts == 1:
            limit = "forever" if max_retries < 0 else f"at most {max_retries} times"
            say(f"waiting for the database {shown}, trying every {retry_interval:g} s, "
                f"{limit}: {why}")
        time.sleep(retry_interval)
