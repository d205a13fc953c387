"""A database that goes away and comes back: 503 meanwhile, service again within a second.

Each backend gets a private server (``tests.support.dbservers``: its own data
directory, loopback port and socket), which these tests stop and start at
will; the shared servers on 5432/3306 are never touched. A live ``allotment
serve`` (2 workers) runs on it while it is stopped and started again:

- every request meanwhile, read or write, gets 503 with ``Retry-After`` and
  the Placement error body; none ever gets a 500, not even while the server
  shuts down or starts up;
- a write refused that way left nothing behind, and so does one whose
  connection is cut in the middle of its transaction (it is not retried,
  and it is no 409);
- within a second of the database accepting connections, answers are normal
  again (the pooled connections, all dead, are replaced);
- each worker logs one line when the database goes and one when it is back,
  and no traceback;
- ``allotment serve`` started with the database down says so in one line and
  waits, within ``[placement_database] max_retries`` and ``retry_interval``.

Select with ``-m faults``; they run by default (about a minute).
"""

from __future__ import annotations

import itertools
import logging
import re
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pymysql
import pytest
import sqlalchemy as sa

from allotment.db import availability
from allotment.db.availability import DatabaseUnavailable, is_disconnect
from allotment.db.engine import Database, create_engine
from allotment.ledger import retry
from tests.clients import live
from tests.support.dbservers import SERVERS, PostgresServer, call, free_port, started

pytestmark = pytest.mark.faults

GONE = re.compile(r"Database \S+ unavailable, answering 503")
BACK = re.compile(r"Database \S+ is back after [0-9.]+ s; [0-9]+ requests were refused")
WAITING = "waiting for the database"
# oslo.log's line: date, time, process id, level, ...
LOG_PID = re.compile(r"^\S+ \S+ (\d+) ")


def _outage_events(log: str) -> dict[str, list[str]]:
    """Per worker process, its 'gone' and 'back' log lines in order."""
    events: dict[str, list[str]] = {}
    for line in log.splitlines():
        kind = "gone" if GONE.search(line) else "back" if BACK.search(line) else None
        pid = LOG_PID.match(line)
        if kind is not None and pid is not None:
            events.setdefault(pid.group(1), []).append(kind)
    return events


@pytest.fixture(scope="module", params=sorted(SERVERS))
def private_server(request: pytest.FixtureRequest) -> Iterator[PostgresServer]:
    with started(SERVERS[request.param], request.param) as server:
        yield server  # type: ignore[misc]


@pytest.fixture
def running(private_server):
    """The private server, started again if a test left it stopped."""
    if not private_server.accepts_connections():
        private_server.start()
    return private_server


def _database(server) -> str:
    return server.create_database(f"outage_{uuid.uuid4().hex[:10]}")


# --- what counts as the database being gone ---------------------------------

def _wrapped(orig: BaseException) -> sa.exc.DBAPIError:
    return sa.exc.DBAPIError.instance("SELECT 1", {}, orig, type(orig).__mro__[1])


@pytest.mark.parametrize("orig, gone", [
    (pymysql.err.OperationalError(2003, "Can't connect to MySQL server"), True),
    (pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query"), True),
    (pymysql.err.OperationalError(1053, "Server shutdown in progress"), True),
    (pymysql.err.OperationalError(1927, "Connection was killed"), True),
    (pymysql.err.OperationalError(1180, "Error while appending streaming replication fragment"
                                        "(provider status: Not connected to Primary Component)"),
     True),
    (pymysql.err.OperationalError(1180, "Got error 28 \"No space left on device\" during "
                                        "COMMIT"), False),
    (pymysql.err.InterfaceError(0, ""), True),
    (pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock"), False),
    (pymysql.err.OperationalError(1205, "Lock wait timeout exceeded"), False),
    (pymysql.err.IntegrityError(1062, "Duplicate entry"), False),
    (pymysql.err.OperationalError(1049, "Unknown database 'x'"), False),
    (pymysql.err.OperationalError(1045, "Access denied for user 'placement'"), False),
    (psycopg.OperationalError("connection failed: Connection refused"), True),
    (psycopg.OperationalError('connection failed: FATAL:  the database system is shutting '
                              'down'), True),
    (psycopg.OperationalError('connection failed: FATAL:  database "x" does not exist'),
     False),
    (psycopg.OperationalError('connection failed: FATAL:  password authentication failed '
                              'for user "placement"'), False),
    (psycopg.errors.AdminShutdown("terminating connection"), True),
    (psycopg.errors.CannotConnectNow("the database system is starting up"), True),
    (psycopg.errors.DeadlockDetected("deadlock detected"), False),
    (psycopg.errors.SerializationFailure("could not serialize"), False),
    (psycopg.errors.LockNotAvailable("could not obtain lock"), False),
    (psycopg.errors.UniqueViolation("duplicate key"), False),
])
def test_only_connection_failures_count_as_the_database_gone(orig, gone):
    assert is_disconnect(_wrapped(orig)) is gone


def test_a_pool_timeout_counts_as_the_database_gone():
    assert is_disconnect(sa.exc.TimeoutError("QueuePool limit of size 1 overflow 0 reached"))


# --- a connection cut in the middle of a write ----------------------------------

def _kill_own_session(server, conn: sa.Connection) -> None:
    """End the session of ``conn`` from another connection, as a restart would."""
    if server.backend == "postgresql":
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with psycopg.connect(host="127.0.0.1", port=server.port, user="postgres",
                             dbname="postgres", autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    else:
        thread_id = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
        server.execute(f"KILL {int(thread_id)}")


def test_a_write_cut_off_midway_changed_nothing_and_is_not_retried(running, caplog):
    db = Database(create_engine(_database(running), pool_size=2))
    try:
        with db.write() as conn:
            conn.exec_driver_sql("CREATE TABLE probe (id INTEGER PRIMARY KEY)")
        calls = []

        def work(conn: sa.Connection) -> None:
            calls.append(1)
            conn.exec_driver_sql("INSERT INTO probe (id) VALUES (1)")
            _kill_own_session(running, conn)
            conn.exec_driver_sql("INSERT INTO probe (id) VALUES (2)")

        with caplog.at_level(logging.WARNING, logger=availability.__name__):
            with pytest.raises(DatabaseUnavailable):
                retry.run_write(db, work)
            assert calls == [1]  # not run again: no race, and no 409 either
            # The pool hands out working connections at once, and nothing was written.
            with db.read() as conn:
                assert conn.exec_driver_sql("SELECT COUNT(*) FROM probe").scalar() == 0
        messages = [record.getMessage() for record in caplog.records]
        assert [bool(GONE.search(m)) for m in messages] == [True, False], messages
        assert BACK.search(messages[1]) and "1 requests were refused" in messages[1]
    finally:
        db.dispose()


def test_a_statement_error_is_still_what_it_was(running):
    db = Database(create_engine(_database(running)))
    try:
        with pytest.raises(sa.exc.ProgrammingError), db.read() as conn:
            conn.exec_driver_sql("SELECT * FROM no_such_table")
        assert not db.outage.ongoing
    finally:
        db.dispose()


# --- a live server through a database restart -------------------------------------

class Load:
    """Reads and writes in a loop from threads, across the restart; every status seen.

    Two threads read (GET /resource_providers); one creates providers named
    ``load-N`` and notes which of them were answered 200 and which 503.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.statuses: list[int] = []
        self.created: set[str] = set()
        self.refused: set[str] = set()
        self._stop = threading.Event()
        self._answered = threading.Condition()
        self._threads = [threading.Thread(target=self._read, daemon=True) for _ in range(2)]
        self._threads.append(threading.Thread(target=self._write, daemon=True))

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=30)

    def wait_until(self, condition: Callable[[], bool], within: float = 10) -> None:
        """Until ``condition`` holds of what the load has seen (checked at each answer)."""
        with self._answered:
            assert self._answered.wait_for(condition, timeout=within), (
                self.statuses, self.created)

    def _note(self, status: int, name: str | None = None) -> None:
        with self._answered:
            self.statuses.append(status)
            if name is not None:
                (self.created if status == 200 else self.refused).add(name)
            self._answered.notify_all()

    def _read(self) -> None:
        while not self._stop.is_set():
            self._note(call(self.url, "GET", "/resource_providers")[0])
            time.sleep(0.005)

    def _write(self) -> None:
        number = 0
        while not self._stop.is_set():
            number += 1
            name = f"load-{number}"
            self._note(call(self.url, "POST", "/resource_providers", {"name": name})[0], name)
            time.sleep(0.005)


def _assert_unavailable(answer: tuple[int, dict[str, str], object]) -> None:
    status, headers, body = answer
    assert status == 503, answer
    assert headers.get("retry-after", "").isdigit() and 0 < int(headers["retry-after"]) < 10
    assert isinstance(body, dict)
    (error,) = body["errors"]
    assert error["status"] == 503 and error["title"] == "Service Unavailable"
    assert error["code"] == "placement.undefined_code"
    assert error["request_id"].startswith("req-")
    assert "database is unavailable" in error["detail"]
    assert "OperationalError" not in error["detail"]


def test_requests_get_503_while_the_database_restarts_then_normal_answers(
        running, tmp_path: Path):
    server = live.start(tmp_path / "serve", database_url=_database(running))
    try:
        status, _, created = call(server.url, "POST", "/resource_providers",
                                  {"name": "before"})
        assert status == 200, created
        assert isinstance(created, dict)
        before = created["uuid"]
        with Load(server.url) as load:
            # Under way before the outage: reads and a write answered.
            load.wait_until(lambda: bool(load.created) and load.statuses.count(200) >= 3)
            running.stop()
            during = [
                call(server.url, "GET", "/resource_providers"),
                call(server.url, "GET", f"/resource_providers/{before}"),
                call(server.url, "GET", "/allocation_candidates?resources=VCPU:1"),
                call(server.url, "GET", "/usages?project_id=p"),
                call(server.url, "POST", "/resource_providers", {"name": "during"}),
                call(server.url, "PUT", f"/resource_providers/{before}/inventories",
                     {"resource_provider_generation": 0,
                      "inventories": {"VCPU": {"total": 8}}}),
                call(server.url, "DELETE", f"/resource_providers/{before}"),
            ]
            during += [call(server.url, "GET", "/traits") for _ in range(10)]
            for answer in during:
                _assert_unavailable(answer)
            accepting = running.start()
            while call(server.url, "GET", "/resource_providers")[0] != 200:
                assert time.monotonic() - accepting < 1.0, "not answering 1 s after restart"
                time.sleep(0.02)
            recovered = time.monotonic() - accepting
            # And after it: a write of the load's answered again.
            created = len(load.created)
            load.wait_until(lambda: len(load.created) > created)
        assert recovered < 1.0
        # Every pooled connection of every worker was dead; all are replaced.
        after = [call(server.url, "GET", "/resource_providers")[0] for _ in range(20)]
        assert after == [200] * 20
        status, _, body = call(server.url, "POST", "/resource_providers", {"name": "after"})
        assert status == 200, body
        _, _, listing = call(server.url, "GET", "/resource_providers")
        assert isinstance(listing, dict)
        names = {p["name"] for p in listing["resource_providers"]}
        # Every write answered 200 is there; every one refused left nothing.
        assert names == {"after", "before"} | load.created, names
        assert load.refused and not load.refused & names
        _, _, inventories = call(server.url, "GET", f"/resource_providers/{before}/inventories")
        assert isinstance(inventories, dict) and inventories["inventories"] == {}
        assert set(load.statuses) <= {200, 503} and 503 in load.statuses, load.statuses
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    gone = [line for line in log.splitlines() if GONE.search(line)]
    # Each worker (2) that served a request during the outage said it was gone, then
    # back, in turn. More than once is possible: a server shutting down ends some
    # sessions while it still completes others' transactions, and a worker that sees
    # one complete is rightly back until the next one fails.
    events = _outage_events(log)
    assert 1 <= len(events) <= 2, log
    for worker, seen in events.items():
        assert seen[0] == "gone" and seen[-1] == "back", (worker, seen, log)
        assert all(a != b for a, b in itertools.pairwise(seen)), (worker, seen, log)
    assert "Traceback" not in log and "status: 500" not in log, log
    assert ":" + str(running.port) in gone[0]


def _retry_conf(workdir: Path, max_retries: int, retry_interval: int) -> Path:
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "retries.conf"
    path.write_text(f"[placement_database]\nmax_retries = {max_retries}\n"
                    f"retry_interval = {retry_interval}\n")
    return path


def test_serve_started_while_the_database_is_down_waits_then_serves(running, tmp_path):
    url = _database(running)
    running.stop()
    retries = _retry_conf(tmp_path, -1, 1)
    started: dict[str, object] = {}

    def start() -> None:
        try:
            started["server"] = live.start(tmp_path / "serve", database_url=url,
                                           extra_args=["--config-file", str(retries)])
        except Exception as exc:  # reported by the assertion below
            started["error"] = exc

    thread = threading.Thread(target=start)
    thread.start()
    log_path = tmp_path / "serve" / "server.log"
    deadline = time.monotonic() + 20
    while not (log_path.exists() and WAITING in log_path.read_text(errors="replace")):
        assert time.monotonic() < deadline and thread.is_alive(), started
        time.sleep(0.1)
    time.sleep(1.5)  # one more attempt or two, which must stay quiet
    running.start()
    thread.join(timeout=60)
    server = started.get("server")
    assert isinstance(server, live.LiveServer), started
    try:
        assert call(server.url, "GET", "/resource_providers")[0] == 200
    finally:
        server.stop()
    log = log_path.read_text(errors="replace")
    waiting = [line for line in log.splitlines() if WAITING in line]
    assert len(waiting) == 1, log
    assert ":" + str(running.port) in waiting[0] and "every 1 s, forever:" in waiting[0]
    assert "Traceback" not in log, log


@pytest.mark.parametrize("command", ["serve", "db upgrade"])
@pytest.mark.parametrize("backend", ["postgresql", "mysql"])
def test_startup_gives_up_after_max_retries_in_one_line(backend, command, tmp_path):
    # Nothing listens on the port: connection refused, as with a stopped server.
    port = free_port()
    url = (f"postgresql://postgres@127.0.0.1:{port}/placement" if backend == "postgresql"
           else f"mysql+pymysql://root@127.0.0.1:{port}/placement")
    retries = _retry_conf(tmp_path, 2, 1)
    started = time.monotonic()
    result = subprocess.run(
        live.ALLOTMENT + command.split() + ["--database-url", url, "--config-file",
                                            str(retries)]
        + (["--port", str(free_port()), "--workers", "1"] if command == "serve" else []),
        capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    output = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 1, output
    assert len(output) == 2, output
    assert WAITING in output[0] and "at most 2 times" in output[0]
    assert output[1].startswith("allotment: giving up: the database ")
    assert f":{port}/placement" in output[1] and "after 2 attempts" in output[1]
    assert 1.0 <= took < 15, took


def test_startup_does_not_wait_for_what_waiting_cannot_cure(running, tmp_path):
    # A database that does not exist will not appear by waiting.
    url = running.url("no_such_database")
    retries = _retry_conf(tmp_path, -1, 1)
    result = subprocess.run([*live.ALLOTMENT, "db", "upgrade", "--database-url", url,
                             "--config-file", str(retries)],
                            capture_output=True, text=True, timeout=60)
    output = (result.stdout + result.stderr).strip().splitlines()
    assert result.returncode == 1, output
    assert len(output) == 1 and output[0].startswith("allotment: cannot use the database")
    assert "no_such_database" in output[0], output

