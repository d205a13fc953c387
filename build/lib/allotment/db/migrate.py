"""Schema upgrades (Alembic) and the synchronisation of standard names."""

from __future__ import annotations

import contextlib
import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from allotment.db.engine import write_transaction

MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")
VERSION_TABLE = "allotment_alembic_version"


def _config(connection: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS_DIR)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; safe when several processes race.

    Concurrent upgrades (several workers starting at once) are serialised by
    a lock held until the upgrade has COMMITTED, so the next one sees its
    version row: a transaction-scoped advisory lock on PostgreSQL, and on
    MySQL a named lock on a connection of its own, released after the commit
    (MySQL's DDL commits implicitly, but the version row is written after).
    """
    with contextlib.ExitStack() as stack:
        if engine.dialect.name == "mysql":
            lock_conn = stack.enter_context(engine.connect())
            lock_conn.exec_driver_sql("SELECT GET_LOCK('allotment_migrate', 60)")
            stack.callback(lock_conn.exec_driver_sql,
                           "SELECT RELEASE_LOCK('allotment_migrate')")
        with write_transaction(engine) as conn:
            if engine.dialect.name == "postgresql":
                conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7226051)")
            command.upgrade(_config(conn), revision)


def stamp(engine: Engine, revision: str) -> None:
    """Record ``revision`` as the schema's without running any migration
    (alembic's ``CommandError`` when no such revision exists)."""
    with write_transaction(engine) as conn:
        command.stamp(_config(conn), revision)


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def head() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()
