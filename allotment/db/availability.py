"""Whether the database can be reached: lost connections told from refusals, and outages.

A database that restarts, shuts down, refuses connections or drops them is a
failure of the service, not of the request: ``Database.read()`` and
``write()`` turn such an error into ``DatabaseUnavailable``, which the HTTP
layer answers with 503 and ``Retry-After`` (``allotment.http.errors``). Any
other database error (a deadlock, a constraint) stays what it was, for the
write retry loop and the error renderer to handle as before.

``is_disconnect`` asks the classifier (``allotment.db.errors``, whose
``Disconnect`` it is); the classifier's ``handle_error`` hook tells
SQLAlchemy too, so every connection it condemns is invalidated with its pool
(and replaced at the next checkout, where a ping catches connections that
died while idle: ``install``).

``Outage`` logs one line when the database goes away and one when it is back
(how long, how many requests were refused), per process, instead of a
traceback per request. ``wait_until_reachable`` is the start-up wait of
``allotment serve`` and ``allotment db``.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.engine.interfaces import DBAPIConnection
from sqlalchemy.exc import DBAPIError

from allotment.db import errors

LOG = logging.getLogger(__name__)


class DatabaseUnavailable(Exception):
    """The database cannot be reached now; the transaction was rolled back or never began.

    (A commit whose answer was lost on the way back is the one case only the
    server knows the outcome of; it is not run again.) ``str(exc)`` is the
    reason (the driver's first line, no password), for logs only.
    """


def is_disconnect(exc: BaseException) -> bool:
    """True when ``exc`` means the database is unreachable, not that the statement failed.

    A lost, refused, invalidated or shut-down connection, or no pooled
    connection free within ``pool_timeout``.
    """
    if isinstance(exc, sa.exc.TimeoutError):
        return True
    return isinstance(exc, DBAPIError) and isinstance(errors.meaning(exc), errors.Disconnect)


def reason(exc: BaseException, url: sa.URL | None = None) -> str:
    """The first line of what the driver said, without SQL, parameters or password."""
    text = errors.driver_message(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else text
    password = url.password if url is not None else None
    if password:
        first = first.replace(str(password), "***")
    return first


# A pooled connection is pinged at checkout only when it may have died: when
# it has been idle in the pool for this many seconds or more, or when its
# socket is readable while no statement is under way (the server has said
# something: a session ended by an administrator or a restart says why and
# closes it, and a closed socket reads as its end). A busy server reuses its
# connections within milliseconds, and a ping is a round trip: a tenth of a
# millisecond of the server's CPU and some of the database's on every request
# (issue 40), where a look at the socket costs a system call. What neither
# would notice, a silent network (no answer, no reset), a ping would wait
# for as long as the statement does.
PING_AFTER_IDLE = 1.0
_RETURNED_AT = "allotment_returned_at"


def install(engine: Engine) -> None:
    """Ping a pooled connection at checkout when it may have died
    (``PING_AFTER_IDLE``); and let the rollback of a connection returned to
    ``engine``'s pool (created with ``pool_reset_on_return=None`` and without
    ``pool_pre_ping``) fail quietly when the server has just dropped it.

    (A restart between a commit and the check-in.) Instead of a traceback, one
    debug line, and the dead connection is closed: its pool slot reconnects
    at its next checkout.
    """
    @event.listens_for(engine, "connect")
    def _connected(_dbapi_connection: DBAPIConnection,
                   record: sa.pool.ConnectionPoolEntry) -> None:
        record.info[_RETURNED_AT] = time.monotonic()  # as good as a ping

    @event.listens_for(engine, "checkin")
    def _returned(dbapi_connection: DBAPIConnection | None,
                  record: sa.pool.ConnectionPoolEntry) -> None:
        if dbapi_connection is not None:
            record.info[_RETURNED_AT] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: DBAPIConnection, record: sa.pool.ConnectionPoolEntry,
                      _proxy: sa.pool.PoolProxiedConnection) -> None:
        returned = record.info.get(_RETURNED_AT)
        if (returned is not None and time.monotonic() - returned < PING_AFTER_IDLE
                and not _socket_has_news(dbapi_connection)):
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            if not isinstance(errors.meaning(exc), errors.Disconnect):
                raise
            # The pool closes this connection and opens another in its place.
            raise sa.exc.DisconnectionError(reason(exc)) from exc

    @event.listens_for(engine, "reset")
    def _reset(dbapi_connection: DBAPIConnection, record: sa.pool.ConnectionPoolEntry,
               state: sa.pool.PoolResetState) -> None:
        if state.transaction_was_reset or not state.asyncio_safe:
            return  # what SQLAlchemy's own reset-on-return skips too
        try:
            dbapi_connection.rollback()
        except Exception as exc:
            if not isinstance(errors.meaning(exc), errors.Disconnect):
                raise
            LOG.debug("connection lost before its return to the pool: %s", reason(exc))
            # Just given back, it would not be pinged before its next use.
            record.invalidate(exc)


def _socket_has_news(dbapi_connection: DBAPIConnection) -> bool:
    """Whether the connection's socket can be read (or is closed) between
    statements, when nothing is due; True when its socket cannot be found."""
    try:
        if hasattr(dbapi_connection, "fileno"):  # psycopg
            fd = dbapi_connection.fileno()
        else:  # PyMySQL keeps its socket in an attribute of its own
            fd = dbapi_connection._sock.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    except Exception:
        return True


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
