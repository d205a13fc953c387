"""Schema upgrades (Alembic) and the synchronisation of standard names."""

from __future__ import annotations

import contextlib
import os

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from allotment.db import tables
from allotment.db.engine import write_transaction

MIGRATIONS_DIR = os.path.join(os.path.dirname(__file__), "migrations")
VERSION_TABLE = "allotment_alembic_version"
# Upstream's own Alembic version table (a Placement database upstream made).
UPSTREAM_VERSION_TABLE = "alembic_version"


class ForeignDatabase(RuntimeError):
    """The database holds another application's tables: nothing was written."""


def _versions(conn: Connection, table: str) -> list[str]:
    return [str(v) for v in conn.execute(sa.text(f"SELECT version_num FROM {table}")).scalars()]


def require_placement_database(conn: Connection) -> None:
    """``ForeignDatabase`` (one line naming what was found) unless the database is
    empty, allotment's, or Placement's: the rule every command that writes the
    schema applies before it writes anything (``upgrade``, ``stamp``).

    - allotment's version table with a revision: allotment's database.
    - Otherwise each table of upstream's names must have upstream's columns (a
      ``projects(id, name)`` is another application's); and tables of other names
      are only accepted beside upstream's version (a Placement database that grew
      a table of the operator's), never in a database without a Placement version.
    An empty database, or one holding only an empty allotment version table (an
    earlier ``db stamp`` that failed), is accepted.
    """
    inspector = sa.inspect(conn)
    found = set(inspector.get_table_names())
    if VERSION_TABLE in found and _versions(conn, VERSION_TABLE):
        return
    for name in sorted(found & set(tables.metadata.tables)):
        expected = {column.name for column in tables.metadata.tables[name].columns}
        columns = [column["name"] for column in inspector.get_columns(name)]
        missing = expected - set(columns)
        if missing:
            raise ForeignDatabase(
                f"this is not a Placement database: table {name} has columns "
                f"({', '.join(columns)}), Placement's has {', '.join(sorted(missing))} too; "
                "nothing was written")
    others = sorted(found - set(tables.metadata.tables) - {VERSION_TABLE, UPSTREAM_VERSION_TABLE})
    placement_version = UPSTREAM_VERSION_TABLE in found and _versions(conn,
                                                                      UPSTREAM_VERSION_TABLE)
    if others and not placement_version:
        shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5
                                         else "")
        raise ForeignDatabase(
            f"this is not a Placement database: it holds other tables ({shown}) and no "
            "Placement version; nothing was written")


def _check_placement_database(engine: Engine) -> None:
    """``require_placement_database`` in a read transaction of its own."""
    with engine.connect() as conn:
        require_placement_database(conn)


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
            require_placement_database(conn)
            command.upgrade(_config(conn), revision)


def stamp(engine: Engine, revision: str) -> None:
    """Record ``revision`` as the schema's without running any migration
    (alembic's ``CommandError`` when no such revision exists, ``ForeignDatabase``
    for another application's database: both before anything is written)."""
    ScriptDirectory.from_config(_config()).get_revisions(revision)
    _check_placement_database(engine)
    with write_transaction(engine) as conn:
        command.stamp(_config(conn), revision)


def current(engine: Engine) -> str | None:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"version_table": VERSION_TABLE})
        return ctx.get_current_revision()


def head() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()
