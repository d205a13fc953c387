"""Test fixtures: the app in-process over real databases.

Every test that uses ``client`` runs once per backend: SQLite, PostgreSQL and
MariaDB/MySQL. Each backend gets a database of its own for the session,
created and dropped here; tables are emptied between tests.

ALLOTMENT_TEST_DATABASES=sqlite,postgresql,mysql selects backends;
ALLOTMENT_TEST_POSTGRESQL_URL / ALLOTMENT_TEST_MYSQL_URL name the servers.
A selected server that cannot be reached stops the session before any test
runs (never a skip: CI must not pass without a backend).
"""

from __future__ import annotations

import os
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url
from sqlalchemy.pool import NullPool

from allotment import config
from allotment.db import migrate, standard_names
from allotment.db import tables as t
from allotment.db.engine import Database, create_engine, normalize_url
from allotment.wsgi import make_app
from tests.support.client import PlacementClient

SERVER_URLS = {
    "postgresql": os.environ.get("ALLOTMENT_TEST_POSTGRESQL_URL",
                                 "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("ALLOTMENT_TEST_MYSQL_URL",
                            "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}


def _backends() -> list[str]:
    chosen = os.environ.get("ALLOTMENT_TEST_DATABASES", "sqlite,postgresql,mysql")
    return [name.strip() for name in chosen.split(",") if name.strip()]


def _url_variable(backend: str) -> str:
    return f"ALLOTMENT_TEST_{backend.upper()}_URL"


def connect_failure(backend: str, url: str, timeout: float = 3.0) -> str | None:
    """Why a connection to the ``backend`` server at ``url`` fails; None if it works."""
    # libpq counts whole seconds, at least 2; PyMySQL's connect_timeout ends with the
    # TCP connect, so the server's greeting needs a read_timeout.
    connect_args: dict[str, float] = (
        {"connect_timeout": max(2, round(timeout))} if backend == "postgresql"
        else {"connect_timeout": timeout, "read_timeout": timeout})
    engine = None
    try:
        engine = sa.create_engine(normalize_url(url), poolclass=NullPool,
                                  connect_args=connect_args)
        with engine.connect():
            return None
    except Exception as exc:  # a missing driver, a refusal, a timeout, a wrong password
        lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        return lines[0] if lines else type(exc).__name__
    finally:
        if engine is not None:
            engine.dispose()


def unreachable_servers_message(servers: dict[str, str], timeout: float = 3.0) -> str | None:
    """One message naming each server of ``servers`` (backend -> URL) that cannot be
    reached and saying how to run without it; None when all answer."""
    failed: list[str] = []
    lines: list[str] = []
    for backend, url in servers.items():
        reason = connect_failure(backend, url, timeout)
        if reason is not None:
            failed.append(backend)
            shown = make_url(url).render_as_string(hide_password=True)
            lines.append(f"cannot connect to the {backend} test database at {shown}: {reason}")
    if not failed:
        return None
    variables = " / ".join(_url_variable(backend) for backend in failed)
    lines.append(f"Start {'them' if len(failed) > 1 else 'it'}, limit the run to the "
                 "backends you have "
                 "(ALLOTMENT_TEST_DATABASES=sqlite make test), "
                 f"or point {variables} at another server.")
    return "\n".join(lines)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "faults: stops and restarts private database servers under a live allotment serve "
        "(tests/live/test_database_outage.py), and the fault campaign on a private Galera "
        "cluster (tests/faults/, root and iptables; about 8 minutes); select with -m faults, "
        "deselect with -m 'not faults'")
    config.addinivalue_line(
        "markers",
        "galera: claims through three live allotment serve on a private 3-node MariaDB "
        "Galera cluster, one node restarted mid-load (tests/live/test_galera.py; select "
        "with -m galera, deselect with -m 'not galera')")
    config.addinivalue_line(
        "markers",
        "keystone: allotment behind a real Keystone 30.0.0 on loopback, held to upstream "
        "16.0.0's recorded decisions (tests/keystone/; select with -m keystone, deselect "
        "with -m 'not keystone')")
    config.addinivalue_line(
        "markers",
        "load: ten clients sending the worst request of every kind allotment added to a "
        "live allotment serve on PostgreSQL and MariaDB, probes and claims timed "
        "(tests/live/test_bounded_costs.py, about a minute per database; run in CI; "
        "deselect with -m 'not load')")
    config.addinivalue_line(
        "markers",
        "network: asks the package index (tests/test_dependencies.py's pip resolution, "
        "tests/live/test_packaging.py's isolated build; "
        "deselect with -m 'not network' when offline)")


def pytest_sessionstart(session: pytest.Session) -> None:
    servers = {backend: SERVER_URLS[backend] for backend in _backends()
               if backend in SERVER_URLS}
    message = unreachable_servers_message(servers)
    if message is not None:
        raise pytest.UsageError(message)


def _create_server_database(backend: str) -> str:
    admin_url = normalize_url(SERVER_URLS[backend])
    name = f"allotment_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.exec_driver_sql(f"CREATE DATABASE {name}")
    engine.dispose()
    return admin_url.set(database=name).render_as_string(hide_password=False)


def _drop_server_database(backend: str, url: str) -> None:
    admin_url = normalize_url(SERVER_URLS[backend])
    name = normalize_url(url).database
    engine = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        if backend == "postgresql":
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        else:
            conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name}")
    engine.dispose()


class BackendDatabase:
    """One database for the whole session on one backend."""

    def __init__(self, backend: str, tmp_dir: str) -> None:
        self.backend = backend
        if backend == "sqlite":
            self.url = "sqlite:///" + os.path.join(tmp_dir, "allotment-test.sqlite")
        else:
            self.url = _create_server_database(backend)
        self.engine = create_engine(self.url)
        migrate.upgrade(self.engine)
        standard_names.sync(self.engine)
        self.db = Database(self.engine)

    def reset(self) -> None:
        """Empty every table but the standard names (quick between tests)."""
        with self.engine.begin() as conn:
            conn.execute(t.resource_providers.update().values(root_provider_id=None,
                                                               parent_provider_id=None))
            for table in reversed(t.metadata.sorted_tables):
                if table.name in ("resource_classes", "traits"):
                    continue
                conn.execute(table.delete())
            conn.execute(t.resource_classes.delete().where(t.resource_classes.c.id >= 10000))
            conn.execute(t.traits.delete().where(t.traits.c.name.like("CUSTOM\\_%",
                                                                      escape="\\")))
            # allotment_changes is not emptied: an app may live across resets
            # (hypothesis examples) and its read model must see these deletions.
            # The history is: the deletions above were recorded in it.
            conn.execute(t.allocation_history.delete())
            conn.execute(t.inventory_history.delete())

    def close(self) -> None:
        self.engine.dispose()
        if self.backend != "sqlite":
            _drop_server_database(self.backend, self.url)


@pytest.fixture(scope="session")
def backend_databases(tmp_path_factory):
    created: dict[str, BackendDatabase] = {}
    tmp_dir = str(tmp_path_factory.mktemp("db"))

    def get(backend: str) -> BackendDatabase:
        if backend not in created:
            created[backend] = BackendDatabase(backend, tmp_dir)
        return created[backend]

    yield get
    for database in created.values():
        database.close()


@pytest.fixture(params=_backends())
def database(request, backend_databases) -> BackendDatabase:
    database = backend_databases(request.param)
    database.reset()
    return database


def make_conf(database_url: str, **overrides):
    conf = config.load([])
    conf.set_override("connection", database_url, group="placement_database")
    conf.set_override("auth_strategy", "noauth2", group="api")
    for key, value in overrides.items():
        group, _, name = key.rpartition("__")
        conf.set_override(name, value, group=group or None)
    return conf


@pytest.fixture
def conf(database):
    return make_conf(database.url)


@pytest.fixture
def app(conf, database):
    return make_app(conf, db=database.db, prepare=False)


@pytest.fixture
def client(app) -> PlacementClient:
    return PlacementClient(app)
