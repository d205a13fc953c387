"""Schema upgrades (Alembic) and the synchronisation of standard names."""

from __future__ import annotations

import os

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Engine

from allotment.db.engine import write_transaction

MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")
VERSION_TABLE = "allotment_alembic_version"


def _config(connection=None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", MIGRATIONS_DIR)
    if connection is not None:
        cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Bring the schema to ``revision``; safe when several processes race."""
    with write_transaction(engine) as conn:
        if engine.dialect.name == "postgresql":
            # Serialise concurrent upgrades (several workers starting at once).
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7226051)")
        elif engine.dialect.name == "mysql":
            conn.exec_driver_sql("SELECT GET_LOCK('allotment_migrate', 60)")
        command.upgrade(_config(conn), revision)
        if engine.dialect.name == "mysql":
            conn.exec_driver_sql("SELECT RELEASE_LOCK('allotment_migrate')")


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def head() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()
