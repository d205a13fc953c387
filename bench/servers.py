"""Starting and stopping the two servers under test, and their databases.

Both servers read the same kind of ``placement.conf`` (noauth2, schema synced on
start) pointing at a database of their own: a fresh SQLite file, or a fresh
PostgreSQL database created for the run and dropped afterwards. Both run the same
number of worker processes and threads: allotment under its own gunicorn-based
``allotment serve``, upstream under uwsgi, the way upstream documents it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from http_client import PlacementClient

UPSTREAM_PACKAGES = ["openstack-placement", "uwsgi", "psycopg2-binary", "PyMySQL"]

# Run with the allotment venv's Python, which has psycopg and PyMySQL: the harness
# itself needs no database driver.
_PG_ADMIN_SCRIPT = """
import sys, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as conn:
    for statement in sys.argv[2:]:
        conn.execute(statement)
"""
_MYSQL_ADMIN_SCRIPT = """
import sys, pymysql
from sqlalchemy.engine import make_url
url = make_url(sys.argv[1])
conn = pymysql.connect(host=url.host, port=url.port or 3306, user=url.username,
                       password=url.password or "", autocommit=True)
with conn.cursor() as cursor:
    for statement in sys.argv[2:]:
        cursor.execute(statement)
conn.close()
"""


@dataclass
class Database:
    """One fresh database for one server in one scenario."""

    url: str
    drop: list[str]  # how to get rid of it afterwards
    path: Path | None = None

    def url_for(self, impl: str) -> str:
        """The URL for one implementation: each names the driver it has installed.

        SQLAlchemy 2.1 reads a bare ``postgresql://`` as psycopg 3, which upstream's
        usual install (psycopg2) lacks; allotment maps any spelling to psycopg 3.
        """
        if impl == "upstream" and self.url.startswith("postgresql://"):
            return "postgresql+psycopg2://" + self.url.removeprefix("postgresql://")
        if self.url.startswith("mysql://"):
            return "mysql+pymysql://" + self.url.removeprefix("mysql://")
        return self.url


class DatabaseFactory:
    """Creates fresh per-server databases of one kind (sqlite, postgresql or mysql)."""

    def __init__(self, kind: str, workdir: Path, pg_url: str, admin_python: str,
                 mysql_url: str = "mysql://root@127.0.0.1:3306") -> None:
        self.kind = kind
        self.workdir = workdir
        self.pg_url = pg_url.rstrip("/")
        self.mysql_url = mysql_url.rstrip("/")
        self.admin_python = admin_python

    @property
    def server_url(self) -> str:
        return self.mysql_url if self.kind == "mysql" else self.pg_url

    def _pg_admin(self, *statements: str) -> None:
        if self.kind == "mysql":
            subprocess.run([self.admin_python, "-c", _MYSQL_ADMIN_SCRIPT, self.mysql_url,
                            *statements], check=True, capture_output=True, text=True)
            return
        subprocess.run([self.admin_python, "-c", _PG_ADMIN_SCRIPT,
                        self.pg_url + "/postgres", *statements],
                       check=True, capture_output=True, text=True)

    def check(self) -> None:
        """Fail early, with a hint, when the database server is not there."""
        if self.kind == "sqlite":
            return
        try:
            self._pg_admin("SELECT 1")
        except subprocess.CalledProcessError as exc:
            raise SystemExit(f"cannot reach {self.kind} at {self.server_url}: "
                             f"{exc.stderr.strip().splitlines()[-1:]}\n"
                             "start it, pass --pg-url/--mysql-url, or use --db sqlite") from exc

    def create(self, name: str) -> Database:
        if self.kind == "sqlite":
            path = self.workdir / f"{name}.sqlite"
            for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                stale.unlink(missing_ok=True)
            return Database(url=f"sqlite:///{path}", drop=[], path=path)
        dbname = f"allotment_bench_{name}_{os.getpid()}".replace("-", "_")
        if self.kind == "mysql":
            self._pg_admin(f"DROP DATABASE IF EXISTS `{dbname}`", f"CREATE DATABASE `{dbname}`")
            return Database(url=f"{self.mysql_url}/{dbname}",
                            drop=[f"DROP DATABASE IF EXISTS `{dbname}`"])
        self._pg_admin(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)',
                       f'CREATE DATABASE "{dbname}"')
        return Database(url=f"{self.pg_url}/{dbname}",
                        drop=[f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)'])

    def destroy(self, db: Database) -> None:
        if db.path is not None:
            for path in (db.path, Path(f"{db.path}-wal"), Path(f"{db.path}-shm")):
                path.unlink(missing_ok=True)
        if db.drop:
            with contextlib.suppress(subprocess.CalledProcessError):
                self._pg_admin(*db.drop)


def write_config(directory: Path, database_url: str) -> Path:
    """The placement.conf both implementations read."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "placement.conf"
    path.write_text(
        "[DEFAULT]\n"
        "debug = False\n"
        "[api]\n"
        "auth_strategy = noauth2\n"
        "[placement_database]\n"
        f"connection = {database_url}\n"
        "sync_on_startup = True\n"
    )
    return path


def port_in_use(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class ServerCommand:
    """How to start one implementation, given a config directory and a port."""

    name: str
    binary: str  # allotment's CLI, or upstream venv's uwsgi
    workers: int
    threads: int

    def argv(self, conf: Path, port: int) -> list[str]:
        if self.name == "allotment":
            return [self.binary, "serve", "--config-file", str(conf), "--host", "127.0.0.1",
                    "--port", str(port), "--workers", str(self.workers),
                    "--threads", str(self.threads)]
        # --die-on-term: uwsgi's master otherwise treats SIGTERM as "reload".
        return [self.binary, "--http", f"127.0.0.1:{port}",
                "--module", "placement.wsgi.api:application",
                "--master", "--processes", str(self.workers), "--threads", str(self.threads),
                "--die-on-term", "--need-app"]

    def env(self, conf: Path) -> dict[str, str]:
        env = dict(os.environ)
        if self.name == "upstream":
            env["OS_PLACEMENT_CONFIG_DIR"] = str(conf.parent)
        return env


class RunningServer:
    """A server process (and its children) started by the harness."""

    def __init__(self, command: ServerCommand, conf: Path, port: int, log_path: Path) -> None:
        self.command = command
        self.conf = conf
        self.port = port
        self.log_path = log_path
        self.url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None

    def start(self, ready_timeout: float = 180.0) -> None:
        if port_in_use(self.port):
            raise RuntimeError(f"port {self.port} is already in use; pick another --port-base")
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child process
        # A session of its own, so stop() can end the whole process group by its id.
        self.process = subprocess.Popen(self.command.argv(self.conf, self.port),
                                        env=self.command.env(self.conf), stdout=log,
                                        stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        client = PlacementClient(self.url, timeout=5)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.command.name} exited with {self.process.returncode};"
                                   f" see {self.log_path}")
            try:
                if client.get("/").status == 200:
                    client.close()
                    return
            except (OSError, Exception):  # not listening yet
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"{self.command.name} not ready after {ready_timeout:g} s; "
                           f"see {self.log_path}")

    def worker_rss(self) -> list[int]:
        """Resident memory (bytes) of each worker: the children of the server process."""
        if self.process is None or self.process.poll() is not None:
            return []
        return worker_rss(self.process.pid)

    def stop(self) -> None:
        if self.process is None:
            return
        pgid = self.process.pid
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
            self.process.wait(timeout=10)
        # Workers may outlive the master for a moment; wait until the port is free.
        deadline = time.monotonic() + 15
        while port_in_use(self.port) and time.monotonic() < deadline:
            time.sleep(0.2)
        if port_in_use(self.port):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)
        self.process = None


def worker_rss(pid: int) -> list[int]:
    """Resident memory (bytes) of each child of the server process ``pid``."""
    found = []
    for child in _children(pid):
        try:
            status = Path(f"/proc/{child}/status").read_text()
        except OSError:
            continue
        found.extend(int(line.split()[1]) * 1024
                     for line in status.splitlines() if line.startswith("VmRSS:"))
    return found


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(child) for child in text.split()]


def _venv_has_upstream(venv: Path) -> bool:
    python = venv / "bin" / "python"
    if not (venv / "bin" / "uwsgi").exists() or not python.exists():
        return False
    probe = subprocess.run([str(python), "-c", "import placement.wsgi, psycopg2"],
                           capture_output=True)
    return probe.returncode == 0


def ensure_upstream_venv(venv: Path, upgrade: bool = False) -> None:
    """Install the latest openstack-placement and uwsgi into ``venv`` if not there yet."""
    if _venv_has_upstream(venv) and not upgrade:
        return
    print(f"installing upstream Placement into {venv} (takes a minute or two)...", flush=True)
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "--upgrade", "pip"], check=True)
    subprocess.run([*pip, "--upgrade", *UPSTREAM_PACKAGES], check=True)
    if not _venv_has_upstream(venv):
        raise SystemExit(f"upstream Placement is not usable in {venv}")


def upstream_version(venv: Path) -> str:
    out = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import importlib.metadata as m; print(m.version('openstack-placement'))"],
        capture_output=True, text=True)
    return out.stdout.strip() or "unknown"


def redact(url: str) -> str:
    """A database URL without its password, for the report."""
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urllib.parse.urlunsplit(parts._replace(netloc=netloc))
    return url
