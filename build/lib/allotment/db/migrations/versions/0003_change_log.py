"""The change log: one row per changed row of the tables candidates read.

Why: each worker keeps a read model of providers, inventories, usage, traits
and aggregates in memory (``allotment.candidates.model``) and must see every
change committed by anyone -- our other workers and hosts, upstream
Placement serving the same database during a switch, ``placement-manage``, an
operator's SQL. Only the database sees all of them, so triggers here append a
row to ``allotment_changes`` for every inserted, updated or deleted row of
those tables: its kind (``KINDS``) and the provider (or name) id it touches.
Readers poll it incrementally; how they close the commit-order gap is
described in ``allotment.candidates.feed``.

No hot row: each trigger only inserts a new row; ids come from a sequence
(PostgreSQL), auto-increment (MySQL, a short mutex per statement, not a lock
held to commit) or SQLite's AUTOINCREMENT (writers there are serial anyway).
On PostgreSQL each row also carries the inserting transaction's id, which
the reader compares with its snapshots.

Upstream's tables stay exactly as they are.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

TABLE = "allotment_changes"

# table -> (kind code, the column naming what changed). Kept in step with
# allotment.candidates.feed.Kind.
KINDS = {
    "resource_providers": (1, "id"),
    "inventories": (2, "resource_provider_id"),
    "allocations": (3, "resource_provider_id"),
    "resource_provider_traits": (4, "resource_provider_id"),
    "resource_provider_aggregates": (5, "resource_provider_id"),
    "traits": (6, "id"),
    "resource_classes": (7, "id"),
    "placement_aggregates": (8, "id"),
}

_PG_FUNCTION = """
CREATE FUNCTION allotment_log_{table}() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    xid bigint := pg_current_xact_id()::text::bigint;
BEGIN
    IF TG_OP <> 'INSERT' THEN
        INSERT INTO allotment_changes (kind, ref, xid) VALUES ({kind}, OLD.{column}, xid);
    END IF;
    IF TG_OP = 'INSERT' OR (TG_OP = 'UPDATE' AND NEW.{column} IS DISTINCT FROM OLD.{column}) THEN
        INSERT INTO allotment_changes (kind, ref, xid) VALUES ({kind}, NEW.{column}, xid);
    END IF;
    RETURN NULL;
END $$;
"""

_PG_TRIGGER = ("CREATE TRIGGER allotment_log AFTER INSERT OR UPDATE{columns} OR DELETE ON {table} "
               "FOR EACH ROW EXECUTE FUNCTION allotment_log_{table}()")

# PostgreSQL, allocations: one trigger per statement (a claim writes its rows
# in one INSERT), one change row per provider it touched.
_PG_STATEMENT_FUNCTION = """
CREATE FUNCTION allotment_log_{table}_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO allotment_changes (kind, ref, xid)
        SELECT DISTINCT {kind}, {column}, pg_current_xact_id()::text::bigint FROM new_rows;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO allotment_changes (kind, ref, xid)
        SELECT DISTINCT {kind}, {column}, pg_current_xact_id()::text::bigint FROM old_rows;
    ELSE
        INSERT INTO allotment_changes (kind, ref, xid)
        SELECT {kind}, changed.{column}, pg_current_xact_id()::text::bigint
          FROM (SELECT {column} FROM old_rows UNION SELECT {column} FROM new_rows) changed;
    END IF;
    RETURN NULL;
END $$;
"""
_PG_STATEMENT_TRIGGERS = [
    "CREATE TRIGGER allotment_log_insert AFTER INSERT ON {table} "
    "REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION allotment_log_{table}_rows()",
    "CREATE TRIGGER allotment_log_delete AFTER DELETE ON {table} "
    "REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION allotment_log_{table}_rows()",
    "CREATE TRIGGER allotment_log_update AFTER UPDATE ON {table} "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT "
    "EXECUTE FUNCTION allotment_log_{table}_rows()",
]
PG_PER_STATEMENT = ("allocations",)

# Updates that matter per table (None: any). A provider's generation moves with
# every claim and the read model does not hold it: no change row for that.
WATCHED = {"resource_providers": ("uuid", "name", "parent_provider_id", "root_provider_id")}

# MySQL and SQLite: one trigger per event.
_MYSQL_TRIGGER = ("CREATE TRIGGER allotment_log_{table}_{name} AFTER {event} ON {table} "
                  "FOR EACH ROW {body}")
_SQLITE_TRIGGER = ("CREATE TRIGGER allotment_log_{table}_{name} AFTER {event} ON {table} "
                   "FOR EACH ROW BEGIN {body} END")


def _bodies(kind: int, column: str, sqlite: bool,
            watched: tuple[str, ...] | None) -> dict[str, str]:
    new = f"INSERT INTO {TABLE} (kind, ref) VALUES ({kind}, NEW.{column});"
    old = f"INSERT INTO {TABLE} (kind, ref) VALUES ({kind}, OLD.{column});"
    if sqlite:
        # SQLite has no IF: a second trigger on the key change does it (and
        # "UPDATE OF" on the trigger narrows the columns).
        return {"insert": new, "delete": old, "update": old}
    # Backquoted: since MariaDB 10.7 UUID is also a type name (see migration 0002).
    changed = "TRUE" if watched is None else " OR ".join(
        f"NOT (NEW.`{c}` <=> OLD.`{c}`)" for c in watched)
    return {"insert": new, "delete": old,
            "update": f"BEGIN IF {changed} THEN {old} END IF; "
                      f"IF NOT (NEW.{column} <=> OLD.{column}) THEN {new} END IF; END"}


def upgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    op.create_table(
        TABLE,
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True,
                  autoincrement=True),
        sa.Column("kind", sa.SmallInteger, nullable=False),
        sa.Column("ref", sa.Integer, nullable=False),
        sa.Column("xid", sa.BigInteger, nullable=True),
        sa.Column("created_at", sa.DateTime, nullable=False,
                  server_default=sa.func.current_timestamp()),
        sqlite_autoincrement=True,
        mysql_engine="InnoDB",
    )
    op.create_index("allotment_changes_created_at_idx", TABLE, ["created_at"])
    if dialect == "postgresql":
        op.create_index("allotment_changes_xid_idx", TABLE, ["xid"])
    for table, (kind, column) in KINDS.items():
        watched = WATCHED.get(table)
        columns = f" OF {', '.join(watched)}" if watched else ""
        if dialect == "postgresql" and table in PG_PER_STATEMENT:
            bind.exec_driver_sql(_PG_STATEMENT_FUNCTION.format(table=table, kind=kind,
                                                               column=column))
            for statement in _PG_STATEMENT_TRIGGERS:
                bind.exec_driver_sql(statement.format(table=table))
            continue
        if dialect == "postgresql":
            bind.exec_driver_sql(_PG_FUNCTION.format(table=table, kind=kind, column=column))
            bind.exec_driver_sql(_PG_TRIGGER.format(table=table, columns=columns))
            continue
        bodies = _bodies(kind, column, sqlite=dialect == "sqlite", watched=watched)
        template = _SQLITE_TRIGGER if dialect == "sqlite" else _MYSQL_TRIGGER
        for event, body in bodies.items():
            when = event.upper() + (columns if dialect == "sqlite" and event == "update" else "")
            bind.exec_driver_sql(template.format(table=table, name=event.upper(), event=when,
                                                 body=body))
        if dialect == "sqlite":
            bind.exec_driver_sql(
                f"CREATE TRIGGER allotment_log_{table}_rekey AFTER UPDATE OF {column} "
                f"ON {table} FOR EACH ROW WHEN NEW.{column} IS NOT OLD.{column} "
                f"BEGIN INSERT INTO {TABLE} (kind, ref) VALUES ({kind}, NEW.{column}); END")


def downgrade() -> None:
    bind = op.get_bind()
    dialect = bind.dialect.name
    for table in KINDS:
        if dialect == "postgresql":
            for name in ("allotment_log", "allotment_log_insert", "allotment_log_delete",
                         "allotment_log_update"):
                bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name} ON {table}")
            bind.exec_driver_sql(f"DROP FUNCTION IF EXISTS allotment_log_{table}()")
            bind.exec_driver_sql(f"DROP FUNCTION IF EXISTS allotment_log_{table}_rows()")
            continue
        for event in ("insert", "update", "delete", "rekey"):
            if event == "rekey" and dialect != "sqlite":
                continue
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS allotment_log_{table}_{event.upper()}"
                                 if event != "rekey" else
                                 f"DROP TRIGGER IF EXISTS allotment_log_{table}_rekey")
    op.drop_table(TABLE)
