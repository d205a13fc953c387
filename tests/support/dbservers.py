"""Private database servers for fault tests: a PostgreSQL cluster and a MariaDB server.

Each lives in a temporary directory of its own (data, socket, log), listens on
a free loopback port, and can be stopped and started again at will, which the
shared servers on 5432 and 3306 must never be. ``PostgresServer.create()`` /
``MariaDBServer.create()`` return None when the binaries are not installed
(``missing`` says what was looked for).

As root, PostgreSQL runs as the ``postgres`` user (it refuses root); MariaDB
runs as root (``--user=root``). Both are tuned to start fast and are otherwise
real servers: grant tables, TCP, authentication (trust / empty root password).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

import psycopg
import pymysql

from tests.support.needs import require

PG_BIN = Path(os.environ.get("ALLOTMENT_TEST_PG_BIN", "/usr/lib/postgresql/15/bin"))
MARIADBD = Path("/usr/sbin/mariadbd")
MARIADB_INSTALL_DB = Path("/usr/bin/mariadb-install-db")


_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A free loopback port below the kernel's ephemeral range.

    A server may bind its port long after it was chosen (a Galera node binds its
    IST and SST ports only when it joins). A port from the ephemeral range (what
    binding port 0 gives) may meanwhile become the local end of any outgoing
    connection, and the bind then fails with "Address already in use"; below
    that range the kernel never hands a port out by itself.
    """
    low, _ = _ephemeral_range()
    candidates = list(range(max(1024, low - 16000), low))
    random.SystemRandom().shuffle(candidates)
    for port in candidates:
        if port in _HANDED_OUT:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free loopback port below the ephemeral range")


def _missing(paths: list[Path]) -> str | None:
    absent = [str(path) for path in paths if not path.exists()]
    return f"not installed: {', '.join(absent)}" if absent else None


class _Server:
    """A server process on a private data directory; ``start``/``stop`` as often as needed."""

    backend = ""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = base / "server.log"

    # --- what each kind of server says -------------------------------------
    def _command(self) -> list[str]:
        raise NotImplementedError

    def _popen_user(self) -> dict:
        return {}

    def _connect(self) -> None:
        """One connection attempt (raises when the server does not accept it)."""
        raise NotImplementedError

    def url(self, database: str) -> str:
        raise NotImplementedError

    def create_database(self, name: str) -> str:
        raise NotImplementedError

    # --- life cycle ------------------------------------------------------------
    def accepts_connections(self) -> bool:
        try:
            self._connect()
        except Exception:
            return False
        return True

    def start(self, timeout: float = 60.0) -> float:
        """Start the server; return the monotonic time it first accepted a connection."""
        assert self.process is None or self.process.poll() is not None, "already running"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self._command(), stdout=log,
                                            stderr=subprocess.STDOUT, **self._popen_user())
        deadline = time.monotonic() + timeout
        while not self.accepts_connections():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"private {self.backend} server did not start:\n"
                                   + self.log_path.read_text(errors="replace")[-3000:])
            time.sleep(0.02)
        return time.monotonic()

    def stop(self, timeout: float = 60.0) -> None:
        """Shut the server down as an operator's restart does (clients are disconnected)."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(self._stop_signal)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    _stop_signal = signal.SIGTERM

    def restart(self) -> float:
        self.stop()
        return self.start()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.base, ignore_errors=True)


class PostgresServer(_Server):
    backend = "postgresql"
    # SIGINT is PostgreSQL's "fast" shutdown: sessions are ended (SQLSTATE 57P01),
    # open transactions rolled back. SIGTERM ("smart") would wait for the pool.
    _stop_signal = signal.SIGINT

    @staticmethod
    def missing() -> str | None:
        return _missing([PG_BIN / "initdb", PG_BIN / "postgres"])

    @classmethod
    def create(cls) -> PostgresServer | None:
        if cls.missing():
            return None
        server = cls(Path(tempfile.mkdtemp(prefix="allotment-pg-")))
        server.data = server.base / "data"
        server.sockets = server.base / "sockets"
        server.sockets.mkdir()
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            for path in (server.base, server.sockets):
                os.chown(path, owner.pw_uid, owner.pw_gid)
        result = subprocess.run([str(PG_BIN / "initdb"), "-D", str(server.data), "-U",
                                 "postgres", "-A", "trust", "--no-sync", "-E", "UTF8"],
                                capture_output=True, **server._popen_user())
        if result.returncode != 0:
            server.remove()
            raise RuntimeError("initdb failed:\n" + result.stdout.decode(errors="replace")
                               + result.stderr.decode(errors="replace"))
        return server

    data: Path
    sockets: Path

    def _popen_user(self) -> dict:
        return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}

    def _command(self) -> list[str]:
        return [str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                "-k", str(self.sockets), "-c", "listen_addresses=127.0.0.1",
                "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "shared_buffers=16MB",
                "-c", "max_connections=100", "-c", "logging_collector=off"]

    def _connect(self) -> None:
        psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                        dbname="postgres", connect_timeout=2).close()

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        with psycopg.connect(host="127.0.0.1", port=self.port, user="postgres",
                             dbname="postgres", autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.url(name)


class MariaDBServer(_Server):
    backend = "mysql"
    # The loopback address it listens on (a Galera node of the fault campaign has one
    # of its own, so that packet filter rules can tell the nodes apart).
    host = "127.0.0.1"
    # SIGTERM is MariaDB's normal shutdown: connections are killed, transactions
    # rolled back.
    _stop_signal = signal.SIGTERM

    @staticmethod
    def missing() -> str | None:
        return _missing([MARIADBD, MARIADB_INSTALL_DB])

    @classmethod
    def create(cls) -> MariaDBServer | None:
        if cls.missing():
            return None
        server = cls(Path(tempfile.mkdtemp(prefix="allotment-mariadb-")))
        server.data = server.base / "data"
        server.socket_path = server.base / "mariadb.sock"
        server.install_data_dir()
        return server

    def install_data_dir(self) -> None:
        """``mariadb-install-db`` into ``self.data``; on failure, removed and raised."""
        result = subprocess.run(
            [str(MARIADB_INSTALL_DB), "--no-defaults", f"--datadir={self.data}",
             f"--user={self._user()}", "--auth-root-authentication-method=normal",
             "--skip-test-db", "--skip-name-resolve", "--innodb-buffer-pool-size=16M"],
            capture_output=True)
        if result.returncode != 0:
            self.remove()
            raise RuntimeError("mariadb-install-db failed:\n"
                               + result.stdout.decode(errors="replace")
                               + result.stderr.decode(errors="replace"))

    data: Path
    socket_path: Path

    @staticmethod
    def _user() -> str:
        return "root" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name

    def _command(self) -> list[str]:
        return [str(MARIADBD), "--no-defaults", f"--datadir={self.data}",
                f"--socket={self.socket_path}", f"--port={self.port}",
                f"--bind-address={self.host}", "--skip-networking=0", f"--user={self._user()}",
                f"--pid-file={self.base / 'mariadb.pid'}", "--skip-name-resolve",
                "--skip-log-bin", "--innodb-buffer-pool-size=16M",
                "--innodb-log-file-size=8M", "--innodb-flush-log-at-trx-commit=0",
                "--innodb-doublewrite=0", "--performance-schema=0", "--max-connections=200"]

    def _connect(self) -> None:
        pymysql.connect(host=self.host, port=self.port, user="root", password="",
                        connect_timeout=2, read_timeout=2).close()

    def url(self, database: str) -> str:
        return f"mysql+pymysql://root@{self.host}:{self.port}/{database}"

    def execute(self, statement: str) -> None:
        """One statement as root, on a connection of its own."""
        conn = pymysql.connect(host=self.host, port=self.port, user="root", password="")
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement)
        finally:
            conn.close()

    def create_database(self, name: str) -> str:
        self.execute(f"CREATE DATABASE {name} CHARACTER SET utf8mb4")
        return self.url(name)


SERVERS: dict[str, type[PostgresServer] | type[MariaDBServer]] = {
    "postgresql": PostgresServer,
    "mysql": MariaDBServer,
}


ServerT = TypeVar("ServerT", "PostgresServer", "MariaDBServer")


@contextlib.contextmanager
def started(kind: type[ServerT], label: str) -> Iterator[ServerT]:
    """A new private server of ``kind``, started, removed afterwards; the test is
    skipped when its binaries are not installed (fails in CI)."""
    require(kind.missing(), f"no private {label} server")
    server = kind.create()
    assert server is not None
    try:
        server.start()
        yield server
    finally:
        server.remove()


def call(base_url: str, method: str, path: str, body: object | None = None,
         timeout: float = 10.0) -> tuple[int, dict[str, str], object | None]:
    """One request to a live ``allotment serve`` as admin at the latest microversion:
    status, headers (lower-case names) and the JSON body (None if there is none)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base_url + path, data=data, method=method, headers={
        "X-Auth-Token": "admin", "OpenStack-API-Version": "placement latest",
        "Accept": "application/json", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, headers, raw = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, headers, raw = error.code, error.headers, error.read()
    return (status, {name.lower(): value for name, value in headers.items()},
            json.loads(raw) if raw else None)
