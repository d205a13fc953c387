"""Test fixtures: the app in-process over real databases.

Every test that uses ``client`` runs once per backend: SQLite always, and
PostgreSQL and MariaDB/MySQL when reachable (CI makes sure they are). Each
backend gets a database of its own for the session, created and dropped
here; tables are emptied between tests.

ALLOTMENT_TEST_DATABASES=sqlite,postgresql,mysql selects backends;
ALLOTMENT_TEST_POSTGRESQL_URL / ALLOTMENT_TEST_MYSQL_URL name the servers.
"""

from __future__ import annotations

import os
import uuid

import pytest
import sqlalchemy as sa

from allotment import config
from allotment.db import migrate, standard_names
from allotment.db import tables as t
from allotment.db.engine import Database, create_engine, normalize_url
from allotment.wsgi import make_app
from tests.client import PlacementClient

SERVER_URLS = {
    "postgresql": os.environ.get("ALLOTMENT_TEST_POSTGRESQL_URL",
                                 "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"),
    "mysql": os.environ.get("ALLOTMENT_TEST_MYSQL_URL",
                            "mysql+pymysql://root@127.0.0.1:3306/mysql"),
}


def _backends() -> list[str]:
    chosen = os.environ.get("ALLOTMENT_TEST_DATABASES", "sqlite,postgresql,mysql")
    return [name.strip() for name in chosen.split(",") if name.strip()]


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
