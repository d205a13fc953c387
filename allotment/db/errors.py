"""What a database driver's error means: the one place that reads driver error codes.

Each backend's driver says the same things its own way (PostgreSQL
SQLSTATEs, MySQL error numbers, SQLite's words). ``classify`` reads them
and answers with one of the typed errors below, or None for an error that
means nothing in particular (a syntax error, a foreign key): those stay what
SQLAlchemy made them.

``install`` sets the classifier on an engine's ``handle_error`` hook: every
error SQLAlchemy raises from a statement, a commit or a connect then carries
its meaning, which ``meaning`` reads back. SQLAlchemy's exception is raised
as it was (its class, text and chain are what logs, metrics and the 500
answer show); the typed error rides along as an attribute. A disconnect is
also told to SQLAlchemy there, so it invalidates the connection and its pool.
Errors that never went through an engine (raised by the driver directly, or
built by hand) are classified when first asked about.

The database layer and the domain read the types, never ``exc.orig``:
``availability`` (``Disconnect``), ``ledger.retry`` (``LostRace``,
``DuplicateKey``, ``BrokenTrigger``), ``ledger.common`` (``DuplicateKey``),
``ledger.allocations`` (``CapacityGuardRefusal``) and ``candidates.feed``
(``LockNotGranted``).
"""

from __future__ import annotations

import contextlib
import re

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, IntegrityError

from allotment.db import guard


class DriverError(Exception):
    """A database error, classified; ``error`` is SQLAlchemy's exception (or,
    for an error raised by the driver directly, the driver's)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(error)  # str() shows the error's own text
        self.error = error


class Disconnect(DriverError):
    """The connection is lost or refused, or the server is shutting down or
    not ready: the database cannot be reached, the statement was not wrong."""


class LostRace(DriverError):
    """The transaction lost to a concurrent one (a deadlock, a serialization
    failure, a lock not granted in time, SQLite's busy database) and was rolled
    back or must be: a fresh transaction can succeed."""


class LockNotGranted(DriverError):
    """A lock the statement asked for was not granted: not in time, or not at
    once where the statement said NOWAIT."""


class LockWaitTimeout(LostRace, LockNotGranted):
    """A lock was not granted in time (MariaDB answers NOWAIT with it too)."""


class DuplicateKey(DriverError):
    """A unique key is taken (perhaps by a concurrent insert)."""


class CapacityGuardRefusal(DriverError):
    """The capacity guard (migration 0002) refused an allocation row over capacity."""

    def __init__(self, error: BaseException, provider_id: int, class_id: int) -> None:
        super().__init__(error)
        self.provider_id = provider_id
        self.class_id = class_id


class BrokenTrigger(DriverError):
    """MariaDB failed to parse a trigger when it opened the table (see
    ``ledger.retry``); ``trigger`` is its name, "" when the server did not say."""

    def __init__(self, error: BaseException, trigger: str) -> None:
        super().__init__(error)
        self.trigger = trigger


# --- PostgreSQL ----------------------------------------------------------------

# SQLSTATEs of a lost or refused session: class 08 (connection exception) and
# these. 40P01 (deadlock) and 55P03 (lock) are races, not outages.
_PG_GONE = {
    "57P01",  # admin_shutdown: the server is shutting down (fast/immediate)
    "57P02",  # crash_shutdown
    "57P03",  # cannot_connect_now: starting up, shutting down, in recovery
    "57P05",  # idle_session_timeout
    "53300",  # too_many_connections
}
_PG_LOST_RACE = {
    "40001",  # serialization_failure
    "40P01",  # deadlock_detected
}
_PG_LOCK_NOT_AVAILABLE = "55P03"

# What PostgreSQL says (without SQLSTATE) when it refuses a session for a reason
# that waiting will not cure: a wrong name, password or pg_hba.conf rule.
_PG_REFUSED_FOR_GOOD = ("does not exist", "authentication failed", "no pg_hba.conf entry",
                        "permission denied", "not permitted to log in",
                        "password is required")

# --- MySQL / MariaDB -------------------------------------------------------------

# Client (2xxx) and server error numbers of a lost or refused connection.
# 1205 (lock wait) and 1213 (deadlock) are races, not outages.
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
_MYSQL_DEADLOCK = 1213
_MYSQL_LOCK_WAIT_TIMEOUT = 1205
# MySQL 8's answer to NOWAIT; not a lost race (no write asks for NOWAIT).
_MYSQL_NOWAIT_REFUSED = 3572
# "Error during COMMIT": Galera's when the node left the cluster's primary
# component while the commit was on its way (the node is leaving or cut off,
# like 1047), recognized by these words; other 1180s are the storage engine's
# own failures and stay errors.
_MYSQL_COMMIT_FAILED = 1180
_GALERA_CUT_OFF = ("Primary Component", "provider status")
# A parse error; with these words, of a trigger MariaDB failed to parse when
# opening its table: "Trigger 'name' has an error in its body: ..." or, when
# the parse failed before the name, "Unknown trigger has an error in its body: ...".
_MYSQL_PARSE_ERROR = 1064
_BROKEN_TRIGGER_TEXT = re.compile(r"(?:Trigger '([^']+)'|Unknown trigger) has an error in its body")

# --- any backend -------------------------------------------------------------------

# SQLite's busy database, and any driver's deadlock, in words.
_LOST_RACE_WORDS = ("database is locked", "deadlock")
# A unique key violation, in every driver's words.
_DUPLICATE_WORDS = ("unique", "duplicate")


def _mysql_code_and_message(orig: BaseException) -> tuple[int | None, str]:
    """PyMySQL's (number, message) arguments."""
    args = tuple(getattr(orig, "args", ()))
    code = args[0] if args and isinstance(args[0], int) else None
    message = args[1] if len(args) > 1 and isinstance(args[1], str) else ""
    return code, message


def _sqlstate(orig: BaseException) -> str | None:
    return getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)


def _lost_connection(orig: BaseException) -> bool:
    """True for a driver exception that means the connection is gone or refused."""
    module = type(orig).__module__
    if module.startswith("psycopg"):
        sqlstate = getattr(orig, "sqlstate", None)
        if sqlstate is None:
            # libpq's own failures (connect, send, receive) carry no SQLSTATE,
            # nor does the server's refusal of a new session, whether it will
            # pass ("the database system is starting up") or not.
            import psycopg

            text = str(orig)
            return (isinstance(orig, psycopg.OperationalError)
                    and not any(marker in text for marker in _PG_REFUSED_FOR_GOOD))
        return bool(sqlstate.startswith("08") or sqlstate in _PG_GONE)
    if module.startswith("pymysql"):
        args = tuple(getattr(orig, "args", ()))
        code, message = _mysql_code_and_message(orig)
        if args and args[0] == 0:
            # PyMySQL's "(0, '')": a statement on a connection it already closed.
            return type(orig).__name__ == "InterfaceError"
        if code == _MYSQL_COMMIT_FAILED:
            return any(marker in message for marker in _GALERA_CUT_OFF)
        return code in _MYSQL_GONE
    return False


def _is_integrity_error(exc: BaseException) -> bool:
    """SQLAlchemy's IntegrityError, or a driver's (PEP 249 names the class)."""
    return isinstance(exc, IntegrityError) or any(
        kind.__name__ == "IntegrityError" for kind in type(exc).__mro__)


def classify(exc: BaseException) -> DriverError | None:
    """What ``exc`` means: SQLAlchemy's ``DBAPIError`` or the driver's own exception.

    None when it means nothing this module knows (or is no database error).
    """
    if isinstance(exc, DBAPIError):
        orig: BaseException | None = exc.orig
        if exc.connection_invalidated:
            return Disconnect(exc)
    else:
        orig = exc
    if orig is None:
        return None
    if _lost_connection(orig):
        return Disconnect(exc)
    sqlstate = _sqlstate(orig)
    code, message = _mysql_code_and_message(orig)
    if sqlstate == guard.SQLSTATE or code == guard.MYSQL_ERRNO:
        refused = guard.REFUSED_ROW.search(str(orig))
        if refused:
            return CapacityGuardRefusal(exc, int(refused.group(1)), int(refused.group(2)))
    text = str(orig).lower()
    if _is_integrity_error(exc):
        # A duplicate key or nothing: other integrity errors (a foreign key)
        # are no race, whatever their words.
        return DuplicateKey(exc) if any(word in text for word in _DUPLICATE_WORDS) else None
    if sqlstate == _PG_LOCK_NOT_AVAILABLE or code == _MYSQL_LOCK_WAIT_TIMEOUT:
        return LockWaitTimeout(exc)
    if sqlstate in _PG_LOST_RACE or code == _MYSQL_DEADLOCK:
        return LostRace(exc)
    if code == _MYSQL_NOWAIT_REFUSED:
        return LockNotGranted(exc)
    if code == _MYSQL_PARSE_ERROR:
        broken = _BROKEN_TRIGGER_TEXT.match(message)
        if broken:
            return BrokenTrigger(exc, broken.group(1) or "")
    if any(phrase in text for phrase in _LOST_RACE_WORDS):
        return LostRace(exc)
    return None


# Where the classification of an error is kept (``install``, ``meaning``).
_MEANING = "_allotment_meaning"
_UNSEEN = object()


def meaning(exc: BaseException | None) -> DriverError | None:
    """The typed error ``exc`` (a database error) stands for; None if it means nothing known.

    The engine hook's classification, or ``classify``'s now for an error that
    did not pass through an engine (then kept on it too).
    """
    if exc is None:
        return None
    known = getattr(exc, _MEANING, _UNSEEN)
    if known is _UNSEEN:
        known = classify(exc)
        _remember(exc, known)
    assert known is None or isinstance(known, DriverError)
    return known


def _remember(exc: BaseException, classified: DriverError | None) -> None:
    # An exception type with __slots__ keeps nothing: classify again next time.
    with contextlib.suppress(AttributeError):
        setattr(exc, _MEANING, classified)


def driver_exception(exc: DBAPIError) -> BaseException | None:
    """What the driver raised under SQLAlchemy's ``exc`` (for log lines)."""
    return exc.orig


def driver_message(exc: BaseException) -> str:
    """What the driver said, as its client shows it (PyMySQL's "ERROR number: message")."""
    orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
    args: tuple = getattr(orig, "args", ())
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
        return f"ERROR {args[0]}: {args[1]}"
    text = str(orig).split(" (Background on this error at:")[0]
    return text if text.strip() else type(orig).__name__


def install(engine: Engine) -> None:
    """Classify every error of ``engine`` as SQLAlchemy raises it (see the module docstring).

    Set before any other ``handle_error`` listener: those that follow (the
    metrics' count) see the disconnects this one tells SQLAlchemy about.
    """
    @event.listens_for(engine, "handle_error")
    def _classify(context: sa.engine.ExceptionContext) -> None:
        raised = context.sqlalchemy_exception
        classified = classify(raised if raised is not None else context.original_exception)
        if isinstance(classified, Disconnect) and not context.is_disconnect:
            context.is_disconnect = True
        if raised is not None:
            _remember(raised, classified)


def one_line(exc: BaseException) -> str:
    """An error as a command shows it: one line, the driver's words for a database
    error (no SQL, no traceback)."""
    lines = driver_message(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
