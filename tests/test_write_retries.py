"""Writes that lose a race at the database level run again in a new transaction.

MySQL/MariaDB answer concurrent inserts into the same index range with
deadlocks (error 1213) that kill the whole transaction; PostgreSQL has its
own deadlock and serialization errors. Such a loss must never reach a client
as a 500: the write is run again from the top, and only when it keeps losing
does the client get 409 ``placement.concurrent_update``.
"""

from __future__ import annotations

import threading
import time
from typing import NoReturn

import pymysql
import pytest
import sqlalchemy as sa

from allotment.db import tables as t
from allotment.db.writer import NO_REQUEST
from allotment.http.errors import refusal
from allotment.ledger import resource_classes, retry
from allotment.ledger.errors import ResourceClassExists
from tests.support.threads import race


def _failed_savepoint_over(error: sa.exc.DBAPIError) -> NoReturn:
    """What MySQL surfaces when a transaction dies inside a savepoint: the failed
    ROLLBACK TO SAVEPOINT, raised while handling ``error`` (its __context__ only)."""
    try:
        raise error
    except sa.exc.DBAPIError:
        raise sa.exc.OperationalError(  # noqa: B904
            "ROLLBACK TO SAVEPOINT sa_savepoint_1", {},
            pymysql.err.OperationalError(1305, "SAVEPOINT does not exist"))


def _deadlock() -> sa.exc.OperationalError:
    return sa.exc.OperationalError(
        "INSERT INTO resource_classes ...", {},
        pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"))


def _custom_class_names(database) -> list[str]:
    with database.engine.connect() as conn:
        return sorted(conn.execute(sa.select(t.resource_classes.c.name)
                                   .where(t.resource_classes.c.id >= 10000)).scalars())


def test_a_deadlocked_attempt_is_rolled_back_and_run_again(database):
    calls = []
    for attempt in retry.attempts(database.db):
        with attempt as conn:
            calls.append(1)
            resource_classes.create(conn, "CUSTOM_ONCE")
            if len(calls) == 1:
                raise _deadlock()
    assert len(calls) == 2
    assert _custom_class_names(database) == ["CUSTOM_ONCE"]


def test_a_deadlock_behind_a_failed_savepoint_rollback_counts_as_lost(database):
    # What MySQL shows when the deadlock happens inside a savepoint: the
    # rollback to the savepoint fails because the transaction is gone.
    calls = []
    for attempt in retry.attempts(database.db):
        with attempt as conn:
            calls.append(1)
            if len(calls) == 1:
                _failed_savepoint_over(_deadlock())
            resource_classes.create(conn, "CUSTOM_AFTER")
    assert len(calls) == 2
    assert _custom_class_names(database) == ["CUSTOM_AFTER"]


def test_other_errors_end_the_loop_at_once_and_write_nothing(database):
    calls = []
    with pytest.raises(ValueError):
        for attempt in retry.attempts(database.db):
            with attempt as conn:
                calls.append(1)
                resource_classes.create(conn, "CUSTOM_NEVER")
                raise ValueError("not a race")
    assert len(calls) == 1
    assert _custom_class_names(database) == []


def test_a_domain_error_raised_over_a_duplicate_key_is_not_retried(database):
    # The ledger turns some duplicates into answers (409 "already exists");
    # those must reach the client as they are, not be retried.
    calls = []
    with pytest.raises(ResourceClassExists):
        for attempt in retry.attempts(database.db):
            with attempt:
                calls.append(1)
                try:
                    raise sa.exc.IntegrityError(
                        "INSERT ...", {}, pymysql.err.IntegrityError(1062, "Duplicate entry"))
                except sa.exc.IntegrityError:
                    raise ResourceClassExists("taken") from None
    assert len(calls) == 1


def test_losing_every_attempt_raises_concurrent_update(database):
    calls = []
    with pytest.raises(retry.RetriesExhausted) as caught:
        for attempt in retry.attempts(database.db, retries=2):
            with attempt:
                calls.append(1)
                raise _deadlock()
    assert len(calls) == 3
    assert refusal(caught.value).status == 409
    assert refusal(caught.value).code == "placement.concurrent_update"


def _deadlock_first_calls(monkeypatch, count: int) -> list[int]:
    """Make ``resource_classes.create`` write, then deadlock, ``count`` times."""
    original = resource_classes.create
    calls: list[int] = []

    def create(conn, name):
        calls.append(1)
        created = original(conn, name)
        if len(calls) <= count:
            raise _deadlock()
        return created

    monkeypatch.setattr(resource_classes, "create", create)
    return calls


def test_http_write_that_deadlocks_once_succeeds(client, database, monkeypatch):
    calls = _deadlock_first_calls(monkeypatch, 1)
    resp = client.post("/resource_classes", {"name": "CUSTOM_HTTP"}, version="1.2")
    assert resp.status == 201
    assert len(calls) == 2
    assert _custom_class_names(database) == ["CUSTOM_HTTP"]
    # The same for the 1.7 create-by-PUT path.
    resp = client.put("/resource_classes/CUSTOM_PUT", version="1.7")
    assert resp.status == 201


def test_http_write_that_keeps_deadlocking_gets_409_not_500(client, database, monkeypatch):
    _deadlock_first_calls(monkeypatch, 1000)
    resp = client.post("/resource_classes", {"name": "CUSTOM_HTTP"}, version="1.23")
    assert resp.status == 409
    assert resp.error_code == "placement.concurrent_update"
    assert _custom_class_names(database) == []


def test_concurrent_creates_of_custom_classes_all_succeed(client, database):
    # Several rounds of simultaneous creates: on MariaDB these deadlock now
    # and then, which used to surface as a 500.
    for round_ in range(5):
        statuses = race(6, lambda n, r=round_: client.post(
            "/resource_classes", {"name": f"CUSTOM_R{r}_{n}"}, version="1.2").status)
        assert statuses == [201] * 6
    assert len(_custom_class_names(database)) == 30


class _CommitLosesOnce:
    """A Database whose first write transaction loses at COMMIT (as Galera's
    certification failures do: error 1213 when committing, the work rolled back)."""

    def __init__(self, db) -> None:
        self._db = db
        self.lost = 0

    def write(self, ids=NO_REQUEST):
        import contextlib

        @contextlib.contextmanager
        def transaction():
            with self._db.write(ids) as conn:
                yield conn
                if not self.lost:
                    self.lost += 1
                    raise _deadlock()  # rolls the real transaction back
        return transaction()


def test_run_write_answers_only_after_its_commit_held(database):
    # A write whose commit loses must run again, not return the first
    # attempt's result for a rolled-back transaction (a lost claim).
    db = _CommitLosesOnce(database.db)
    calls = []

    def work(conn):
        calls.append(1)
        resource_classes.create(conn, "CUSTOM_COMMITTED")
        return len(calls)

    assert retry.run_write(db, work) == 2
    assert db.lost == 1
    assert _custom_class_names(database) == ["CUSTOM_COMMITTED"]


def _broken_trigger() -> sa.exc.ProgrammingError:
    # What MariaDB on Galera answered for a few statements after a table
    # instance was opened by a transaction aborted meanwhile.
    return sa.exc.ProgrammingError(
        "INSERT INTO allocations ...", {},
        pymysql.err.ProgrammingError(
            1064, "Trigger 'allotment_log_allocations_update' has an error in its body: "
                  "'You have an error in your SQL syntax; ... near '; END IF' at line 1'"))


def test_a_trigger_the_server_failed_to_parse_is_retried(database, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    calls = []
    # Not counted as lost races: even with no race retries allowed.
    for attempt in retry.attempts(database.db, retries=0):
        with attempt as conn:
            calls.append(1)
            resource_classes.create(conn, "CUSTOM_AFTER_BROKEN")
            if len(calls) <= 2:
                raise _broken_trigger()
    assert len(calls) == 3
    assert slept == [0.02, 0.04]
    assert _custom_class_names(database) == ["CUSTOM_AFTER_BROKEN"]


def test_a_trigger_broken_on_every_attempt_is_raised_as_it_is(database, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(retry.time, "sleep", slept.append)
    calls = []
    with pytest.raises(sa.exc.ProgrammingError, match="has an error in its body"):
        for attempt in retry.attempts(database.db, retries=2):
            with attempt as conn:
                calls.append(1)
                resource_classes.create(conn, "CUSTOM_NEVER")
                raise _broken_trigger()
    assert len(calls) == retry.BROKEN_TRIGGER_RETRIES + 1
    assert 0.8 < sum(slept) < 1.5
    assert _custom_class_names(database) == []


def test_a_plain_syntax_error_is_not_retried(database):
    calls = []
    with pytest.raises(sa.exc.ProgrammingError):
        for attempt in retry.attempts(database.db):
            with attempt:
                calls.append(1)
                raise sa.exc.ProgrammingError("SELEC 1", {}, pymysql.err.ProgrammingError(
                    1064, "You have an error in your SQL syntax; near 'SELEC 1'"))
    assert calls == [1]


@pytest.mark.parametrize(("text", "name"), [
    ("Trigger 'allotment_guard_delete' has an error in its body: 'You have an error ...'",
     "allotment_guard_delete"),
    ("Unknown trigger has an error in its body: 'Query was empty'", ""),
    ("You have an error in your SQL syntax; near 'Trigger'", None),
])
def test_which_trigger_the_server_failed_to_parse(text, name):
    error = sa.exc.ProgrammingError("INSERT ...", {}, pymysql.err.ProgrammingError(1064, text))
    assert retry.broken_trigger(error) == name
    other = sa.exc.ProgrammingError("INSERT ...", {}, pymysql.err.ProgrammingError(1146, text))
    assert retry.broken_trigger(other) is None


def test_a_broken_trigger_behind_a_failed_savepoint_rollback_is_reopened(database, monkeypatch):
    monkeypatch.setattr(retry.time, "sleep", lambda _seconds: None)
    reopened: list[str | None] = []
    monkeypatch.setattr(database.db, "reopen_tables_of_trigger",
                        lambda name: reopened.append(name) or [])
    calls = []
    for attempt in retry.attempts(database.db, retries=0):
        with attempt:
            calls.append(1)
            if len(calls) == 1:
                _failed_savepoint_over(_broken_trigger())
    assert len(calls) == 2
    assert reopened == ["allotment_log_allocations_update"]


# How long the watcher below waits between two looks at MariaDB's
# information_schema.innodb_trx. InnoDB fills that table from a cache that it
# refreshes only when nobody has read it for 0.1 s (trx0i_s.cc,
# CACHE_MIN_IDLE_TIME_US): a watcher looking every 10 ms kept reading the
# snapshot of its first look, taken before the blocker began to wait, and saw
# no lock wait for 30 s while the blocker had been waiting all along (its
# session "Updating" for 30 s in the processlist). Whether the first look came
# before the wait depended on the machine's load: the test failed only in
# full CI runs, and at once when a checkout no longer paid for a ping.
LOCK_WAIT_POLL = 0.15


def _waiting_for_a_lock(database, conn: sa.Connection) -> bool:
    """True while a transaction other than ``conn``'s waits for a row lock
    (on MariaDB as of up to 0.1 s ago; look at most every ``LOCK_WAIT_POLL``)."""
    if database.backend == "postgresql":
        return bool(conn.exec_driver_sql(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND pid <> pg_backend_pid() AND datname = current_database()").scalar())
    return bool(conn.exec_driver_sql(
        "SELECT count(*) FROM information_schema.innodb_trx"
        " WHERE trx_state = 'LOCK WAIT'").scalar())


def _sessions(database, conn: sa.Connection) -> list[tuple]:
    """What every session of the test's database is doing, for a failure's message."""
    if database.backend == "postgresql":
        query = ("SELECT pid, state, wait_event_type, wait_event, left(query, 120)"
                 " FROM pg_stat_activity WHERE datname = current_database()")
    else:
        query = ("SELECT p.id, p.command, p.time, p.state, left(p.info, 120), t.trx_state,"
                 " t.trx_isolation_level, t.trx_rows_locked, left(t.trx_query, 120)"
                 " FROM information_schema.processlist p LEFT JOIN"
                 " information_schema.innodb_trx t ON t.trx_mysql_thread_id = p.id"
                 " WHERE p.db = DATABASE()")
    return [tuple(row) for row in conn.exec_driver_sql(query)]


def _session_of(database, conn: sa.Connection) -> tuple:
    """The server's id of ``conn``'s session, and whether it commits each statement."""
    if database.backend == "postgresql":
        return tuple(conn.exec_driver_sql("SELECT pg_backend_pid(), 'off'").one())
    return tuple(conn.exec_driver_sql("SELECT CONNECTION_ID(), @@autocommit").one())


def test_a_real_deadlock_inside_a_savepoint_is_run_again(database):
    # The real thing rather than a constructed exception: the chain SQLAlchemy
    # builds when MySQL kills a transaction inside a savepoint (the failed
    # ROLLBACK TO SAVEPOINT raised from the driver's error, which was raised
    # while handling the deadlock) is not the one a test writes by hand.
    if database.backend == "sqlite":
        pytest.skip("SQLite has one writer at a time: no deadlock")
    classes = t.resource_classes
    with database.engine.begin() as conn:
        for name in ("CUSTOM_FIRST", "CUSTOM_SECOND", *(f"CUSTOM_BULK{n}" for n in range(6))):
            resource_classes.create(conn, name)
        ids = dict(conn.execute(sa.select(classes.c.name, classes.c.id)).all())

    def lock(conn: sa.Connection, *names: str) -> None:
        # One row at a time by its primary key: exactly the rows named are
        # locked, whatever the plan. InnoDB runs the seven names' IN list as a
        # scan of the whole primary key; under READ COMMITTED it keeps only the
        # matching rows' locks, but a transaction under REPEATABLE READ keeps
        # every row's it read. The attempt's first update would then wait for
        # the blocker, which waits for it: the hang, then the bounded failure,
        # that CI showed twice.
        for name in names:
            conn.execute(classes.update().where(classes.c.id == ids[name])
                         .values(updated_at=sa.func.now()))

    second_locked = threading.Event()
    blocker_errors: list[BaseException] = []
    sessions: dict[str, tuple] = {}

    def blocker() -> None:
        # Heavier than the attempt (seven rows changed against one) so that
        # InnoDB chooses the attempt as the deadlock's victim; PostgreSQL
        # chooses the session whose deadlock_timeout finds the cycle first:
        # the attempt's, far shorter.
        try:
            with database.engine.connect() as conn, conn.begin():
                if database.backend == "postgresql":
                    conn.exec_driver_sql("SET LOCAL deadlock_timeout = '20s'")
                sessions["blocker"] = _session_of(database, conn)
                lock(conn, "CUSTOM_FIRST", *(f"CUSTOM_BULK{n}" for n in range(6)))
                first_locked.set()
                assert second_locked.wait(30)
                lock(conn, "CUSTOM_SECOND")  # waits for the attempt
        except BaseException as exc:  # reported by the test's assertion
            blocker_errors.append(exc)

    first_locked = threading.Event()
    thread = threading.Thread(target=blocker, daemon=True)
    calls = 0
    for attempt in retry.attempts(database.db):
        with attempt as conn:
            calls += 1
            if calls == 1:
                if database.backend == "postgresql":
                    conn.exec_driver_sql("SET LOCAL deadlock_timeout = '100ms'")
                sessions["attempt"] = _session_of(database, conn)
                thread.start()
                assert first_locked.wait(30)
                with conn.begin_nested():
                    lock(conn, "CUSTOM_SECOND")
                    second_locked.set()
                    deadline = time.monotonic() + 30
                    with database.engine.connect() as watcher:
                        while not _waiting_for_a_lock(database, watcher):
                            # Bounded: a blocker that failed never waits.
                            assert time.monotonic() < deadline, (
                                f"blocker errors {blocker_errors}, blocker alive "
                                f"{thread.is_alive()}, sessions {sessions}, "
                                f"server {_sessions(database, watcher)}")
                            time.sleep(LOCK_WAIT_POLL)
                    lock(conn, "CUSTOM_FIRST")  # closes the cycle
            else:
                thread.join(30)
                resource_classes.create(conn, "CUSTOM_AFTER_DEADLOCK")
    assert blocker_errors == []
    assert calls == 2
    assert "CUSTOM_AFTER_DEADLOCK" in _custom_class_names(database)
